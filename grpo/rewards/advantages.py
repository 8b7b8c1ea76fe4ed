"""GRPO advantages of a batch, as TRL computes them (trl 1.16, GRPOTrainer._generate_and_score_completions):
the weighted sum of the reward functions per completion (None skipped), minus its group's mean,
divided by the group's std (scale_rewards=group), the batch's std (batch) or nothing (none), with
TRL's 1e-4 added to the std. A group is the trainer.num_generations consecutive completions of one
prompt.

Used to measure what a reward transformation does to the policy update without training: a
per-language affine normalisation of an RM score (grpo/reward_model/calibration.py) is constant
within a group (one prompt, one language), so with the RM as the only reward and group scaling the
advantages are the same whatever the normalisation (up to TRL's 1e-4); mixed with the rubric, or
scaled over the batch, they are not (tests/test_reward_model_guards.py, and the normalisation rows
of benchmarks/learning_reward_model.py).

Light: plain Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

EPSILON = 1e-4


def total_rewards(columns: Sequence[Sequence[float | None]], weights: Sequence[float]) -> list[float]:
    """Per completion, the weighted sum of the reward functions' scores (None counts nothing)."""
    return [
        math.fsum(w * v for w, v in zip(weights, values, strict=True) if v is not None)
        for values in zip(*columns, strict=True)
    ]


def _std(values: Sequence[float]) -> float:
    """The sample std (torch's unbiased nanstd, as TRL uses); 0 for one value."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_advantages(rewards: Sequence[float], group: int, scale: str = "group") -> list[float]:
    """TRL's advantages of `rewards` in groups of `group` consecutive completions; `scale`: group |
    batch | none (trainer.scale_rewards)."""
    if group < 1 or len(rewards) % group:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"unknown scale_rewards {scale!r}")
    batch_std = _std(rewards)
    out: list[float] = []
    for start in range(0, len(rewards), group):
        chunk = list(rewards[start : start + group])
        mean = math.fsum(chunk) / group
        std = _std(chunk) if scale == "group" else batch_std
        for r in chunk:
            out.append(r - mean if scale == "none" else (r - mean) / (std + EPSILON))
    return out
