"""Reward functions: the environment rubric adapter for TRL and the rewards a run adds, built once.

    rewards = build_rewards(settings, env, reward_model_checkpoints)   # once per run
    rewards.training()      # GRPO's rewards: the rubric (x rubric_weight), extras, learned RMs
    rewards.extra           # what evaluation adds to the env's rubric (language consistency)
    rewards.learned         # a learned RM's scores: evaluation's score columns
    rewards.language_score  # the wrong-language monitor's scorer (non-English runs)

    reward_funcs.py  the TRL reward-function adapter over an env rubric (grpo/envs/rubric.py)
    consistency.py   the language-consistency reward and the wrong-language monitor's scorer
    learned.py       trained reward models as GRPO rewards: batched scoring, ensembles
    advantages.py    GRPO advantages of a batch, as TRL computes them

Every reward is a named, weighted `grpo.envs.rubric.RewardFunc`; training turns them into TRL
reward functions with `rubric_reward_funcs`, evaluation scores with them directly, both under the
one safe-reward policy of grpo/envs/rubric.py. A run's rewards are built once, after its
reward_model stage when it has one (grpo/stages.py), and handed to every evaluation and to
training: a learned reward model is loaded from disk once per run, and the language spec and
identifier behind the consistency reward and the language monitor once.

Importing this package is light (no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.envs.rubric import RewardFunc
from grpo.errors import UserError
from grpo.rewards.consistency import consistency_reward_funcs, language_monitor
from grpo.rewards.reward_funcs import RubricReward, rubric_reward_funcs

__all__ = ["RubricReward", "RunRewards", "build_rewards", "rubric_reward_funcs"]


@dataclass(frozen=True)
class RunRewards:
    """The reward functions of one run (see the module docstring)."""

    # the environment's rubric functions with their weights times reward_model.rubric_weight
    rubric: list[RewardFunc]
    # what the run adds to the rubric: language consistency (language.consistency_weight > 0)
    extra: list[RewardFunc] = field(default_factory=list)
    # the learned reward model(s): members (weight 0, logged) and their combination; each fn is a
    # batched TRL reward function. Empty with reward_model=rubric or while no RM exists yet
    learned: list[RewardFunc] = field(default_factory=list)
    # the wrong-language monitor's scorer for a non-English run (grpo/train/monitors.py)
    language_score: Callable[..., float | None] | None = None
    # reward_model.kind: anything but rubric makes training need `learned`
    reward_model_kind: str = "rubric"

    def training(self) -> list[RewardFunc]:
        """GRPO's rewards: the rubric, the extras, then the learned reward model(s). A one-line
        UserError when the run asks for a learned RM and none was given or trained."""
        if self.reward_model_kind != "rubric" and not self.learned:
            raise UserError(
                f"reward_model={self.reward_model_kind}: reward_model.checkpoints is empty and no reward_model "
                "stage ran before training: set reward_model.checkpoints=[DIR] or use stages=[reward_model,train]"
            )
        return [*self.rubric, *self.extra, *self.learned]


def build_rewards(
    settings: Any, env: Any, reward_model_checkpoints: Sequence[str] | None = None
) -> RunRewards:
    """The run's rewards for `env` (see the module docstring). `reward_model_checkpoints`: the RM
    dirs a learned reward scores with (None: reward_model.checkpoints); an RM is loaded here, and
    only here."""
    from grpo.languages.spec import spec_from_config

    rm = settings.reward_model
    spec = spec_from_config(settings.language)
    scale = float(rm.rubric_weight)
    paths = rm.checkpoints if reward_model_checkpoints is None else reward_model_checkpoints
    learned: list[RewardFunc] = []
    if rm.kind != "rubric" and paths:
        from grpo.rewards.learned import learned_reward_funcs

        learned = learned_reward_funcs(settings, checkpoints=paths, env=env)
    return RunRewards(
        rubric=[RewardFunc(f.name, f.fn, f.weight * scale, f.binary) for f in env.rubric.funcs],
        extra=consistency_reward_funcs(spec, env),
        learned=learned,
        language_score=language_monitor(spec, env),
        reward_model_kind=str(rm.kind),
    )
