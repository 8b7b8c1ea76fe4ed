"""Reward functions: the environment rubric adapter for TRL and the extra rewards a run adds.

Every reward is a named, weighted `grpo.envs.base.RewardFunc`; training turns them into TRL
reward functions with `rubric_reward_funcs`, evaluation scores with them directly. Importing
this package is light (no torch).
"""

from __future__ import annotations

from typing import Any

from grpo.envs.base import RewardFunc
from grpo.rewards.rubric import ROLLOUT_FIELDS, RubricReward, rubric_reward_funcs, score_value

__all__ = [
    "ROLLOUT_FIELDS",
    "RubricReward",
    "all_reward_funcs",
    "consistency_reward_funcs",
    "extra_reward_funcs",
    "rubric_reward_funcs",
    "score_value",
]


def extra_reward_funcs(cfg: Any, env: Any) -> list[RewardFunc]:
    """The rewards a run adds to the environment's rubric, from the config:
    - language consistency (`language.consistency_weight` > 0): the share of the answer's words
      in the target language, from grpo.languages;
    Learned reward models are training rewards only (`all_reward_funcs`): evaluation reports the
    environment's own rewards."""
    from grpo.reward_model import validate_reward_model

    validate_reward_model(cfg)  # fails fast (e.g. a missing RM checkpoint) before any stage works
    funcs: list[RewardFunc] = []
    funcs.extend(consistency_reward_funcs(cfg, env))
    return funcs


def consistency_reward_funcs(cfg: Any, env: Any) -> list[RewardFunc]:
    """The language-consistency reward when `language.consistency_weight` > 0 (else nothing).

    The language is the composed `language` group (overrides included); each rollout is scored in
    its row's language (info["language"], which every environment row carries: the member
    language under language=mix). Left out of the count: the row's names (info "turn_names"),
    tags, `// new name!`, and the content of the environment's `answer_tags` blocks (sorted names,
    reversed text: data, not prose)."""
    from grpo.languages.spec import spec_from_config

    spec = spec_from_config(cfg.language)
    if spec.consistency_weight <= 0:
        return []
    from grpo.languages.consistency import make_consistency_reward

    return [make_consistency_reward(spec, tags=getattr(env, "answer_tags", ()))]


def all_reward_funcs(cfg: Any, env: Any) -> list[RewardFunc]:
    """The training rewards: the environment's rubric functions (weights times
    reward_model.rubric_weight), the run's extra rewards, then the learned reward model(s)
    (grpo.rewards.learned; their fn is already a batched TRL reward function)."""
    scale = float(cfg.reward_model.get("rubric_weight", 1.0))
    funcs = [RewardFunc(f.name, f.fn, f.weight * scale) for f in env.rubric.funcs]
    funcs += extra_reward_funcs(cfg, env)
    if cfg.reward_model.kind != "rubric":
        from grpo.rewards.learned import learned_reward_funcs

        funcs += learned_reward_funcs(cfg)
    return funcs
