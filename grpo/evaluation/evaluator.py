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

Statistics: `mean` / `std` are over all n*r rollouts (population std, ddof=0, as numpy's default
that vf-eval uses); pass@k is reported only when every reward function is binary (0/1) and uses
the unbiased estimator 1 - C(n-c, k) / C(n, k) per example, averaged over examples.

Settings arrive checked (grpo/validation.py). This module stays light at import time: torch and
the rollout engine are imported inside `evaluate`.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.envs.base import Environment, Row
from grpo.envs.rubric import RewardFunc, Rubric, score_reward
from grpo.errors import UserError
from grpo.files import write_json_atomic, write_jsonl_atomic

RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"
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


# ---- statistics ---------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one example with n samples of which c are correct:
    1 - C(n-c, k) / C(n, k), the probability that k samples drawn without replacement
    contain at least one correct one (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for a single value)."""
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values)


def is_binary(values: Iterable[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


# ---- the result -----------------------------------------------------------------------------------


@dataclass
class EvalResult:
    label: str
    n: int
    r: int
    mean: float
    std: float
    # reward function name -> mean / std of its score over all n*r rollouts
    per_function: dict[str, float]
    per_function_std: dict[str, float]
    # language code -> {"mean", "std", "count" (rollouts), "examples"}
    per_language: dict[str, dict[str, float]]
    # {k: pass@k} for k = 1..r, or None when some reward function is not binary
    pass_at_k: dict[int, float] | None
    # total reward per example (rows) and rollout index (columns)
    rewards: list[list[float]]
    # None when the evaluation wrote no files
    results_path: Path | None
    metadata_path: Path | None
    seconds: float
    # reward function name -> weight in the total
    weights: dict[str, float] = field(default_factory=dict)
    # the example id of each row of `rewards`
    example_ids: list[Any] = field(default_factory=list)
    # score function name -> {"mean", "std", "count" (rollouts scored), "per_language": {code: mean}}
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the evaluation as a saved `datasets` dataset (eval.save_dataset), else None
    dataset_path: Path | None = None
    # the environment evaluated (the dataset's `task` column)
    task: str = ""

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """Flat metric names (MLflow-safe: no '@'), e.g. mean, std, func/<name>, func/<name>/std,
        lang/<code>/mean, pass_at_<k>, score/<name>/mean|std, score/<name>/lang/<code>, seconds;
        `prefix` is prepended to every name."""
        m: dict[str, float] = {
            "mean": self.mean,
            "std": self.std,
            "num_examples": float(self.n),
            "rollouts_per_example": float(self.r),
            "seconds": self.seconds,
        }
        for name, value in self.per_function.items():
            m[f"func/{name}"] = value
            m[f"func/{name}/std"] = self.per_function_std[name]
        for code, stats in self.per_language.items():
            for key in ("mean", "std", "count"):
                m[f"lang/{code}/{key}"] = float(stats[key])
        for k, value in (self.pass_at_k or {}).items():
            m[f"pass_at_{k}"] = value
        for name, stats in self.scores.items():
            m[f"score/{name}/mean"], m[f"score/{name}/std"] = stats["mean"], stats["std"]
            for code, value in stats["per_language"].items():
                m[f"score/{name}/lang/{code}"] = value
        return {f"{prefix}{name}": float(value) for name, value in m.items()}


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
    from grpo.rewards.rubric import COMPLETION_FIELD, INFO_FIELD, STATE_FIELD

    fields = {
        COMPLETION_FIELD: [list(r.completion) for r in rollouts],
        STATE_FIELD: [r.state for r in rollouts],
        INFO_FIELD: [r.row.info for r in rollouts],
        "language": [r.row.language for r in rollouts],
    }
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
    extras: Sequence[RewardFunc],
    row: Row,
    completion: list[dict[str, str]],
    state: dict[str, Any],
) -> dict[str, float | None]:
    """Per-function scores of one rollout (`score_reward`: a float in [0, 1], or None where a
    function does not apply): the env's own `score`, then each extra function, called with the
    keywords training passes to rubric functions (prompt, completion, info, state)."""
    scores = dict(env.score(row, completion, state))
    for f in extras:
        scores[f.name] = score_reward(
            f.fn, prompt=row.prompt, completion=completion, info=row.info, state=state
        )
    return scores


# ---- the report printed to stdout ----------------------------------------------------------------


def format_report(result: EvalResult, header: dict[str, Any], show_examples: bool = True) -> str:
    """vf-eval-like summary: header, total reward, each function, languages, pass@k, per-example table."""
    lines = [f"--- Evaluation ({result.label}) ---"]
    lines += [f"{key}: {value}" for key, value in header.items()]
    lines.append(
        f"reward: mean {result.mean:.4f} ± {result.std:.4f}  ({result.n} examples x {result.r} rollouts)"
    )
    width = max(len(name) for name in [*result.per_function, *result.scores])
    for name, value in result.per_function.items():
        weight = result.weights.get(name)
        suffix = f"  (weight {weight:g})" if weight is not None else ""
        lines.append(f"  {name:<{width}}  {value:.4f} ± {result.per_function_std[name]:.4f}{suffix}")
    for name, stats in result.scores.items():
        lines.append(
            f"  {name:<{width}}  {stats['mean']:.4f} ± {stats['std']:.4f}  (a score, not in the reward: unclipped)"
        )
    if len(result.per_language) > 1:
        scores = list(result.scores)
        lines.append("per language:")
        lines.append(
            f"  {'lang':<6} {'mean':>7} {'std':>7} {'rollouts':>8}" + "".join(f" {n:>12}" for n in scores)
        )
        for code, stats in result.per_language.items():
            cells = [result.scores[n]["per_language"].get(code, math.nan) for n in scores]
            lines.append(
                f"  {code:<6} {stats['mean']:>7.4f} {stats['std']:>7.4f} {int(stats['count']):>8}"
                + "".join(f" {v:>12.4f}" for v in cells)
            )
    if result.pass_at_k:
        lines.append("pass@k: " + "  ".join(f"pass@{k}={v:.4f}" for k, v in result.pass_at_k.items()))
    if show_examples and result.rewards:
        ids = result.example_ids or list(range(len(result.rewards)))
        id_width = max(len("example"), *(len(str(i)) for i in ids))
        lines.append("rewards per example (columns: rollout index):")
        lines.append(f"  {'example':>{id_width}}  " + "  ".join(f"{f'r{j}':>6}" for j in range(result.r)))
        for example_id, row in zip(ids, result.rewards, strict=True):
            lines.append(f"  {str(example_id):>{id_width}}  " + "  ".join(f"{v:>6.3f}" for v in row))
    lines.append(f"saved: {result.results_path}")
    if result.dataset_path is not None:
        lines.append(f"dataset: {result.dataset_path} (datasets.load_from_disk)")
    return "\n".join(lines)


# ---- the evaluator ------------------------------------------------------------------------------------


def evaluate(
    settings: GrpoConfig,
    env: Environment,
    backend: Any,
    out_dir: Path,
    label: str = "eval",
    extra_reward_funcs: Sequence[Any] | None = None,
    step: int | None = None,
    score_funcs: Sequence[RewardFunc] = (),
) -> EvalResult:
    """Evaluate `backend` on `env`: n eval rows x r rollouts, scored, printed and saved under `out_dir`.

    `extra_reward_funcs` (RewardFunc, or (name, fn[, weight])) join the env rubric: they get a column
    in results.jsonl, a per-function mean, and their weighted score counts in the total reward.
    `score_funcs` get a column too but do not count (see the module docstring)."""
    ev = settings.eval
    n_wanted, r = int(ev.num_examples), int(ev.rollouts_per_example)
    rows = env.rows("eval", n_wanted)
    if len(rows) < n_wanted:
        print(
            f"note: eval.num_examples={n_wanted} but the eval split has {len(rows)} rows; using all of them"
        )
    print(f"evaluating {env.name} ({label}): {len(rows)} examples x {r} rollouts", flush=True)
    result = evaluate_rows(
        settings,
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
    header = _header(
        settings, env, len(rows), r, eval_sampling(settings), settings.trainer.max_completion_length
    )
    print(format_report(result, _printable_header(header), show_examples=ev.show_examples))
    sys.stdout.flush()
    return result


def eval_sampling(settings: GrpoConfig) -> Any:
    """How evaluation samples: eval.temperature / top_p / seed, generation.max_tokens_per_turn."""
    from grpo.generation.base import Sampling

    ev = settings.eval
    return Sampling(
        temperature=float(ev.temperature),
        top_p=float(ev.top_p),
        max_tokens_per_turn=settings.generation.max_tokens_per_turn,
        seed=ev.seed,
    )


def evaluate_rows(
    settings: GrpoConfig,
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
    `save_dataset` the same rollouts as a dataset in <out_dir>/dataset (grpo/eval_dataset.py).
    Prints nothing but the rollout engine's progress bar (`progress`)."""
    from grpo.rollout import run_rollouts

    r = int(rollouts_per_example)
    rubric = combined_rubric(env, extra_reward_funcs)
    check_score_names(rubric, score_funcs)
    extras = rubric.funcs[len(env.rubric.funcs) :]
    sampling = eval_sampling(settings)
    max_completion_tokens = settings.trainer.max_completion_length
    out_dir = Path(out_dir) if out_dir is not None else None
    header = _header(settings, env, len(rows), r, sampling, max_completion_tokens)

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
    records = [_record(env, rubric, extras, ro) for ro in rollouts]
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
    if out_dir is None:
        return result
    write_jsonl_atomic(results_path, records)
    if save_dataset:
        from grpo.evaluation.dataset import save_eval_dataset

        result.dataset_path = save_eval_dataset(records, out_dir, env.name)
    metadata = {
        "label": label,
        "step": step,
        **{k: v for k, v in header.items() if k != "sampling"},
        # the env's arguments; its class is recorded as env_class
        "env_args": {k: v for k, v in (settings.env or {}).items() if k != "_target_"},
        "sampling": header["sampling"],
        "num_examples": result.n,
        "rollouts_per_example": result.r,
        "example_ids": result.example_ids,
        "seed": sampling.seed,
        "reward_mean": result.mean,
        "reward_std": result.std,
        "reward_weights": result.weights,
        "per_function": result.per_function,
        "per_function_std": result.per_function_std,
        "per_language": result.per_language,
        "pass_at_k": result.pass_at_k,
        "scores": result.scores,
        "rewards": result.rewards,
        "time_s": seconds,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "results_file": RESULTS_FILE,
        "dataset_dir": result.dataset_path.name if result.dataset_path is not None else None,
    }
    write_json_atomic(metadata_path, metadata)
    return result


def _record(env: Environment, rubric: Rubric, extras: Sequence[RewardFunc], rollout: Any) -> dict[str, Any]:
    """One results.jsonl line: the episode, its ground truth, every function's score (null where it
    does not apply) and the total (`Rubric.total`: a null counts 0)."""
    row: Row = rollout.row
    scores = score_rollout(env, extras, row, rollout.completion, rollout.state)
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


def summarize(
    records: Sequence[dict[str, Any]],
    rubric: Rubric,
    label: str,
    r: int,
    results_path: Path | None,
    metadata_path: Path | None,
    seconds: float,
    score_names: Sequence[str] = (),
) -> EvalResult:
    """Statistics of scored rollouts (records in row-major order: example, then rollout index).
    A function's mean / std are over its non-null scores, as TRL logs them (grpo/envs/rubric.py);
    so are a score column's (`score_names`), overall and per language."""
    if not records or len(records) % r:
        raise ValueError(f"expected a multiple of r={r} scored rollouts, got {len(records)}")
    totals = [float(rec["reward"]) for rec in records]
    mean, std = mean_std(totals)
    scored = {name: [rec[name] for rec in records if rec[name] is not None] for name in rubric.names}
    per_function, per_function_std = {}, {}
    for name, values in scored.items():
        per_function[name], per_function_std[name] = mean_std(values)

    by_language: dict[str, list[float]] = {}
    examples_by_language: dict[str, set[Any]] = {}
    for rec in records:
        by_language.setdefault(rec["language"], []).append(float(rec["reward"]))
        examples_by_language.setdefault(rec["language"], set()).add(rec["example_id"])
    per_language = {}
    for code, values in by_language.items():
        m, s = mean_std(values)
        per_language[code] = {
            "mean": m,
            "std": s,
            "count": len(values),
            "examples": len(examples_by_language[code]),
        }

    scores = {}
    for name in score_names:
        values = [float(rec[name]) for rec in records if rec.get(name) is not None]
        by_code: dict[str, list[float]] = {}
        for rec in records:
            if rec.get(name) is not None:
                by_code.setdefault(rec["language"], []).append(float(rec[name]))
        m, s = mean_std(values)
        per_code = {code: statistics.fmean(v) for code, v in by_code.items()}
        scores[name] = {"mean": m, "std": s, "count": len(values), "per_language": per_code}

    rewards = [totals[i : i + r] for i in range(0, len(totals), r)]
    pass_k = None
    # pass@k only for pass/fail tasks: every function declared binary (a continuous reward that
    # happens to be all 0 in this run is not a pass rate)
    declared = all(getattr(f, "binary", False) for f in rubric.funcs)
    if declared and all(is_binary(values) for values in scored.values()):
        # a rollout passes when every function that counts (non-zero weight) scored 1 (None: no pass)
        counted = [f.name for f in rubric.funcs if f.weight != 0] or rubric.names
        passed = [all(rec[name] == 1.0 for name in counted) for rec in records]
        correct = [sum(passed[i : i + r]) for i in range(0, len(passed), r)]
        pass_k = {k: statistics.fmean(pass_at_k(r, c, k) for c in correct) for k in range(1, r + 1)}

    return EvalResult(
        label=label,
        n=len(rewards),
        r=r,
        mean=mean,
        std=std,
        per_function=per_function,
        per_function_std=per_function_std,
        per_language=per_language,
        pass_at_k=pass_k,
        rewards=rewards,
        results_path=Path(results_path) if results_path is not None else None,
        metadata_path=Path(metadata_path) if metadata_path is not None else None,
        seconds=seconds,
        weights={f.name: f.weight for f in rubric.funcs},
        example_ids=[records[i]["example_id"] for i in range(0, len(records), r)],
        scores=scores,
    )


def _header(
    settings: GrpoConfig, env: Environment, n: int, r: int, sampling: Any, max_completion_tokens: int
) -> dict[str, Any]:
    gen, m = settings.generation, settings.model
    backend = gen.backend
    model = {"name": m.name, "path": m.path, "source": m.source}
    if backend != "hf":
        # the endpoint serves its own model: record what it was asked for and where
        model["served_model"] = gen.model
    return {
        "env": env.name,
        "env_class": f"{type(env).__module__}.{type(env).__qualname__}",
        "model": model,
        "generation_backend": backend,
        "base_url": gen.base_url,
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens_per_turn": sampling.max_tokens_per_turn,
            "max_completion_tokens": max_completion_tokens,
            "seed": sampling.seed,
        },
        "n": n,
        "r": r,
    }


def _printable_header(header: dict[str, Any]) -> dict[str, str]:
    model = header["model"]
    name = model.get("served_model") or model.get("path") or model.get("name")
    s = header["sampling"]
    backend = header["generation_backend"] + (f" @ {header['base_url']}" if header.get("base_url") else "")
    return {
        "env": header["env"],
        "model": f"{name} ({backend})",
        "examples x rollouts": f"{header['n']} x {header['r']}",
        "sampling": (
            f"temperature={s['temperature']} top_p={s['top_p']} max_tokens_per_turn={s['max_tokens_per_turn']} "
            f"max_completion_tokens={s['max_completion_tokens']} seed={s['seed']}"
        ),
    }
