"""Reward functions: the environment rubric adapter for TRL and the extra rewards a run adds.

Every reward is a named, weighted `grpo.envs.base.RewardFunc`; training turns them into TRL
reward functions with `rubric_reward_funcs`, evaluation scores with them directly. Importing
this package is light (no torch).
"""

from __future__ import annotations

from typing import Any

from grpo.envs.base import RewardFunc
from grpo.errors import UserError
from grpo.rewards.rubric import ROLLOUT_FIELDS, RubricReward, rubric_reward_funcs, score_value

__all__ = [
    "ROLLOUT_FIELDS",
    "RubricReward",
    "all_reward_funcs",
    "extra_reward_funcs",
    "rubric_reward_funcs",
    "score_value",
]


def extra_reward_funcs(cfg: Any, env: Any) -> list[RewardFunc]:
    """The rewards a run adds to the environment's rubric, from the config:
    - language consistency (`language.consistency_weight` > 0): the share of the answer's words
      in the target language, from grpo.languages;
    - learned reward models (`reward_model.kind` other than rubric): not part of this version."""
    funcs: list[RewardFunc] = []
    kind = cfg.reward_model.kind
    if kind != "rubric":
        raise UserError(
            f"reward_model.kind='{kind}': only the environment's rubric rewards are available in this "
            "version; use reward_model=rubric"
        )
    weight = float(cfg.language.get("consistency_weight", 0.0) or 0.0)
    if weight > 0:
        try:
            from grpo.languages.consistency import make_consistency_reward
            from grpo.languages.spec import get_spec
        except ImportError as ex:
            raise UserError(
                f"language.consistency_weight={weight} needs the language-consistency reward "
                f"(grpo.languages.consistency), which is not installed: {ex}"
            ) from None
        funcs.append(make_consistency_reward(get_spec(cfg.language.code), weight))
    return funcs


def all_reward_funcs(cfg: Any, env: Any) -> list[RewardFunc]:
    """The environment's rubric functions followed by the run's extra rewards."""
    return [*env.rubric.funcs, *extra_reward_funcs(cfg, env)]
