"""The evaluator: n examples x r rollouts per example, with vf-eval's -n / -r semantics.

`evaluate` takes the first `eval.num_examples` rows of the environment's eval split (the same rows
for the same env seed), runs `eval.rollouts_per_example` rollouts of each through the batched
rollout engine, scores every rollout with the environment's rubric plus any extra reward
functions, prints a compact report, and writes `results.jsonl` (one line per rollout) and
`metadata.json` atomically under `out_dir`. `evaluate_rows` is the same on given rows without the
printing (validation during training uses it on rows from the end of the split).

Score functions (`score_funcs`, e.g. a learned reward model's normalised score) get a column of
their own: per rollout in results.jsonl, mean / std and a mean per language in the report and the
metrics. They are not rewards: not clipped to [0, 1] and not counted in the total.

The statistics are grpo/evaluation/summary.py's, the printed report grpo/evaluation/report.py's,
the saved dataset grpo/evaluation/dataset.py's. Settings arrive checked (grpo/cli/checks.py), as the
part of them an evaluation reads (grpo/evaluation/setup.py). This module stays light at import
time: torch and the rollout engine are imported inside `evaluate`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.envs.base import Environment, Row
from grpo.envs.rubric import COMPLETION_FIELD, RESERVED_KEYS, RewardFunc, Rubric, reward_fields
from grpo.errors import UserError
from grpo.evaluation.report import eval_header, eval_metadata, format_report, printable_header
from grpo.evaluation.setup import EvalSetup
from grpo.evaluation.summary import EvalResult, summarize
from grpo.files import write_json_atomic, write_jsonl_atomic
from grpo.run.layout import METADATA_FILE, RESULTS_FILE

# ---- scoring --------------------------------------------------------------------------------------


def combined_rubric(env: Environment, extra_reward_funcs: Sequence[Any] | None) -> Rubric:
    """The env rubric plus extra reward functions (objects with name, fn, weight, or tuples); names
    are unique (Rubric) and none is a results.jsonl field."""
    rubric = Rubric(list(env.rubric.funcs) + [_as_reward_func(f) for f in extra_reward_funcs or ()])
    reserved = sorted(set(rubric.names) & set(RESERVED_KEYS))
    if reserved:
        raise UserError(f"reward function name(s) {reserved} clash with results.jsonl fields: rename them")
    if not rubric.funcs:
        raise UserError(f"environment {env.name!r} has no reward functions to evaluate")
    return rubric


def check_score_names(rubric: Rubric, score_funcs: Sequence[RewardFunc]) -> None:
    """Score columns are named apart from the reward functions and the results.jsonl fields."""
    names = [f.name for f in score_funcs]
    clash = sorted(
        (set(names) & (set(rubric.names) | set(RESERVED_KEYS))) | {n for n in names if names.count(n) > 1}
    )
    if clash:
        raise UserError(f"score column name(s) {clash} clash with a reward function or a results.jsonl field")


def _as_reward_func(f: Any) -> RewardFunc:
    if isinstance(f, RewardFunc):
        return f
    if isinstance(f, tuple | list) and len(f) in (2, 3):
        return RewardFunc(str(f[0]), f[1], float(f[2]) if len(f) == 3 else 1.0)
    if hasattr(f, "name") and hasattr(f, "fn"):
        return RewardFunc(str(f.name), f.fn, float(getattr(f, "weight", 1.0)))
    raise TypeError(f"extra reward function must have name, fn and weight, got {f!r}")


def score_columns(
    score_funcs: Sequence[RewardFunc], rollouts: Sequence[Any]
) -> dict[str, list[float | None]]:
    """Each score function's value per rollout, as is (not clipped; NaN, inf and non-numbers
    become None). Each fn is a batched function in TRL's reward-function signature, called once
    with every rollout: fn(prompts=, completions=, **fields), the fields our training rollout
    function hands TRL (the episode, its state, the row's info and language)."""
    if not score_funcs:
        return {}
    fields = reward_fields(rollouts)
    prompts = [list(r.row.prompt) for r in rollouts]
    columns = {}
    for f in score_funcs:
        values = list(f.fn(prompts=prompts, completions=fields[COMPLETION_FIELD], **fields))
        columns[f.name] = [_finite(v) for v in values]
    return columns


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def score_rollout(
    env: Environment,
    rubric: Rubric,
    extras: Sequence[RewardFunc],
    row: Row,
    completion: list[dict[str, str]],
    state: dict[str, Any],
) -> dict[str, float | None]:
    """Per-function scores of one rollout (`score_reward`: a float in [0, 1], or None where a
    function does not apply): the env's own `score`, then each extra function of `rubric` (the
    combined rubric: its `errors` count the extras' exceptions), called with the keywords training
    passes to rubric functions (prompt, completion, info, state)."""
    scores = dict(env.score(row, completion, state))
    rollout = {"prompt": row.prompt, "completion": completion, "info": row.info, "state": state}
    for f in extras:
        scores[f.name] = rubric.score_one(f, rollout)
    return scores


# ---- the report printed to stdout ----------------------------------------------------------------


# ---- the evaluator ------------------------------------------------------------------------------------


def evaluate(
    setup: EvalSetup,
    env: Environment,
    backend: Any,
    out_dir: Path,
    label: str = "eval",
    extra_reward_funcs: Sequence[Any] | None = None,
    step: int | None = None,
    score_funcs: Sequence[RewardFunc] = (),
    show_examples: bool | None = None,
) -> EvalResult:
    """Evaluate `backend` on `env`: n eval rows x r rollouts, scored, printed and saved under `out_dir`.
    `show_examples`: print the per-example table (None: eval.show_examples).

    `extra_reward_funcs` (RewardFunc, or (name, fn[, weight])) join the env rubric: they get a column
    in results.jsonl, a per-function mean, and their weighted score counts in the total reward.
    `score_funcs` get a column too but do not count (see the module docstring). `setup`: the
    run's settings as the evaluation reads them (`EvalSetup.of(settings)`)."""
    ev = setup.eval
    n_wanted, r = int(ev.num_examples), int(ev.rollouts_per_example)
    rows = env.rows("eval", n_wanted)
    if len(rows) < n_wanted:
        print(
            f"note: eval.num_examples={n_wanted} but the eval split has {len(rows)} rows; using all of them"
        )
    print(f"evaluating {env.name} ({label}): {len(rows)} examples x {r} rollouts", flush=True)
    result = evaluate_rows(
        setup,
        env,
        rows,
        r,
        backend,
        out_dir,
        label=label,
        extra_reward_funcs=extra_reward_funcs,
        score_funcs=score_funcs,
        step=step,
        progress=True,
        save_dataset=bool(ev.save_dataset or ev.push_to_hub),
    )
    header = eval_header(setup, env, len(rows), r, eval_sampling(setup))
    show = bool(ev.show_examples if show_examples is None else show_examples)
    print(format_report(result, printable_header(header), show_examples=show))
    sys.stdout.flush()
    return result


def eval_sampling(setup: EvalSetup) -> Any:
    """How evaluation samples: eval.temperature / top_p / seed, generation.max_tokens_per_turn."""
    from grpo.generation.base import Sampling

    ev = setup.eval
    return Sampling(
        temperature=float(ev.temperature),
        top_p=float(ev.top_p),
        max_tokens_per_turn=setup.generation.max_tokens_per_turn,
        seed=ev.seed,
    )


def evaluate_rows(
    setup: EvalSetup,
    env: Environment,
    rows: Sequence[Row],
    rollouts_per_example: int,
    backend: Any,
    out_dir: Path | None,
    *,
    label: str = "eval",
    extra_reward_funcs: Sequence[Any] | None = None,
    score_funcs: Sequence[RewardFunc] = (),
    step: int | None = None,
    progress: bool = False,
    save_dataset: bool = False,
) -> EvalResult:
    """`rollouts_per_example` rollouts of each of `rows`, sampled as eval.* says, scored and
    summarised; results.jsonl and metadata.json go under `out_dir` (None: no files), and with
    `save_dataset` the same rollouts as a dataset in <out_dir>/dataset (grpo/evaluation/dataset.py).
    Prints nothing but the rollout engine's progress bar (`progress`)."""
    from grpo.rollout import run_rollouts

    r = int(rollouts_per_example)
    rubric = combined_rubric(env, extra_reward_funcs)
    check_score_names(rubric, score_funcs)
    extras = rubric.funcs[len(env.rubric.funcs) :]
    sampling = eval_sampling(setup)
    max_completion_tokens = setup.max_completion_tokens
    out_dir = Path(out_dir) if out_dir is not None else None
    header = eval_header(setup, env, len(rows), r, sampling)

    start = time.perf_counter()
    rollouts = run_rollouts(
        env,
        rows,
        backend,
        rollouts_per_row=r,
        sampling=sampling,
        max_completion_tokens=max_completion_tokens,
        progress=progress,
    )
    # the exceptions of this evaluation only: the env's rubric (its own `score`) and the extras
    counters = [c for c in (getattr(env.rubric, "errors", None), rubric.errors) if c is not None]
    for counter in counters:
        counter.take()
    records = [_record(env, rubric, extras, ro) for ro in rollouts]
    errors: dict[str, int] = {}
    for counter in counters:
        for name, count in counter.take().items():
            errors[name] = errors.get(name, 0) + count
    for name, values in score_columns(score_funcs, rollouts).items():
        for record, value in zip(records, values, strict=True):
            record[name] = value
    seconds = time.perf_counter() - start

    results_path = out_dir / RESULTS_FILE if out_dir is not None else None
    metadata_path = out_dir / METADATA_FILE if out_dir is not None else None
    result = summarize(
        records, rubric, label, r, results_path, metadata_path, seconds, [f.name for f in score_funcs]
    )
    result.task = env.name
    result.errors = errors
    if out_dir is None:
        return result
    write_jsonl_atomic(results_path, records)
    if save_dataset:
        from grpo.evaluation.dataset import save_eval_dataset

        result.dataset_path = save_eval_dataset(records, out_dir, env.name)
    metadata = eval_metadata(setup, result, header, label, step)
    write_json_atomic(metadata_path, metadata)
    return result


def _record(env: Environment, rubric: Rubric, extras: Sequence[RewardFunc], rollout: Any) -> dict[str, Any]:
    """One results.jsonl line: the episode, its ground truth, every function's score (null where it
    does not apply) and the total (`Rubric.total`: a null counts 0)."""
    row: Row = rollout.row
    scores = score_rollout(env, rubric, extras, row, rollout.completion, rollout.state)
    return {
        "example_id": row.id,
        "rollout_index": rollout.rollout_index,
        "language": row.language,
        "prompt": row.prompt,
        "completion": rollout.completion,
        "messages": rollout.messages,
        "info": row.info,
        **{name: scores[name] for name in rubric.names},
        "reward": rubric.total(scores),
        "num_turns": rollout.num_turns,
        "truncated": bool(rollout.truncated),
    }
