"""Composing a run's config exactly as `python -m grpo` composes it, outside Hydra's app too.

    cfg = compose(["+env=alphabet_sort", "language=sv"])   # the composed DictConfig
    settings = load_settings(overrides)                    # typed settings, resume= applied
    settings, plan = load_run(overrides)                   # the same, and the resume plan
    group_options("env")                                   # the options of a config group

Used by the front door (grpo/cli/: preflight, the small commands) and by whatever else composes a
config: the reward model's synthetic pairs compose other envs' presets with it. Light: Hydra and
OmegaConf only, no torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from grpo.config import GrpoConfig, register_schema, to_settings
from grpo.files import register_resolvers
from grpo.run.resume import ResumePlan

CONFIG_MODULE = "grpo.conf"
CONFIG_NAME = "config"


def _config_module() -> contextlib.AbstractContextManager[Any]:
    """Hydra initialised on our config tree: inside a running `python -m grpo` it already is (a
    second initialisation raises), anywhere else for the duration of the block."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return contextlib.nullcontext()
    return initialize_config_module(CONFIG_MODULE, version_base="1.3")


def compose(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The run's config for `overrides`, composed exactly as `python -m grpo` composes it."""
    from hydra import compose as hydra_compose

    register_schema()
    register_resolvers()  # the run dir, resolved only when the hydra node is
    register_options_resolver()
    with _config_module():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=return_hydra_config)


def group_options(group: str) -> list[str]:
    """The options of a config group (e.g. the available envs), sorted."""
    from hydra.core.global_hydra import GlobalHydra

    with _config_module():
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


# resolver of the --help page (conf/hydra/help/grpo.yaml): ${grpo_options:env} lists the envs
OPTIONS_RESOLVER = "grpo_options"


def register_options_resolver() -> None:
    """Register ${grpo_options:GROUP}: the options of a config group, comma-separated."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(OPTIONS_RESOLVER):
        OmegaConf.register_new_resolver(OPTIONS_RESOLVER, lambda group: ", ".join(group_options(str(group))))


def config_groups() -> set[str]:
    """The top-level config group names (env, model, language, ...)."""
    from hydra.core.global_hydra import GlobalHydra

    with _config_module():
        return set(GlobalHydra.instance().config_loader().list_groups(""))


def run_config(
    cfg: DictConfig, overrides: Sequence[str], plan: ResumePlan | None = None
) -> tuple[DictConfig, ResumePlan | None]:
    """The config a run uses and its resume plan: the composed config and None, or with resume=
    the resumed run's settings (grpo/run/resume.py) and the plan, read here unless the caller
    read it already (`plan`: once per process)."""
    if not cfg.get("resume"):
        return cfg, None
    if plan is None:
        plan = ResumePlan.read(cfg.resume)
    return plan.apply(cfg, list(overrides), config_groups())


def load_run(overrides: Sequence[str] = ()) -> tuple[GrpoConfig, ResumePlan | None]:
    """The typed settings `python -m grpo <overrides>` runs with (composed, not checked), and its
    resume plan (None without resume=)."""
    cfg, plan = run_config(compose(overrides), overrides)
    return to_settings(cfg), plan


def load_settings(overrides: Sequence[str] = ()) -> GrpoConfig:
    """The typed settings `python -m grpo <overrides>` runs with, composed but not checked."""
    return load_run(overrides)[0]


# OmegaConf's words for a value of the wrong type -> what the key takes, in grpo's words
_WANTED = (("to Integer", "an integer"), ("to Float", "a number"), ("valid bool", "true or false"))


def type_mismatch(ex: BaseException) -> str | None:
    """One line for an override whose value does not fit the key's type (`trainer.max_steps=ten`),
    naming the key, the value, what it takes and its current value; None for other errors."""
    from omegaconf import ValueNode
    from omegaconf.errors import ValidationError

    seen: set[int] = set()
    while ex is not None and id(ex) not in seen:
        seen.add(id(ex))
        if isinstance(ex, ValidationError) and getattr(ex, "full_key", None):
            wanted = next((w for words, w in _WANTED if words in str(ex.msg)), None)
            if wanted is None:
                return None
            value = ex.value if isinstance(ex.value, str) else repr(ex.value)
            node = ex.child_node
            current = node._value() if isinstance(node, ValueNode) else None
            if isinstance(current, bool):
                current = str(current).lower()
            example = f" (now {current})" if isinstance(current, int | float | str) else ""
            return f"{ex.full_key}={value}: expected {wanted}{example}"
        ex = ex.__cause__ or ex.__context__
    return None


def one_line(ex: BaseException) -> str:
    """An exception and its causes as one line (Hydra and OmegaConf messages span several)."""
    parts: list[str] = []
    seen: set[int] = set()
    while ex is not None and id(ex) not in seen:
        seen.add(id(ex))
        for line in str(ex).splitlines():
            line = line.strip()
            if line and line not in parts and not _is_noise(line):
                parts.append(line)
        ex = ex.__cause__ or ex.__context__
    return "; ".join(parts) or "unknown error"


def _is_noise(line: str) -> bool:
    """Lines of Hydra/OmegaConf messages that add nothing on a one-line error."""
    return (
        line == "None"
        or "$VALUE" in line
        or line.startswith(("object_type=", "reference_type=", "Config search path", "See https://hydra.cc"))
    )
