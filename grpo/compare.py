"""Compare the jobs of a sweep without the MLflow UI.

    python -m grpo.compare                       # the latest sweep in outputs/mlflow.db
    python -m grpo.compare --sweep PARENT_RUN_ID --uri sqlite:///abs/path/mlflow.db
    python -m grpo.compare --experiment grpo-alphabet_sort --metric train/reward

Prints one row per job (the overrides that vary, status, baseline and final evaluation reward,
the step with the best training reward) and writes a PNG of every job's reward curve, which is
also logged to the sweep's parent run (compare/reward_curves.png). A sweep prints the same table
when it ends.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.errors import UserError

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
    from grpo.tracking.store import metric_curve

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
    from grpo.tracking.store import with_retry
    from grpo.tracking.sweep import child_runs

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


# ---- command line ----------------------------------------------------------------------------------


def default_uri() -> str:
    """The store `python -m grpo` uses with no settings, seen from the current directory."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    root = Path(os.environ.get("GRPO_OUTPUT_ROOT", "outputs")).resolve()
    return f"sqlite:///{root / 'mlflow.db'}"


def find_sweep(client: Any, sweep: str | None, experiment: str | None) -> Any:
    """The sweep's parent run: by id, else the latest one (in `experiment` if given)."""
    from mlflow.exceptions import MlflowException

    from grpo.tracking.store import with_retry

    if sweep:
        try:
            return with_retry(client.get_run, sweep)
        except MlflowException:
            raise UserError(f"--sweep {sweep}: no such run in this store (check --uri)") from None
    if experiment:
        found = with_retry(client.get_experiment_by_name, experiment)
        if found is None:
            names = ", ".join(e.name for e in with_retry(client.search_experiments))
            raise UserError(f"--experiment {experiment}: no such experiment (available: {names or 'none'})")
        experiment_ids = [found.experiment_id]
    else:
        experiment_ids = [e.experiment_id for e in with_retry(client.search_experiments)]
    runs = with_retry(
        client.search_runs,
        experiment_ids,
        filter_string="tags.`grpo.sweep` = 'true'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise UserError(
            "no sweep in this store: run one (python -m grpo -m ...) or pass --uri / --experiment"
        )
    return runs[0]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grpo.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", help="parent run id of the sweep (default: the latest sweep)")
    parser.add_argument(
        "--uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///outputs/mlflow.db)"
    )
    parser.add_argument("--experiment", help="look for the latest sweep in this experiment only")
    parser.add_argument(
        "--metric", default=DEFAULT_METRIC, help=f"curve to plot and rank steps by (default {DEFAULT_METRIC})"
    )
    parser.add_argument("--out", type=Path, help=f"PNG path (default: <sweep dir>/{PNG_NAME})")
    parser.add_argument(
        "--no-log", action="store_true", help="do not log the table and PNG to the parent run"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from grpo.tracking.store import check_uri, make_client, sqlite_path

        uri = check_uri(args.uri, field="--uri") if args.uri else default_uri()
        db = sqlite_path(uri)
        if db is not None and not db.is_file():
            raise UserError(
                f"no MLflow store at {db}: run a sweep first (python -m grpo -m ...) or pass --uri"
            )
        client = make_client(uri)
        parent = find_sweep(client, args.sweep, args.experiment)
        from grpo.tracking.sweep import child_runs

        children = child_runs(client, parent)
        if not children:
            raise UserError(f"run {parent.info.run_id} has no child runs: pass the parent run id of a sweep")
        summarize_sweep(
            client, parent, children, metric=args.metric, png=args.out, log_to_parent=not args.no_log
        )
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
