"""The registry grpo/cli/checks.py walks every settings rule: each public `check_*` function of a
grpo/<package>/checks.py is called by `check` or `check_built_env`, so a rule written next to its
package cannot be forgotten there, and one dropped from the registry is noticed."""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Iterable
from pathlib import Path

import grpo.cli.checks as registry

PACKAGE = Path(registry.__file__).resolve().parents[1]
WALKS = (registry.check, registry.check_built_env)


def rule_modules() -> list[types.ModuleType]:
    """grpo.<package>.checks for every package but the registry's own."""
    return [
        importlib.import_module(f"grpo.{path.parent.name}.checks")
        for path in sorted(PACKAGE.glob("*/checks.py"))
        if path.parent.name != "cli"
    ]


def rules_of(module: types.ModuleType) -> list[Callable[..., None]]:
    """The public rules a module defines: its functions named check_*."""
    return [
        fn
        for name, fn in vars(module).items()
        if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__
    ]


def unregistered(walks: Iterable[Callable[..., None]], modules: Iterable[types.ModuleType]) -> list[str]:
    """module.rule for every rule of `modules` that no walk calls by name."""
    called = {id(v) for walk in walks for v in inspect.getclosurevars(walk).globals.values()}
    return [f"{fn.__module__}.{fn.__name__}" for m in modules for fn in rules_of(m) if id(fn) not in called]


def test_every_rule_module_has_rules_and_the_registry_calls_each():
    modules = rule_modules()
    names = {m.__name__ for m in modules}
    assert {"grpo.train.checks", "grpo.evaluation.checks", "grpo.reward_model.checks"} <= names
    assert all(rules_of(m) for m in modules), [m.__name__ for m in modules if not rules_of(m)]
    assert unregistered(WALKS, modules) == []


def test_a_rule_dropped_from_the_registry_is_found():
    """`check` run without its sft rule: the check above names the rule it lost."""
    without_sft = {k: v for k, v in vars(registry).items() if k != "check_sft"}
    dropped = types.FunctionType(registry.check.__code__, without_sft, "check")
    assert unregistered([dropped, registry.check_built_env], rule_modules()) == ["grpo.sft.checks.check_sft"]
