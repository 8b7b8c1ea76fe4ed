"""Reward functions: the environment rubric adapter for TRL and the extra rewards a run adds.

Every reward is a named, weighted `grpo.envs.rubric.RewardFunc`; training turns them into TRL
reward functions with `rubric_reward_funcs`, evaluation scores with them directly, both under the
one safe-reward policy of grpo/envs/rubric.py. Importing this package is light (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo.envs.rubric import RewardFunc
from grpo.rewards.consistency import consistency_reward_funcs
from grpo.rewards.rubric import ROLLOUT_FIELDS, RubricReward, rubric_reward_funcs

__all__ = [
    "ROLLOUT_FIELDS",
    "RubricReward",
    "all_reward_funcs",
    "consistency_reward_funcs",
    "extra_reward_funcs",
    "rubric_reward_funcs",
    "score_funcs",
]


def extra_reward_funcs(settings: Any, env: Any) -> list[RewardFunc]:
    """The rewards a run adds to the environment's rubric: language consistency
    (`language.consistency_weight` > 0, grpo/rewards/consistency.py). Learned reward models are
    training rewards only (`all_reward_funcs`): evaluation's reward is the environment's own, and
    it reports an RM's score as a column apart (`score_funcs`)."""
    return consistency_reward_funcs(settings, env)


def score_funcs(settings: Any, reward_model_checkpoints: Sequence[str] | None = None) -> list[RewardFunc]:
    """The evaluator's score columns (grpo.evaluate, `score_funcs`): with a learned reward model
    (reward_model.kind other than rubric), its normalised score per rollout (ensembles: each member
    and the combination), unclipped and not counted in the evaluation reward, so that the RM and the
    rubric can be compared per language. None with kind=rubric, or while no RM checkpoint exists
    yet (`reward_model_checkpoints`, None: reward_model.checkpoints)."""
    rm = settings.reward_model
    paths = rm.checkpoints if reward_model_checkpoints is None else reward_model_checkpoints
    if rm.kind == "rubric" or not paths:
        return []
    from grpo.rewards.learned import learned_reward_funcs

    return learned_reward_funcs(settings, checkpoints=paths)


def all_reward_funcs(
    settings: Any, env: Any, reward_model_checkpoints: Sequence[str] | None = None
) -> list[RewardFunc]:
    """The training rewards: the environment's rubric functions (weights times
    reward_model.rubric_weight), the run's extra rewards, then the learned reward model(s) scoring
    with `reward_model_checkpoints` (None: reward_model.checkpoints; grpo.rewards.learned, their fn
    is already a batched TRL reward function)."""
    scale = float(settings.reward_model.rubric_weight)
    funcs = [RewardFunc(f.name, f.fn, f.weight * scale) for f in env.rubric.funcs]
    funcs += extra_reward_funcs(settings, env)
    if settings.reward_model.kind != "rubric":
        from grpo.rewards.learned import learned_reward_funcs

        funcs += learned_reward_funcs(settings, checkpoints=reward_model_checkpoints)
    return funcs
