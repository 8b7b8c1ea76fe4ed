"""The comparison of a sweep's jobs: one table row per child run and every job's reward curve.

The sweep callback (grpo/tracking/sweep.py) prints and logs it when a sweep ends;
`python -m grpo.cli.compare` (grpo/cli/compare.py) does the same for any sweep in a store.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.tracking.store import metric_curve, with_retry

DEFAULT_METRIC = "train/reward"
PNG_NAME = "reward_curves.png"
ARTIFACT_DIR = "compare"


@dataclass
class JobRow:
    num: str
    name: str
    run_id: str
    status: str
    varied: dict[str, str] = field(default_factory=dict)
    baseline: float | None = None
    final: float | None = None
    best_step: int | None = None
    best_value: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)


def final_reward(metrics: dict[str, float]) -> float | None:
    """The job's final evaluation mean: eval/final/mean, else its objective, else eval/eval/mean."""
    for key in ("eval/final/mean", "objective", "eval/eval/mean"):
        if key in metrics:
            return metrics[key]
    return None


def varied_of(run: Any) -> dict[str, str]:
    """{key: value} of the overrides that tell this job apart (tag grpo.varied, set at run start)."""
    try:
        items = json.loads(run.data.tags.get("grpo.varied", "[]"))
    except json.JSONDecodeError:
        return {}
    pairs = (str(item).split("=", 1) for item in items)
    return {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}


def best_point(curve: Sequence[tuple[int, float]]) -> tuple[int, float] | None:
    """The (step, value) with the highest value (the earliest step on a tie; NaN never wins)."""
    points = [(s, v) for s, v in curve if not math.isnan(v)]
    if not points:
        return None
    return max(points, key=lambda p: (p[1], -p[0]))


def job_rows(client: Any, children: Sequence[Any], metric: str = DEFAULT_METRIC) -> list[JobRow]:
    rows = []
    for run in children:
        metrics = run.data.metrics
        curve = metric_curve(client, run.info.run_id, metric)
        best = best_point(curve)
        rows.append(
            JobRow(
                num=run.data.tags.get("grpo.job_num", "?"),
                name=run.info.run_name or run.info.run_id,
                run_id=run.info.run_id,
                status=run.info.status,
                varied=varied_of(run),
                baseline=metrics.get("eval/baseline/mean"),
                final=final_reward(metrics),
                best_step=best[0] if best else None,
                best_value=best[1] if best else None,
                curve=curve,
            )
        )
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_table(rows: Sequence[JobRow], metric: str = DEFAULT_METRIC) -> str:
    """A fixed-width text table, one line per job; the best final reward is marked with *."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row.varied if k not in keys]
    finals = [r.final for r in rows if r.final is not None and not math.isnan(r.final)]
    best_final = max(finals) if finals else None
    header = ["job", *keys, "status", "baseline eval", "final eval", f"best step ({metric})"]
    lines = []
    for row in rows:
        final = _fmt(row.final) + (" *" if best_final is not None and row.final == best_final else "")
        best = "-" if row.best_step is None else f"{row.best_step} ({row.best_value:.4f})"
        lines.append(
            [row.num, *(row.varied.get(k, "") for k in keys), row.status, _fmt(row.baseline), final, best]
        )
    widths = [max(len(str(c)) for c in col) for col in zip(header, *lines, strict=True)]
    out = [
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def summarize_sweep(
    client: Any,
    parent: Any,
    children: Sequence[Any] | None = None,
    metric: str = DEFAULT_METRIC,
    png: Path | None = None,
    log_to_parent: bool = True,
) -> tuple[str, Path | None]:
    """Print the sweep's table, draw every job's `metric` curve to a PNG and log both to the parent
    run (compare/summary.txt, compare/reward_curves.png). Returns (table, png path or None)."""
    from grpo.tracking.plots import plot_reward_curves

    children = child_runs(client, parent) if children is None else children
    rows = job_rows(client, children, metric)
    title = parent.info.run_name or parent.info.run_id
    table = format_table(rows, metric)
    print(f"\n{title} (MLflow run {parent.info.run_id}, {len(rows)} jobs)\n{table}\n")
    if png is None:
        sweep_dir = Path(parent.data.tags.get("grpo.sweep_dir", ""))
        png = (sweep_dir if sweep_dir.is_dir() and str(sweep_dir) != "." else Path.cwd()) / PNG_NAME
    curves = {f"#{r.num} {r.name}": r.curve for r in rows}
    if not any(curves.values()):
        png = None
    else:
        png.parent.mkdir(parents=True, exist_ok=True)
        plot_reward_curves(curves, png, metric, title=title)
        print(f"reward curves: {png}")
    if log_to_parent:
        with_retry(client.log_text, parent.info.run_id, table + "\n", f"{ARTIFACT_DIR}/summary.txt")
        if png is not None:
            # always compare/reward_curves.png in the run, whatever --out named the local file
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy(png, Path(tmp) / PNG_NAME)
                with_retry(client.log_artifact, parent.info.run_id, str(Path(tmp) / PNG_NAME), ARTIFACT_DIR)
    return table, png


def child_runs(client: Any, parent: Any) -> list[Any]:
    """The job runs of a sweep parent, by job number."""
    runs = with_retry(
        client.search_runs,
        [parent.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        max_results=10000,
    )

    def job_num(run: Any) -> tuple[int, int]:
        num = run.data.tags.get("grpo.job_num", "")
        return (int(num) if num.isdigit() else sys.maxsize, run.info.start_time or 0)

    return sorted(runs, key=job_num)
