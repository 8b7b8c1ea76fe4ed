"""What the policy wrote during GRPO training, as a table in the run (tracking.log_completions rows
per logging step; MLflow: the table artifact train/completions.json, one file for the whole run,
its rows appended each logging step), and, to read in the UI (whose table view shows a few
characters of each cell), the same rows as one page per logging step,
train/completions/step-<step>.html: each row's scores, then its prompt and completion in full.

Columns: step, language, prompt (its last user message), completion (the whole episode: the model's
turns and, for a multi-turn env, the environment's), reward (the weighted total), each reward
function's score (null where it does not apply), advantage, model_tokens (the tokens the model
generated in the episode; the environment's are not counted).

The rows come from TRL's own record of the step's last generation batch (GRPOTrainer keeps it for
its completions printout and parquet files, `trainer.log_completions`), so prompt, scores and
advantage are exactly what the loss saw, gathered from every process. TRL 1.16 keeps it in the
trainer's private `_logs` (read through grpo/trl_adapter/internals.py: `completions_record`); when
a TRL version has no such record, one warning line says the table is off. The episode and the
language reach it as extra columns (TRL's `log_extra`) from the first rubric reward adapter
(grpo/rewards/reward_funcs.py), the model tokens from the rollout function's fields.

With several languages in the batch the rows are taken in turn from each language, in the order
the batch has them, so a few of each show up in every step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grpo.tracking.render import last_user_message, render_messages, rows_html
from grpo.trl_adapter.internals import (
    EPISODE_COLUMN,
    LANGUAGE_COLUMN,
    MODEL_TOKENS_COLUMN,
    completions_record,
)

log = logging.getLogger(__name__)

# the artifact the table is appended to (MLflow)
TABLE_FILE = "train/completions.json"
# the folder of the readable pages, one per logging step
PAGES_DIR = "train/completions"
FIXED_COLUMNS = ("step", "language", "prompt", "completion", "reward", "advantage", "model_tokens")


def balanced_rows(languages: Sequence[Any], n: int) -> list[int]:
    """At most `n` indices, taken in turn from each language (first appearance order), each
    language's in batch order; returned in batch order."""
    by_language: dict[Any, list[int]] = {}
    for i, language in enumerate(languages):
        by_language.setdefault(language, []).append(i)
    queues = list(by_language.values())
    picked: list[int] = []
    depth = 0
    while len(picked) < n and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(picked) < n:
                picked.append(q[depth])
        depth += 1
    return sorted(picked)


def completions_table(
    record: Mapping[str, Any], names: Sequence[str], weights: Sequence[float], step: int, n: int
) -> dict[str, list[Any]]:
    """Table columns (see the module docstring) for at most `n` rows of TRL's record of a
    generation batch: `record` has "prompt", "completion", "rewards" (function name -> scores, NaN
    where a function does not apply), "advantages" and "extra" (column -> values); `names` and
    `weights` are the reward functions in TRL's order."""
    prompts = list(record.get("prompt", ()))
    extra = record.get("extra", {})
    count = len(prompts)
    languages = _column(extra, LANGUAGE_COLUMN, count)
    episodes = _column(extra, EPISODE_COLUMN, count)
    tokens = _column(extra, MODEL_TOKENS_COLUMN, count)
    completions = list(record.get("completion", ()))
    advantages = list(record.get("advantages", ()))
    scores = {name: list(record.get("rewards", {}).get(name, ())) for name in names}
    # a reward function named like a fixed column keeps its score under "<name> (score)"
    columns = {name: f"{name} (score)" if name in FIXED_COLUMNS else name for name in names}
    table: dict[str, list[Any]] = {c: [] for c in ("step", "language", "prompt", "completion", "reward")}
    table.update({columns[name]: [] for name in names})
    table.update({"advantage": [], "model_tokens": []})
    for i in balanced_rows(languages, n):
        row_scores = {
            name: _number(values[i]) if i < len(values) else None for name, values in scores.items()
        }
        table["step"].append(int(step))
        table["language"].append(languages[i])
        table["prompt"].append(last_user_message(prompts[i]))
        episode = episodes[i] if episodes[i] is not None else (completions[i] if i < len(completions) else "")
        table["completion"].append(render_messages(episode))
        table["reward"].append(
            sum(w * (row_scores[name] or 0.0) for name, w in zip(names, weights, strict=True))
        )
        for name in names:
            table[columns[name]].append(row_scores[name])
        table["advantage"].append(_number(advantages[i]) if i < len(advantages) else None)
        table["model_tokens"].append(tokens[i])
    return table


def page_file(step: int) -> str:
    """The readable page of a logging step's rows (zero-padded: the artifact list sorts by name)."""
    return f"{PAGES_DIR}/step-{int(step):06d}.html"


def completions_page(table: Mapping[str, Sequence[Any]], step: int) -> str:
    """A logging step's rows (`completions_table`) as the HTML page `page_file(step)`."""
    return rows_html(
        table, f"Training step {step}: what the policy wrote ({len(table.get('prompt', ()))} rollouts)"
    )


def completions_callback(log_table: Callable[[dict[str, list[Any]], int], None], n: int) -> Any:
    """A transformers TrainerCallback that, every logging step (on the main process), calls
    `log_table(table, step)` with the table of the step's last generation batch. Its `trainer` is
    set once the GRPOTrainer exists. A failure costs the table, never the training run (one warning
    line). transformers is imported here, not with the module."""
    from transformers import TrainerCallback

    class CompletionsCallback(TrainerCallback):
        def __init__(self) -> None:
            self.n = int(n)
            self.trainer: Any = None
            self._warned = False

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or "reward" not in logs or not state.is_world_process_zero or self.trainer is None:
                return
            batch = completions_record(self.trainer)
            if batch is None:
                self._warn(
                    "this TRL version keeps no record of the batch's completions: no completions table"
                )
                return
            try:
                table = completions_table(batch.record, batch.names, batch.weights, state.global_step, self.n)
                if table["step"]:
                    log_table(table, int(state.global_step))
            except Exception as ex:  # noqa: BLE001 - the table must not stop training
                self._warn(f"the completions table of step {state.global_step} was not logged: {ex}")

        def _warn(self, message: str) -> None:
            if not self._warned:
                log.warning("%s", message)
                self._warned = True

    return CompletionsCallback()


def _column(extra: Mapping[str, Any], name: str, count: int) -> list[Any]:
    values = list(extra.get(name, ())) if isinstance(extra, Mapping) else []
    return values + [None] * (count - len(values)) if len(values) < count else values[:count]


def _number(value: Any) -> float | None:
    """A score as a float, None for TRL's NaN (a function that does not apply)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
