"""Policy model + tokenizer loading (hub id or local dir), the offline tiny model, and LoRA.

Importing this package is light: torch / transformers / peft load inside the functions.
"""

from grpo.models.loading import (
    load_policy,
    load_tokenizer,
    render_chat,
    resolve_dtype,
    save_pretrained_tiny,
)
from grpo.models.lora import lora_config
from grpo.models.tiny import tiny_tokenizer

__all__ = [
    "load_policy",
    "load_tokenizer",
    "lora_config",
    "render_chat",
    "resolve_dtype",
    "save_pretrained_tiny",
    "tiny_tokenizer",
]
