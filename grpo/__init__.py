"""grpo: a config-driven Hydra framework for GRPO fine-tuning of language models, in any language.

The Python API (grpo/api.py), `python -m grpo`'s path from a notebook or a script:

    from grpo import compose, run, sweep
    result = run(compose(["+env=alphabet_sort", "trainer.max_steps=20"]))

Importing grpo is light: the API's names load grpo.api when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo.api import Composed, RunResult, compose, run, sweep

__version__ = "0.1.0"
__all__ = ["Composed", "RunResult", "compose", "run", "sweep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import grpo.api

        return getattr(grpo.api, name)
    raise AttributeError(f"module 'grpo' has no attribute {name!r}")
