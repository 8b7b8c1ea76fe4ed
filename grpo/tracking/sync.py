"""`python -m grpo.tracking.sync <run dir>`: send the tracking calls a run kept while its MLflow
store was unreachable (grpo/tracking/spool.py) to the run they belong to, in order.

The run and its store are the ones recorded in <run dir>/mlflow_run.json. What was sent is
recorded, so a second sync sends nothing; a sync while the store is still away sends what it can
and says how much is left. Exit 0 when nothing is left to send, 1 when the store is still
unreachable, 2 for a folder that is not a tracked run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grpo.errors import UserError
from grpo.run.layout import RunLayout
from grpo.tracking.spool import STORE_FILE, Spool, plain_reason


def sync(run_dir: str | Path) -> int:
    """Send what `run_dir` kept; the number of calls still kept afterwards (0: all sent)."""
    from grpo.tracking.store import make_client

    run_dir = Path(run_dir).expanduser()
    record_file = RunLayout(run_dir).mlflow_run
    # a run that started while its store was away has no run yet, only the store its calls go to
    store_file = RunLayout(run_dir).mlflow_spool / STORE_FILE
    try:
        record = json.loads(
            (record_file if record_file.is_file() else store_file).read_text(encoding="utf-8")
        )
        run_id, uri = record.get("run_id"), str(record["tracking_uri"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(
            f"{run_dir}: no readable {record_file.name}: not the folder of a run logged to MLflow"
        ) from None
    spool = Spool(run_dir, uri)
    if not spool.pending:
        print(f"sync: nothing to send for run {run_id} ({len(spool.calls())} kept call(s), all sent before)")
        return 0
    before = spool.pending
    try:
        client = make_client(uri)
    except Exception as ex:  # noqa: BLE001 - the store being away is this command's normal failure
        print(f"sync: the tracking store {uri} is unreachable ({plain_reason(ex)}); {before} call(s) stay kept",
              file=sys.stderr)  # fmt: skip
        return before
    spool.in_run = False  # this command says what it did in its own line
    sent = spool.replay(client, run_id)
    run_id = spool.run_id or run_id
    if spool.pending:
        print(f"sync: sent {sent} of {before} kept call(s) to run {run_id}; the store stopped answering, "
              f"{spool.pending} stay kept: run the command again", file=sys.stderr)  # fmt: skip
    else:
        print(f"sync: sent {sent} kept call(s) to run {run_id} in {uri}")
    return spool.pending


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m grpo.tracking.sync <run dir>", file=sys.stderr)
        sys.exit(2)
    try:
        left = sync(args[0])
    except UserError as ex:
        print(f"error: {ex}", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if left else 0)


if __name__ == "__main__":
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    main()
