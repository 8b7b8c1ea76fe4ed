"""Rubrics: named, weighted reward functions, and the one policy that turns what a reward function
returns into a score. Training (grpo/rewards/reward_funcs.py, TRL's reward functions) and evaluation
(`Rubric.score`, grpo/evaluation/evaluator.py) both score through `score_reward`, so a reward means the same
in both.

A reward function takes the keyword arguments `completion` (the turns after the prompt), `info`
(the row's ground truth), `state` (what `env_response` kept) and `prompt`, and returns a float in
[0, 1], or None when the completion is not its business.

The safe-reward policy (`score_reward`), whatever the model wrote:
  - an exception, NaN or a non-number (a string included) scores 0.0: garbage output never stops a
    run, it just earns nothing. An exception is never silent: `checked_score` hands it back, the
    rubric and the training adapter count it per function (`RewardErrors`; training logs
    `rewards/<name>/errors`) and the first one of each function is logged in one warning line;
  - a number is clipped to [0, 1] (inf to 1, -inf to 0);
  - None means "does not apply to this completion" and is kept as None.
How a None counts, the same in training and evaluation:
  - it is left out of that function's mean (and std): TRL 1.16 turns None into NaN and logs
    `rewards/<name>/mean` with nanmean; the evaluator averages the non-None scores;
  - it counts 0 in the rollout's weighted total: TRL sums the weighted scores with nansum; the
    evaluator's `Rubric.total` does the same (results.jsonl stores the None as null);
  - it is not a pass in pass@k.
One corner differs: when every function returns None for a completion, TRL marks it unscorable
(excluded from its group's baseline and from the logged reward, advantage 0), while the evaluator
counts its total as 0.

Function names are unique within a rubric: they become metric names and results.jsonl columns,
so none may take a results.jsonl field's name (RESERVED_KEYS).

The rollout/reward field contract: TRL calls a reward function with keyword lists, one entry per
completion (`prompts`, `completions`, the dataset's columns, and whatever the rollout function
returned). Besides the token ids, grpo's rollout function returns the fields `reward_fields` builds
(the episode's messages, its state, the row's info and language), and the evaluator hands a batched
score function the same fields: a reward reads the same keys in training and in evaluation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grpo.errors import UserError

RewardFn = Callable[..., Any]
log = logging.getLogger(__name__)

# the fields a batched reward function reads, per completion (see the module docstring)
COMPLETION_FIELD = "rollout_completion"  # the episode's messages after the prompt
STATE_FIELD = "rollout_state"  # what env_response kept during the episode
INFO_FIELD = "row_info"  # the row's ground truth
LANGUAGE_FIELD = "language"  # the row's language (also a column of the training dataset)
# training only: the tokens the model generated in the episode (grpo/train/rollout_func.py)
MODEL_TOKENS_FIELD = "rollout_model_tokens"
# training only: a model turn was cut by a token limit (Rollout.truncated; trainer.truncated_reward)
TRUNCATED_FIELD = "rollout_truncated"
# results.jsonl keys that are not reward functions; a reward function may not take one of these names
RESERVED_KEYS = (
    "example_id",
    "rollout_index",
    "language",
    "prompt",
    "completion",
    "messages",
    "info",
    "reward",
    "num_turns",
    "truncated",
)


def reward_fields(rollouts: Sequence[Any]) -> dict[str, list[Any]]:
    """The fields of the contract for `rollouts` (anything with `completion`, `state` and a `row`
    with `info` and `language`, e.g. grpo.rollout.Rollout), one entry per rollout."""
    return {
        COMPLETION_FIELD: [list(r.completion) for r in rollouts],
        STATE_FIELD: [r.state for r in rollouts],
        INFO_FIELD: [r.row.info for r in rollouts],
        LANGUAGE_FIELD: [r.row.language for r in rollouts],
    }


@dataclass
class RewardFunc:
    name: str
    fn: RewardFn
    weight: float = 1.0
    #: scores are only ever 0 or 1 (pass/fail): the evaluator then reports pass@k
    binary: bool = False


def score_reward(fn: RewardFn, **kwargs: Any) -> float | None:
    """One call of a reward function under the safe-reward policy (see the module docstring): a
    float in [0, 1], or None when the function says the completion is not its business."""
    return checked_score(fn, kwargs)[0]


def checked_score(fn: RewardFn, kwargs: dict[str, Any]) -> tuple[float | None, Exception | None]:
    """`score_reward`, and the exception `fn` raised (None when it returned): a raising function
    scores 0.0, and the caller decides how the error is made visible (`RewardErrors`)."""
    try:
        value = fn(**kwargs)
        if value is None:
            return None, None
        # float() would also read a numeric string: a text is no score
        value = float(value) if not isinstance(value, (str, bytes)) else math.nan
    except Exception as ex:
        return 0.0, ex
    if value != value:  # NaN
        return 0.0, None
    return (1.0 if value > 1.0 else (value if value > 0.0 else 0.0)), None


class RewardErrors:
    """Exceptions of reward functions, counted per function name; the first of each function is
    logged as one warning line (its type and message), the rest only counted. `counts` is the
    total since the start, `take()` the counts since its last call (what one logging step saw)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._since: dict[str, int] = {}

    def record(self, name: str, error: Exception) -> None:
        if name not in self.counts:
            message = " ".join(str(error).split())[:300]
            log.warning(
                "reward function %s raised %s%s; that completion scores 0 (further errors are only "
                "counted: rewards/%s/errors)",
                name,
                type(error).__name__,
                f": {message}" if message else "",
                name,
            )
        self.counts[name] = self.counts.get(name, 0) + 1
        self._since[name] = self._since.get(name, 0) + 1

    def take(self) -> dict[str, int]:
        since, self._since = self._since, {}
        return since


class Rubric:
    """Named, weighted reward functions. A repeated name is a UserError: names become metric names."""

    def __init__(self, funcs: list[RewardFunc]):
        names = [f.name for f in funcs]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise UserError(
                f"reward function names must be unique (they become metric names), repeated: "
                f"{', '.join(repeated)}; rename one"
            )
        self.funcs = funcs
        self.errors = RewardErrors()

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.funcs]

    def score(self, **rollout: Any) -> dict[str, float | None]:
        """Each function's score for one rollout (`score_reward`: a float in [0, 1] or None); an
        exception is recorded in `self.errors`."""
        return {f.name: self.score_one(f, rollout) for f in self.funcs}

    def score_one(self, func: RewardFunc, rollout: dict[str, Any]) -> float | None:
        value, error = checked_score(func.fn, rollout)
        if error is not None:
            self.errors.record(func.name, error)
        return value

    def total(self, scores: dict[str, float | None]) -> float:
        """The rollout's reward: the weighted sum of the scores, a None counting 0 (as in TRL)."""
        return sum(f.weight * (scores[f.name] or 0.0) for f in self.funcs)
