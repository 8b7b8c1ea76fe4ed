"""LoRA adapter config from `model.lora`. Only the config is built here: TRL wraps the model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo.errors import UserError
from grpo.models.loading import _field

if TYPE_CHECKING:
    import peft


def lora_config(model_cfg: Any) -> peft.LoraConfig | None:
    """peft.LoraConfig for a causal LM, or None when `model.lora.enabled` is false."""
    lora = _field(model_cfg, "lora") or {}
    if not isinstance(lora, dict):
        # a LoraConfig dataclass (structured config used without OmegaConf)
        lora = {k: getattr(lora, k) for k in ("enabled", "r", "alpha", "dropout", "target_modules")}
    if not lora.get("enabled", False):
        return None
    r, alpha, dropout = lora.get("r", 16), lora.get("alpha", 32), lora.get("dropout", 0.05)
    targets = lora.get("target_modules")
    if not isinstance(r, int) or r <= 0:
        raise UserError(f"model.lora.r={r!r} must be a positive integer (the adapter rank), e.g. 16")
    if not isinstance(alpha, int | float) or alpha <= 0:
        raise UserError(f"model.lora.alpha={alpha!r} must be positive (scale = alpha / r), e.g. 32")
    if not isinstance(dropout, int | float) or not 0.0 <= dropout < 1.0:
        raise UserError(f"model.lora.dropout={dropout!r} must be in [0, 1)")
    if isinstance(targets, str):
        targets = [targets]
    if not targets or not all(isinstance(t, str) and t for t in targets):
        raise UserError(
            "model.lora.target_modules must be a non-empty list of module names, e.g. [q_proj, v_proj]"
        )

    from peft import LoraConfig, TaskType

    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=float(dropout),
        target_modules=list(targets),
        task_type=TaskType.CAUSAL_LM,
    )
