"""Policy model + tokenizer loading (hub id or local dir), the offline tiny model, and LoRA.

Importing this package is light: torch / transformers / peft load inside the functions, and the
modules behind the names below load on first use, so the settings rules (grpo/models/checks.py)
import none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo.models.loading import (
        load_policy,
        load_tokenizer,
        render_chat,
        resolve_dtype,
        save_pretrained_tiny,
    )
    from grpo.models.lora import lora_config
    from grpo.models.tiny import tiny_tokenizer

# name -> the module of this package that defines it
_EXPORTS = {
    "load_policy": "loading",
    "load_tokenizer": "loading",
    "render_chat": "loading",
    "resolve_dtype": "loading",
    "save_pretrained_tiny": "loading",
    "lora_config": "lora",
    "tiny_tokenizer": "tiny",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


__all__ = [
    "load_policy",
    "load_tokenizer",
    "lora_config",
    "render_chat",
    "resolve_dtype",
    "save_pretrained_tiny",
    "tiny_tokenizer",
]
