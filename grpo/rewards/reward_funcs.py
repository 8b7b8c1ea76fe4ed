"""Environment rubric functions as TRL reward functions: the adapter between an environment's
rubric (grpo/envs/rubric.py, the scoring contract) and TRL's GRPOTrainer.

TRL calls every reward function once per batch with keyword lists, one entry per completion:
`prompts`, `completions` (TRL's own decoding of the completion ids), and every dataset column and
every extra field the rollout function returned. Our rollout function returns the real episode of
each completion (the rollout's messages, state and the row's info: the field contract of
grpo/envs/rubric.py), so a
rubric function scores exactly what the environment saw, including the environment's turns of a
multi-turn episode, and never TRL's flattened text.

Each adapter carries the rubric function's name as `__name__` (TRL names the metric
`rewards/<name>/mean` after it) and the rubric's weights go to `GRPOConfig.reward_weights`.

With more than one language in a batch (language=mix), each function's mean is also logged per
language as `rewards/<name>/<language>/mean`.

Values follow the one safe-reward policy of grpo/envs/rubric.py (`score_reward`, shared with the
evaluator): clipped to [0, 1], an exception, NaN or non-number scores 0, and None (the function
does not apply) is passed to TRL as is, which leaves it out of that function's mean and counts it
0 in the weighted sum. An exception is counted: every call logs `rewards/<name>/errors` (the
completions of that batch whose score raised; TRL averages it over a logging step's batches), the
first one is logged as one warning line, and `take_window()` tells the progress printer whether
every completion since its last line raised (its zero-signal hint then names the function).

The first rubric adapter of a run (`table_columns=True`) also hands TRL, through its `log_extra`,
the columns of the completions table (grpo/tracking/completions.py) that TRL does not record
itself: each completion's whole episode, its language and its model tokens. TRL's `log_extra` and
`log_metric` keyword arguments are reached through grpo/trl_adapter/internals.py, where the
column names live too (the completions table reads them back from TRL's record).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo.envs.rubric import (
    COMPLETION_FIELD,
    INFO_FIELD,
    LANGUAGE_FIELD,
    MODEL_TOKENS_FIELD,
    STATE_FIELD,
    TRUNCATED_FIELD,
    RewardErrors,
    RewardFunc,
    Rubric,
    checked_score,
)
from grpo.trl_adapter.internals import (
    EPISODE_COLUMN,
    LANGUAGE_COLUMN,
    MODEL_TOKENS_COLUMN,
    extra_column_logger,
    reward_metric_logger,
)


def score_truncated(
    rewards: list[float | None], kwargs: dict[str, Any], value: float | None
) -> list[float | None]:
    """`rewards` with every truncated completion's score replaced by `value` (trainer.truncated_reward;
    None leaves them as they are). A score of None (the function does not apply) stays None."""
    flags = kwargs.get(TRUNCATED_FIELD)
    if value is None or not flags:
        return rewards
    return [value if cut and r is not None else r for r, cut in zip(rewards, flags, strict=True)]


class RubricReward:
    """A TRL reward function wrapping one rubric function; a truncated completion scores
    `truncated_reward` (trainer.truncated_reward) when it is not None."""

    def __init__(
        self,
        func: RewardFunc,
        errors: RewardErrors | None = None,
        table_columns: bool = False,
        truncated_reward: float | None = None,
    ):
        self.func = func
        self.table_columns = table_columns
        self.truncated_reward = truncated_reward
        self.__name__ = func.name  # TRL's metric name (trl.trainer.utils.get_callable_name)
        self.errors = errors if errors is not None else RewardErrors()
        # completions scored and completions whose score raised, since the last take_window()
        self._window = [0, 0]

    def take_window(self) -> tuple[int, int]:
        """(completions scored, of which raised) since the last call."""
        window, self._window = tuple(self._window), [0, 0]
        return window

    def __repr__(self) -> str:
        return f"RubricReward({self.func.name!r}, weight={self.func.weight})"

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        **kwargs: Any,
    ) -> list[float | None]:
        episodes = kwargs.get(COMPLETION_FIELD)
        states = kwargs.get(STATE_FIELD)
        infos = kwargs.get(INFO_FIELD)
        rewards: list[float | None] = []
        raised = 0
        for i, prompt in enumerate(prompts):
            # Without our rollout function (e.g. a plain TRL generation), fall back to TRL's own
            # decoding, wrapped as the single assistant turn it is.
            completion = episodes[i] if episodes is not None else _as_messages(completions[i])
            value, error = checked_score(
                self.func.fn,
                {
                    "prompt": prompt,
                    "completion": completion,
                    "info": infos[i] if infos is not None else {},
                    "state": states[i] if states is not None else {},
                },
            )
            if error is not None:
                raised += 1
                self.errors.record(self.func.name, error)
            rewards.append(value)
        self._window[0] += len(rewards)
        self._window[1] += raised
        rewards = score_truncated(rewards, kwargs, self.truncated_reward)
        log_metric = reward_metric_logger(kwargs)
        if log_metric is not None:
            log_metric(f"rewards/{self.func.name}/errors", float(raised))
        log_per_language(self.func.name, rewards, kwargs.get(LANGUAGE_FIELD), log_metric)
        log_extra = extra_column_logger(kwargs)
        if self.table_columns and log_extra is not None:
            count = len(rewards)
            log_extra(EPISODE_COLUMN, list(episodes) if episodes is not None else [None] * count)
            log_extra(LANGUAGE_COLUMN, list(kwargs.get(LANGUAGE_FIELD) or [None] * count))
            log_extra(MODEL_TOKENS_COLUMN, list(kwargs.get(MODEL_TOKENS_FIELD) or [None] * count))
        return rewards


def log_per_language(name: str, scores: Sequence[float | None], languages: Any, log_metric: Any) -> None:
    """With more than one language in the batch (language=mix), also log reward function `name`'s
    mean per language through TRL's `log_metric` (`reward_metric_logger`; TRL metric
    `rewards/<name>/<language>/mean`)."""
    if log_metric is None or languages is None or len(set(languages)) < 2:
        return
    by_language: dict[str, list[float]] = {}
    for value, language in zip(scores, languages, strict=True):
        if value is not None:
            by_language.setdefault(str(language), []).append(value)
    for language, values in sorted(by_language.items()):
        log_metric(f"rewards/{name}/{language}/mean", sum(values) / len(values))


def _as_messages(completion: Any) -> list[dict[str, Any]]:
    if isinstance(completion, list):
        return completion
    return [{"role": "assistant", "content": completion if isinstance(completion, str) else ""}]


class TruncatedScore:
    """A batched TRL reward function (a learned reward model) whose truncated completions score
    `value` (trainer.truncated_reward); its other attributes are the wrapped function's."""

    def __init__(self, fn: Any, value: float):
        self.fn, self.value = fn, value
        self.__name__ = fn.__name__

    def __getattr__(self, name: str) -> Any:
        if name == "fn":  # not set yet (copy / unpickle build the object without __init__)
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        return score_truncated(list(self.fn(*args, **kwargs)), kwargs, self.value)


def rubric_reward_funcs(
    funcs: Sequence[RewardFunc], truncated_reward: float | None = None
) -> tuple[list[Any], list[float]]:
    """TRL reward functions and their weights for rubric functions (a Rubric: names are unique).
    A function that is already a batched TRL reward function (`fn.trl_batched`, e.g. a learned
    reward model) is passed through as is. `truncated_reward` (not None): what every function
    that counts (weight != 0) scores a truncated completion (trainer.truncated_reward); a weight-0
    function is a metric, logged as it scores, as an evaluation scores it."""
    rubric = Rubric(list(funcs))
    adapters: list[Any] = []
    for f in rubric.funcs:
        cut = truncated_reward if f.weight else None  # a metric is not a reward: never rewritten
        if getattr(f.fn, "trl_batched", False):
            adapters.append(f.fn if cut is None else TruncatedScore(f.fn, cut))
        else:
            first = not any(isinstance(a, RubricReward) for a in adapters)
            adapters.append(RubricReward(f, rubric.errors, table_columns=first, truncated_reward=cut))
    return adapters, [float(f.weight) for f in rubric.funcs]
