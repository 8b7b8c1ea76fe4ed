"""grpo: a config-driven Hydra framework for GRPO fine-tuning of language models, in any language.

The Python API (grpo/api.py), `python -m grpo`'s path from a notebook or a script:

    from grpo import compose, run, sweep
    result = run(compose(["+env=alphabet_sort", "trainer.max_steps=20"]))

Importing grpo is light: the API's names load grpo.api when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# `grpo.run` and `grpo.compose` name both a module of grpo (the run-bookkeeping subpackage
# grpo/run/, the composition grpo/compose.py) and an API function. Python binds a submodule to its
# parent's attribute once, when the submodule first loads: loaded here first (the package's
# __init__ is a docstring; grpo.compose takes ~0.09 s, which every command pays anyway), the names
# are then the functions' for good, whatever imports their modules later. Before, `from grpo import
# compose, run` gave the modules in any process that had already imported them (every run does).
import grpo.compose as _compose_module  # noqa: F401
import grpo.run as _run_package  # noqa: F401

if TYPE_CHECKING:
    from grpo.api import Composed, RunResult, sweep

__version__ = "0.1.0"
__all__ = ["Composed", "RunResult", "compose", "run", "sweep"]


def compose(overrides: Any = ()) -> Any:
    """The run `python -m grpo OVERRIDES` would run, composed and checked: grpo.api.compose (its
    docstring says what it takes and returns)."""
    from grpo.api import compose as api_compose

    return api_compose(overrides)


def run(config: Any, *, run_dir: Any = None) -> Any:
    """Run every stage of a run in this process: grpo.api.run (its docstring says what it takes
    and returns)."""
    from grpo.api import run as api_run

    return api_run(config, run_dir=run_dir)


def __getattr__(name: str) -> Any:
    if name in __all__:
        import grpo.api

        return getattr(grpo.api, name)
    raise AttributeError(f"module 'grpo' has no attribute {name!r}")
