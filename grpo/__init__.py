"""grpo: a config-driven Hydra framework for GRPO fine-tuning of language models, in any language.

The Python API (grpo/api.py), `python -m grpo`'s path from a notebook or a script:

    from grpo import compose, run, sweep
    result = run(compose(["+env=alphabet_sort", "trainer.max_steps=20"]))

Importing grpo is light: the API's names load grpo.api when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# `grpo.run` names both the run-bookkeeping subpackage (grpo/run/) and the API's `run()`. Python
# binds a subpackage to its parent's attribute once, when the subpackage first loads: loaded here
# first (its __init__ is a docstring), the name is then the function's for good, whatever imports
# grpo.run.<module> later. Before, `from grpo import run` gave the subpackage in any process that
# had already imported one of its modules (every run does).
import grpo.run as _run_package  # noqa: F401

if TYPE_CHECKING:
    from grpo.api import Composed, RunResult, compose, sweep

__version__ = "0.1.0"
__all__ = ["Composed", "RunResult", "compose", "run", "sweep"]


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
