"""TRL's config objects (GRPOConfig, SFTConfig, RewardConfig) built from our settings.

An unknown field (a typo in `*.extra`, a field another TRL version dropped) or TRL's own
rejection of a value is a one-line UserError naming the config block to fix (`build_trl_config`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grpo.errors import UserError


def build_trl_config(config_cls: type, kwargs: dict[str, Any], block: str, extra_key: str) -> Any:
    """`config_cls(**kwargs)`; `block` names our config section (e.g. "trainer"), `extra_key`
    the key where users pass extra TRL fields (e.g. "trainer.extra")."""
    known = {f.name for f in dataclasses.fields(config_cls)}
    kwargs = _checkpointing_spelling(kwargs, known)
    unknown = sorted(k for k in kwargs if k not in known)
    if unknown:
        raise UserError(f"{extra_key}: {', '.join(unknown)} is not a trl.{config_cls.__name__} field")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as ex:
        reason = " ".join(str(ex).split())
        raise UserError(f"{block}: TRL rejected the config: {reason}") from None


def _checkpointing_spelling(kwargs: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """`kwargs` in the spelling of the installed transformers (`known`: the config's fields). The
    stages ask for `activation_checkpointing` (transformers' name since 5.2x, where
    `gradient_checkpointing` is its deprecated alias); earlier transformers 5 releases (5.17, on the
    GPU machines here) have only `gradient_checkpointing`."""
    if (
        "activation_checkpointing" in kwargs
        and "activation_checkpointing" not in known
        and "gradient_checkpointing" in known
    ):
        kwargs = dict(kwargs)
        kwargs["gradient_checkpointing"] = kwargs.pop("activation_checkpointing")
    return kwargs
