"""An evaluation's numbers: `summarize` scored rollouts into an `EvalResult`.

Statistics: `mean` / `std` are over all n*r rollouts (population std, ddof=0, as numpy's default
that vf-eval uses); a function's mean / std over its non-null scores, as TRL logs them
(grpo/envs/rubric.py), overall and per language; a score column's likewise. pass@k is reported
only when every reward function is declared binary (0/1) and uses the unbiased estimator
1 - C(n-c, k) / C(n, k) per example, averaged over examples.

Light: the standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.envs.rubric import Rubric


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
    # language code -> {"mean", "std", "count" (rollouts), "examples", "truncated" (share of rollouts)}
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
    # reward function name -> rollouts whose score raised (scored 0); only functions that raised
    errors: dict[str, int] = field(default_factory=dict)
    # the share of rollouts cut short by a token limit (grpo.rollout.Rollout.truncated)
    truncated: float = 0.0

    def to_metrics(self, prefix: str = "") -> dict[str, float]:
        """Flat metric names (MLflow-safe: no '@'), e.g. mean, std, func/<name>, func/<name>/std,
        func/<name>/errors (only for a function that raised), truncated, lang/<code>/mean|std|count|
        truncated, pass_at_<k>,
        score/<name>/mean|std, score/<name>/lang/<code>; `prefix` is prepended to every name. The
        evaluation's constants are `to_tags`: as metrics they would lead the UI's charts."""
        m: dict[str, float] = {"mean": self.mean, "std": self.std, "truncated": self.truncated}
        for name, value in self.per_function.items():
            m[f"func/{name}"] = value
            m[f"func/{name}/std"] = self.per_function_std[name]
        for name, count in self.errors.items():
            m[f"func/{name}/errors"] = count
        for code, stats in self.per_language.items():
            for key in ("mean", "std", "count", "truncated"):
                m[f"lang/{code}/{key}"] = float(stats[key])
        for k, value in (self.pass_at_k or {}).items():
            m[f"pass_at_{k}"] = value
        for name, stats in self.scores.items():
            m[f"score/{name}/mean"], m[f"score/{name}/std"] = stats["mean"], stats["std"]
            for code, value in stats["per_language"].items():
                m[f"score/{name}/lang/{code}"] = value
        return {f"{prefix}{name}": float(value) for name, value in m.items()}

    def to_tags(self, prefix: str = "") -> dict[str, str]:
        """What the evaluation was, not what it measured: num_examples, rollouts_per_example, seconds."""
        tags = {"num_examples": self.n, "rollouts_per_example": self.r, "seconds": round(self.seconds, 1)}
        return {f"{prefix}{name}": str(value) for name, value in tags.items()}

    def input_rows(self) -> list[dict[str, Any]]:
        """The examples evaluated, once each, in order (grpo/evaluation/dataset.py,
        `eval_input_rows`), read back from results.jsonl: what the run was evaluated on."""
        from grpo.evaluation.dataset import eval_input_rows
        from grpo.files import read_jsonl

        if self.results_path is None:
            return []
        return eval_input_rows(list(read_jsonl(self.results_path)), self.task)


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
    cut_by_language: dict[str, int] = {}
    for rec in records:
        code = rec["language"]
        by_language.setdefault(code, []).append(float(rec["reward"]))
        examples_by_language.setdefault(code, set()).add(rec["example_id"])
        cut_by_language[code] = cut_by_language.get(code, 0) + bool(rec.get("truncated"))
    per_language = {}
    for code, values in by_language.items():
        m, s = mean_std(values)
        per_language[code] = {
            "mean": m,
            "std": s,
            "count": len(values),
            "examples": len(examples_by_language[code]),
            "truncated": cut_by_language[code] / len(values),
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
        truncated=sum(bool(rec.get("truncated")) for rec in records) / len(records),
    )


# a change is "more than noise" when it is at least this many paired standard errors from 0
# (about a 95% two-sided interval)
NOISE_SE = 2.0
# a paired SE this small (relative to the change) is float rounding of no spread at all
EXACT_SE = 1e-12


@dataclass(frozen=True)
class PairedChange:
    """after - before over the examples both evaluations scored (each example's mean over its
    rollouts), with the standard error of that mean difference."""

    mean: float
    se: float
    examples: int

    @property
    def exact(self) -> bool:
        """Every example changed by the same amount (no spread: the paired SE is 0, up to float
        rounding), so the difference is exact rather than an estimate."""
        return self.examples > 1 and math.isfinite(self.se) and self.se <= EXACT_SE * max(1.0, abs(self.mean))

    @property
    def more_than_noise(self) -> bool:
        if self.exact:
            return abs(self.mean) > EXACT_SE
        return self.examples > 1 and abs(self.mean) >= NOISE_SE * self.se

    def verdict(self, before: str = "baseline", after: str = "final") -> str:
        """One line: the change, its paired SE, and whether it is more than noise (never inf or
        nan: no spread says so instead of dividing by a zero SE)."""
        head = f"verdict: {after} - {before} = {self.mean:+.4f}"
        if self.examples < 2 or not math.isfinite(self.se):
            return f"{head} on {self.examples} example(s): too few to tell noise from a change"
        direction = "better" if self.mean > 0 else "worse"
        if self.exact:
            if not self.more_than_noise:
                return f"{head} over {self.examples} examples: no difference (every paired reward equal)"
            return (
                f"{head} over {self.examples} examples: {direction}, exactly (every example changed "
                "by the same amount, no spread)"
            )
        ratio = abs(self.mean) / self.se
        said = (
            f"{direction}, more than noise ({ratio:.1f} SE)"
            if self.more_than_noise
            else f"within noise ({ratio:.1f} SE < {NOISE_SE:g} SE)"
        )
        return f"{head} (paired SE {self.se:.4f} over {self.examples} examples): {said}"


def paired_difference(
    after: Sequence[Sequence[float]], before: Sequence[Sequence[float]]
) -> tuple[float, float]:
    """Mean over examples of (mean of `after`'s rollouts - mean of `before`'s) and its standard
    error (NaN for fewer than two examples). The rows are the same examples, in the same order."""
    diffs = [statistics.fmean(a) - statistics.fmean(b) for a, b in zip(after, before, strict=True)]
    if not diffs:
        return math.nan, math.nan
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
    return statistics.fmean(diffs), se


def paired_change(before: EvalResult, after: EvalResult) -> PairedChange:
    """The change from `before` to `after` on the examples both scored, paired by example id
    (the evaluator runs the same rows with the same seeds in both)."""
    ids_before = before.example_ids or list(range(len(before.rewards)))
    ids_after = after.example_ids or list(range(len(after.rewards)))
    by_id = {str(i): row for i, row in zip(ids_before, before.rewards, strict=True) if row}
    pairs = [
        (row, by_id[str(i)])
        for i, row in zip(ids_after, after.rewards, strict=True)
        if row and str(i) in by_id
    ]
    mean, se = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
    return PairedChange(mean, se, len(pairs))
