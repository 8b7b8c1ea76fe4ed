"""Building TRL's config dataclasses (GRPOConfig, RewardConfig) from our settings.

Unknown fields (a typo in `trainer.extra`, a field another TRL version dropped) and TRL's own
rejections of a value become one-line UserErrors naming the config block to fix.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grpo.errors import UserError


def build_trl_config(config_cls: type, kwargs: dict[str, Any], block: str, extra_key: str) -> Any:
    """`config_cls(**kwargs)`; `block` names our config section (e.g. "trainer"), `extra_key`
    the key where users pass extra TRL fields (e.g. "trainer.extra")."""
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(k for k in kwargs if k not in known)
    if unknown:
        raise UserError(f"{extra_key}: {', '.join(unknown)} is not a trl.{config_cls.__name__} field")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as ex:
        reason = " ".join(str(ex).split())
        raise UserError(f"{block}: TRL rejected the config: {reason}") from None
