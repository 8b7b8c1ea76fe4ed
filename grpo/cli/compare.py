"""Compare the jobs of a sweep without the MLflow UI.

    python -m grpo.cli.compare                   # the latest sweep in outputs/mlflow.db
    python -m grpo.cli.compare --sweep PARENT_RUN_ID --uri sqlite:///abs/path/mlflow.db
    python -m grpo.cli.compare --experiment grpo-alphabet_sort --metric train/reward

Prints one row per job (the overrides that vary, status, baseline and final evaluation reward,
the step with the best training reward) and writes a PNG of every job's reward curve, which is
also logged to the sweep's parent run (compare/reward_curves.png). A sweep prints the same table
when it ends.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.errors import UserError
from grpo.tracking.sweep_comparison import (
    DEFAULT_METRIC,
    PNG_NAME,
    child_runs,
    summarize_sweep,
)

# ---- command line ----------------------------------------------------------------------------------


def default_uri() -> str:
    """The store `python -m grpo` logs to with no settings, seen from the current directory:
    $MLFLOW_TRACKING_URI, else <output_root>/mlflow.db (output_root: $GRPO_OUTPUT_ROOT or outputs)."""
    from grpo.compose import load_settings
    from grpo.tracking.store import tracking_uri

    return tracking_uri(load_settings())


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
    parser = argparse.ArgumentParser(prog="python -m grpo.cli.compare", description=__doc__.split("\n\n")[0])
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
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    sys.exit(main())
