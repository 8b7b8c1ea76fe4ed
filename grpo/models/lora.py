"""LoRA adapter config from `model.lora`. Only the config is built here: TRL wraps the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo.config import LoraConfig

if TYPE_CHECKING:
    import peft


def lora_config(lora: LoraConfig) -> peft.LoraConfig | None:
    """peft.LoraConfig for a causal LM, or None when `model.lora.enabled` is false."""
    if not lora.enabled:
        return None
    from peft import LoraConfig as PeftLoraConfig
    from peft import TaskType

    return PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type=TaskType.CAUSAL_LM,
    )
