"""A run's tracking calls kept on disk while the store is unreachable, and sent once it answers.

    spool = Spool(run_dir, uri)
    spool.write(client, run_id, "metrics", metrics=[[key, value, timestamp_ms, step], ...])
    spool.close(client, run_id)     # at the end of the run: one last try, then say what is left

Every write of the MLflow tracker (metrics, params, tags, texts, artifacts, tables, dataset inputs,
the run's status) goes through `write`. While the store answers, the call is sent at once (MLflow's client
retries a request a few times; grpo sets MLFLOW_HTTP_REQUEST_MAX_RETRIES / _BACKOFF_FACTOR low,
grpo/tracking/store.py, so a dead server costs a few seconds, not MLflow's default four minutes).
When it does not answer (connection refused or timed out, a 5xx, a SQLite file locked past the
retry budget), one warning line says so and the call, and every later one, is appended in order
to <run dir>/mlflow_spool/calls.jsonl instead, so training never waits on the store. At most every
PROBE_S seconds the next write first asks a tracking server's /health (one request, 2 s at most:
no call waits on a dead server) and, when it answers, sends what is kept (oldest first); when it
all went in, one line says the store is back and how many calls were replayed.

Nothing is lost: a file to upload is copied into the spool when its call is kept (the original
may be a temporary file). Nothing is doubled: <run dir>/mlflow_spool/sent records how many kept
calls went in, written after each one, and a metric keeps its original timestamp, so a call sent
twice (the store took it but its answer was lost) is the same metric point, which MLflow's store
keeps once. If the store never comes back, the run still ends normally, saying how many calls are
left; `python -m grpo.tracking.sync <run dir>` sends them later (run twice, it sends nothing the
second time).

Light: mlflow is imported inside the functions that send.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo.files import write_text_atomic
from grpo.run.interrupt import signals_held
from grpo.run.layout import RunLayout

log = logging.getLogger(__name__)

CALLS_FILE = "calls.jsonl"
SENT_FILE = "sent"
# the store the kept calls go to (a run created offline has no mlflow_run.json yet)
STORE_FILE = "store.json"
# while the store is away, how often a write first tries to send what is kept
PROBE_S = 15.0
# how long a write retries a busy store (a locked SQLite file, a 503) before it is kept
WRITE_BUDGET_S = 10.0
# MLflow's log_batch limits: 1000 metrics, 100 params or tags per call
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


def unreachable(ex: BaseException) -> bool:
    """Whether `ex` says the store cannot be reached now (worth keeping the call for later), as
    opposed to a call the store refuses (a bad value: kept calls would be refused again)."""
    from grpo.tracking.store import _is_transient

    if _is_transient(ex):
        return True
    text = str(ex).lower()
    signs = (
        "api request to",  # MLflow's REST client, after its own retries
        "max retries exceeded",
        "connection refused",
        "failed to establish a new connection",
        "read timed out",
        "connection aborted",
        "remote end closed connection",
        "unable to open database file",
    )
    return any(s in text for s in signs)


def store_answers(uri: str, timeout_s: float = 2.0) -> bool:
    """A tracking server's /health answers 200 within `timeout_s` (one request, no retries); other
    stores (SQLite) are tried by sending the next call itself."""
    if not uri.startswith(("http://", "https://")):
        return True
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def send(client: Any, run_id: str, op: str, args: Mapping[str, Any]) -> None:
    """One tracking call (the ops of `Spool.write`) to `client`'s store."""
    from mlflow.entities import Metric, Param, RunTag

    if op == "metrics":
        items = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in args["metrics"]]
        for start in range(0, len(items), MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=items[start : start + MAX_METRICS_PER_BATCH])
    elif op == "params":
        items = [Param(k, v) for k, v in args["params"].items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])
    elif op == "tags":
        items = [RunTag(k, v) for k, v in args["tags"].items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, tags=items[start : start + MAX_PARAMS_PER_BATCH])
    elif op == "text":
        client.log_text(run_id, args["text"], args["artifact_file"])
    elif op == "artifact":
        path = Path(args["path"])
        if path.is_dir():
            client.log_artifacts(run_id, str(path), args.get("artifact_path"))
        else:
            client.log_artifact(run_id, str(path), args.get("artifact_path"))
    elif op == "table":
        client.log_table(run_id, data=dict(args["data"]), artifact_file=args["artifact_file"])
    elif op == "inputs":
        _send_input(client, run_id, args)
    elif op == "status":
        if args["status"] == "RUNNING":
            client.update_run(run_id, status="RUNNING")
        else:
            client.set_terminated(run_id, status=args["status"], end_time=args.get("end_time"))
    else:
        raise ValueError(f"unknown tracking call {op!r} in the spool")


def _send_input(client: Any, run_id: str, args: Mapping[str, Any]) -> None:
    """A dataset input (the fields of an mlflow.entities.Dataset, and its context tag)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    entry = DatasetInput(Dataset(**args["dataset"]), tags=[InputTag("mlflow.data.context", args["context"])])
    for attempt in range(3):
        try:
            client.log_inputs(run_id, datasets=[entry])
            return
        except Exception as ex:
            # two jobs of a sweep evaluated on the same rows log them at once: MLflow's get-or-
            # create of the dataset races, and the loser's insert fails; a retry finds the row
            if "unique constraint failed" not in str(ex).lower() or attempt == 2:
                raise


class Spool:
    """The tracking calls of one run that the store has not taken yet (see the module docstring)."""

    def __init__(self, run_dir: str | Path, uri: str, probe_s: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.dir = RunLayout(self.run_dir).mlflow_spool
        self.uri = uri
        # the run, once it exists (a run created offline gets its id when its creation is sent)
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.client: Any = None
        # False for the sync command, which says what happened in its own line
        self.in_run = True
        self.probe_s = PROBE_S if probe_s is None else probe_s
        self.away_since: float | None = None  # set while the store is unreachable
        self._last_try = 0.0
        self._drop_torn_line()
        self._total = len(self.calls())
        self._kept = self._total - self.sent()  # a resumed run may find calls of its own

    # ---- the files -----------------------------------------------------------------------------

    @property
    def calls_file(self) -> Path:
        return self.dir / CALLS_FILE

    def calls(self) -> list[dict[str, Any]]:
        """Every call ever kept, in order (a torn last line, from a kill mid-write, is dropped)."""
        if not self.calls_file.is_file():
            return []
        calls = []
        for line in self.calls_file.read_text(encoding="utf-8").splitlines():
            try:
                calls.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return calls

    def _drop_torn_line(self) -> None:
        """A kill in the middle of an append leaves a line without its end: cut it off, so the
        next call starts a line of its own."""
        if not self.calls_file.is_file():
            return
        data = self.calls_file.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.calls_file, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)

    def sent(self) -> int:
        try:
            return int((self.dir / SENT_FILE).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    @property
    def pending(self) -> int:
        return self._kept

    def _keep(self, op: str, args: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        index = self._total
        if op == "artifact":  # the original may be temporary: keep a copy
            source = Path(args["path"])
            copy = self.dir / "files" / str(index) / source.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy, dirs_exist_ok=True)
            else:
                shutil.copy2(source, copy)
            args = {**args, "path": str(copy)}
        with open(self.calls_file, "a", encoding="utf-8") as f:
            f.write(json.dumps({"op": op, "args": args}, ensure_ascii=False, default=str) + "\n")
            f.flush()
        self._total += 1
        self._kept += 1

    # ---- sending -------------------------------------------------------------------------------

    def keep_run_creation(self, ex: BaseException, **args: Any) -> None:
        """The store is away as the run starts: its creation is the first call kept (experiment_id,
        or experiment_name and artifact_location; run_name, tags, start_time)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.dir / STORE_FILE, json.dumps({"tracking_uri": self.uri}))
        self._went_away(ex)
        self._keep("create_run", args)

    def write(self, client: Any, run_id: str | None, op: str, **args: Any) -> None:
        """Send one call, or keep it when the store is unreachable (or calls are already kept:
        their order is kept too). Raises only for a call the store refuses."""
        run_id = run_id or self.run_id
        if self._kept:
            with signals_held():
                self._keep(op, args)
            if time.monotonic() - self._last_try >= self.probe_s:
                self.replay(client, run_id)
            return
        from grpo.tracking.store import retry_for

        # a Ctrl-C inside the write waits for it: a transaction cut in half could leave the
        # store locked for the writes that close the run
        with signals_held():
            try:
                retry_for(WRITE_BUDGET_S, send, client, run_id, op, args)
            except Exception as ex:
                if not unreachable(ex):
                    raise
                self._went_away(ex)
                self._keep(op, args)

    def replay(self, client: Any, run_id: str | None) -> int:
        """Send the kept calls, oldest first, until one fails; the number sent. The first time
        everything has gone in after an outage, one line says so. `client` may be None (a run that
        started offline): one is made once the store answers."""
        self._last_try = time.monotonic()
        if self.away_since is not None and not store_answers(self.uri):
            return 0  # still away: no call is tried (each would cost MLflow's retries)
        if client is None:
            from grpo.tracking.store import make_client

            try:
                client = self.client = make_client(self.uri)
            except Exception as ex:
                if not unreachable(ex):
                    raise
                return 0
        run_id = run_id or self.run_id
        calls, done = self.calls(), self.sent()
        self._total = len(calls)
        sent = dropped = 0
        for index in range(done, len(calls)):
            # held: a call sent but not yet counted in `sent` would be sent again
            with signals_held():
                try:
                    if calls[index]["op"] == "create_run":
                        run_id = self._create_run(client, calls[index]["args"])
                    else:
                        send(client, run_id, calls[index]["op"], calls[index]["args"])
                    sent += 1
                except Exception as ex:
                    if unreachable(ex):
                        if self.away_since is None and self.in_run:
                            self._went_away(ex)
                        self._kept = len(calls) - index
                        return sent
                    # a call the store refuses would block every later one: say so, skip it
                    log.warning(
                        "MLflow: a kept %s call was refused and is dropped: %s", calls[index]["op"], ex
                    )
                    dropped += 1
                write_text_atomic(self.dir / SENT_FILE, str(index + 1))
        self._kept = 0
        if self.away_since is not None:
            away = time.monotonic() - self.away_since
            log.warning(
                "MLflow: the tracking store %s answers again after %.0f s; %d kept call(s) sent, in order%s",
                self.uri,
                away,
                sent,
                f" ({dropped} refused and dropped)" if dropped else "",
            )
            self.away_since = None
        return sent

    def _create_run(self, client: Any, args: Mapping[str, Any]) -> str:
        """The kept creation of a run that started offline (once: a replay cut short after it
        finds the run in mlflow_run.json)."""
        from grpo.tracking.store import get_or_create_experiment

        record_file = RunLayout(self.run_dir).mlflow_run
        if record_file.is_file():
            record = json.loads(record_file.read_text(encoding="utf-8"))
            self.run_id, self.experiment_id = str(record["run_id"]), str(record["experiment_id"])
            return self.run_id
        experiment_id = args.get("experiment_id") or get_or_create_experiment(
            client, args["experiment_name"], args.get("artifact_location")
        )
        run = client.create_run(
            experiment_id,
            start_time=args.get("start_time"),
            tags=dict(args["tags"]),
            run_name=args["run_name"],
        )
        self.run_id, self.experiment_id = run.info.run_id, run.info.experiment_id
        record = {"run_id": self.run_id, "experiment_id": self.experiment_id, "tracking_uri": self.uri}
        write_text_atomic(record_file, json.dumps(record))
        return self.run_id

    def close(self, client: Any, run_id: str | None, sync_command: str) -> None:
        """At the end of the run: one last try to send what is kept, then one line for what is left."""
        if not self._kept:
            return
        self.replay(client, run_id)
        if self._kept:
            log.warning(
                "MLflow: the tracking store %s is still unreachable; %d call(s) are kept in %s: send them "
                "once it is back with: %s",
                self.uri,
                self._kept,
                self.calls_file,
                sync_command,
            )

    def _went_away(self, ex: BaseException) -> None:
        self.away_since = time.monotonic()
        self._last_try = self.away_since
        log.warning(
            "MLflow: the tracking store %s is unreachable (%s); the run goes on and its tracking calls "
            "are kept in %s until it answers",
            self.uri,
            plain_reason(ex),
            self.dir / CALLS_FILE,
        )


# what a store error says, in a few plain words (MLflow's own text repeats the URL and urllib3's
# retry chatter)
_REASONS = (
    ("connection refused", "connection refused"),
    ("timed out", "timed out"),
    ("name or service not known", "unknown host"),
    ("nodename nor servname", "unknown host"),
    ("temporary failure in name resolution", "unknown host"),
    ("remote end closed connection", "the server closed the connection"),
    ("connection aborted", "the connection was aborted"),
    ("database is locked", "database is locked"),
    ("database is busy", "database is busy"),
    ("unable to open database file", "cannot open the database file"),
)


def plain_reason(ex: BaseException) -> str:
    """Why the store is unreachable, in a few words ("connection refused", "database is
    locked"), else the error's first 160 characters on one line."""
    text = " ".join(str(ex).split())
    lowered = text.lower()
    for sign, words in _REASONS:
        if sign in lowered:
            return words
    status = re.search(r"error code (5\d\d)", lowered)
    return f"the server answers HTTP {status[1]}" if status else text[:160]
