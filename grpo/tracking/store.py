"""Where runs are logged: the MLflow store URI, experiments, and robust client calls.

The default store is an embedded SQLite database at <output_root>/mlflow.db with artifacts next to
it, so no server is needed. Every job of a sweep resolves the same absolute path. Several processes
(a joblib sweep, two terminals) may write to one SQLite file: the first one creates the tables
under a file lock, and every logging call retries with backoff when the database is busy.

mlflow is imported inside functions only; `resolve_*` helpers stay light.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

from grpo.errors import UserError
from grpo.run.layout import output_root

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from grpo.config import GrpoConfig, TrackingConfig

T = TypeVar("T")

DB_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
# total time a logging call keeps retrying a busy / unreachable store before giving up
RETRY_BUDGET_S = 120.0
# the experiment-kind tag MLflow 3's UI reads to open an experiment on its runs table (model
# training) rather than on an empty GenAI traces overview; set on the experiments grpo creates
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"
# MLflow 3.17's UI shows the kind chosen by its GenAI / Model training switch (GenAI unless picked);
# this URL query picks Model training, so a link opens on the runs table whatever the tag says
UI_QUERY = "?workflowType=machine_learning"
# where `mlflow ui` serves by default
LOCAL_UI = "http://127.0.0.1:5000"
# the runs-table view grpo's links open, with the key metric columns shown: an MLflow saved view
# (the experiment tag mlflow.sharedViewState.<key>, what the UI's Views > Save view writes; listed
# in its Views menu, opened by the URL query viewStateShareKey=<key>); the UI has no setting for
# an experiment's default columns
VIEW_KEY = "grpo"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
VIEW_NAME = "grpo: rewards"
# the run's objective (its last evaluation's mean reward), the evaluations before and after
# training and their paired gain, the training reward (last logged step)
KEY_METRICS = ("objective", "eval/gain", "eval/baseline/mean", "eval/final/mean", "train/reward")
# the attribute columns of MLflow's default kept (its UI's names; Source and Models say nothing
# here: every run's source is python -m grpo), shown after the metrics
_SHOWN_ATTRIBUTES = ("Dataset",)
# the run-name column's width (px) in the view: room for about 50 characters of a name
RUN_NAME_WIDTH = 380


def quiet_mlflow() -> None:
    """Keep MLflow offline and quiet: no telemetry, no migration chatter on a fresh database."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    # MLflow's REST client retries a failed request 7 times with backoff factor 2 (~4 minutes)
    # before raising; grpo keeps a run's calls on disk instead (grpo/tracking/spool.py), so a
    # dead server should cost seconds: 2 retries, 1 s apart, and a 30 s timeout per request
    # (a value the user set wins)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    # log_table appends by downloading the table first: no progress bar on the console for that
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in ("mlflow.store.db.utils", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # one "Retrying ..." warning per retry of a request to a server that is away: the spool says
    # it once instead (grpo/tracking/spool.py)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def tracking_uri(settings: GrpoConfig) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else the SQLite file under the output root."""
    uri = settings.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{output_root(settings) / DB_FILE}"
    return check_uri(uri, field="tracking.uri")


def check_uri(uri: str, field: str) -> str:
    """Refuse file stores (MLflow 3 no longer supports ./mlruns); make a relative SQLite path absolute."""
    scheme = urlparse(uri).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and uri[1:3] in (":\\", ":/")):
        raise UserError(
            f"{field}={uri} is a file store, which MLflow 3 does not support: "
            f"use sqlite:///path/to/mlflow.db or http://host:port"
        )
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute():
        from hydra.utils import to_absolute_path

        return f"sqlite:///{to_absolute_path(str(path))}"
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (None for other stores and in-memory SQLite)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = unquote(uri[len("sqlite:///") :].split("?", 1)[0])
    return Path(path) if path and path != ":memory:" else None


SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(uri: str, field: str) -> None:
    """A sqlite:/// store's file, when it exists, is an SQLite database (an empty file is one, to
    be): a damaged or foreign file would fail deep inside SQLAlchemy, after the run began. Other
    stores pass. UserError naming the file and the fix."""
    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as ex:
        raise UserError(f"{field}: cannot read the MLflow store {path} ({ex.strerror or ex})") from None
    if head and head != SQLITE_HEADER[: len(head)] or 0 < len(head) < len(SQLITE_HEADER):
        raise UserError(
            f"{field}: {path} is not an SQLite database (damaged, or another kind of file), so MLflow cannot "
            "use it as its store; move it away, or point tracking.uri=sqlite:///<another file>.db"
        )


def experiment_name(tracking: TrackingConfig, env: Mapping[str, Any] | None) -> str:
    """tracking.experiment, else one experiment per environment (`env`: the env group)."""
    if tracking.experiment:
        return tracking.experiment
    name = env_name(env)
    return f"grpo-{name}" if name else "grpo"


def env_name(env: Any) -> str:
    """An env config's name ("" when it has none); an env named by an id (verifiers:
    org/my-env@1.0) by the id's name, my-env."""
    env = env or {}
    name = env.get("name")
    if not name and env.get("id"):
        name = str(env["id"]).rsplit("/", 1)[-1].split("@", 1)[0]
    return str(name or "")


def artifact_location(tracking: TrackingConfig, uri: str, experiment: str) -> str | None:
    """Artifact root for a new experiment. A SQLite store keeps artifacts next to its database
    (MLflow's own default would be ./mlruns under whatever directory the run started in)."""
    if tracking.artifact_location:
        location = tracking.artifact_location
        if urlparse(location).scheme in ("", "file"):
            from hydra.utils import to_absolute_path

            location = Path(to_absolute_path(location.removeprefix("file://"))).as_uri()
        return location
    db = sqlite_path(uri)
    if db is None:
        return None
    return (db.parent / ARTIFACTS_DIR / experiment).as_uri()


def local_artifact_dir(artifact_uri: str | None) -> Path | None:
    """The folder on this machine a run's artifact URI names (file:// or a plain path), else None
    (a server's mlflow-artifacts:, s3:, ...)."""
    if not artifact_uri or urlparse(artifact_uri).scheme not in ("", "file"):
        return None
    return Path(unquote(urlparse(artifact_uri).path))


# ---- robust calls ---------------------------------------------------------------------------------


def _is_transient(ex: BaseException) -> bool:
    """A busy SQLite file or a server that is briefly unreachable: worth retrying."""
    text = str(ex).lower()
    if any(s in text for s in ("database is locked", "database table is locked", "database is busy")):
        return True
    code = getattr(ex, "error_code", "")
    return code in ("TEMPORARILY_UNAVAILABLE", "RESOURCE_EXHAUSTED") or isinstance(ex, ConnectionError)


def with_retry(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn`, retrying transient store errors with jittered exponential backoff."""
    return retry_for(RETRY_BUDGET_S, fn, *args, **kwargs)


def retry_for(budget_s: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`with_retry` within `budget_s` seconds."""
    deadline = time.monotonic() + budget_s
    delay = 0.1
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as ex:
            if not _is_transient(ex) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)


@contextlib.contextmanager
def _init_lock(uri: str) -> Iterator[None]:
    """Serialise the first connection to a SQLite file: MLflow creates its tables then, and two
    processes doing that at once can fail half-way."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; MLflow's own retries remain
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def make_client(uri: str) -> MlflowClient:
    """An MlflowClient on `uri` whose store is created and migrated (safely across processes)."""
    quiet_mlflow()
    from mlflow import MlflowClient

    with _init_lock(uri):
        # building the client builds the store (tables on a fresh SQLite file); the query checks it
        try:
            client = MlflowClient(tracking_uri=uri)
            with_retry(client.search_experiments, max_results=1)
        except Exception as ex:
            damage = _sqlite_damage(ex)
            if damage is None or sqlite_path(uri) is None:
                raise
            raise UserError(
                f"the MLflow store {sqlite_path(uri)} is damaged ({damage}); nothing was written to it: move "
                "it away (a new store is then created) or point tracking.uri=sqlite:///<another file>.db"
            ) from None
    return client


def _sqlite_damage(ex: BaseException) -> str | None:
    """SQLite's own words when `ex` (or its cause) says the database file is damaged, else None."""
    while ex is not None:
        text = str(getattr(ex, "orig", None) or ex).lower()
        for words in ("database disk image is malformed", "file is not a database"):
            if words in text:
                return words
        ex = ex.__cause__ or ex.__context__
    return None


def get_or_create_experiment(client: MlflowClient, name: str, location: str | None) -> str:
    """The id of experiment `name`, created with `location` as its artifact root if new (a deleted
    experiment of that name is restored rather than failing)."""
    from mlflow.exceptions import MlflowException

    experiment = with_retry(client.get_experiment_by_name, name)
    if experiment is None:
        try:
            with_retry(
                client.create_experiment,
                name,
                artifact_location=location,
                tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND},
            )
        except MlflowException as ex:
            # another job of the sweep created it a moment ago
            if (
                "already exists" not in str(ex).lower()
                and getattr(ex, "error_code", "") != "RESOURCE_ALREADY_EXISTS"
            ):
                raise
        experiment = with_retry(client.get_experiment_by_name, name)
        assert experiment is not None
    if experiment.lifecycle_stage == "deleted":
        with_retry(client.restore_experiment, experiment.experiment_id)
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # made before grpo set it; a user's choice stays
        with_retry(
            client.set_experiment_tag, experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND
        )
    if _saved_state(experiment.tags.get(VIEW_TAG)) != runs_view_state():
        now = int(time.time() * 1000)
        view = json.dumps({"name": VIEW_NAME, "createdAt": now, "updatedAt": now, "state": runs_view_state()})
        with_retry(client.set_experiment_tag, experiment.experiment_id, VIEW_TAG, view)
    return experiment.experiment_id


def runs_view_state() -> str:
    """The runs-table state of grpo's saved view (the UI's own state keys): the run name wide,
    then KEY_METRICS, then MLflow's Dataset and Duration columns; newest runs first."""
    name, metrics = "attributes.`Run Name`", [f"metrics.`{key}`" for key in KEY_METRICS]
    attributes = [f"attributes.`{a}`" for a in _SHOWN_ATTRIBUTES]
    state = {
        "selectedColumns": [*attributes, *metrics],
        "columnOrder": [name, "attributes.`Created`", *metrics, *attributes, "attributes.`Duration`"],
        "columnWidths": {name: RUN_NAME_WIDTH},
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }
    return json.dumps(state)


def _saved_state(tag: str | None) -> str | None:
    """The state a saved-view tag holds (None when there is none, or not in MLflow's envelope)."""
    try:
        return json.loads(tag or "")["state"]
    except (ValueError, KeyError, TypeError):
        return None


def ui_base(uri: str, ui_url: str | None = None) -> str:
    """Where the UI of the store at `uri` is: `ui_url` when given, the tracking server itself, or
    where `mlflow ui` serves a SQLite store by default."""
    if ui_url:
        return str(ui_url).rstrip("/")
    return uri.rstrip("/") if urlparse(uri).scheme in ("http", "https") else LOCAL_UI


def experiment_url(uri: str, experiment_id: str, ui_url: str | None = None) -> str:
    """The UI page of an experiment's runs table (opened on Model training, not GenAI), in grpo's
    saved view (its key metric columns)."""
    return f"{ui_base(uri, ui_url)}/#/experiments/{experiment_id}/runs{UI_QUERY}&viewStateShareKey={VIEW_KEY}"


def run_url(uri: str, experiment_id: str, run_id: str, ui_url: str | None = None) -> str:
    """The UI page of one run (opened on Model training, not GenAI)."""
    return f"{ui_base(uri, ui_url)}/#/experiments/{experiment_id}/runs/{run_id}{UI_QUERY}"


def artifact_url(uri: str, experiment_id: str, run_id: str, path: str, ui_url: str | None = None) -> str:
    """The UI page showing one artifact of a run (an HTML page is rendered there)."""
    return f"{ui_base(uri, ui_url)}{artifact_anchor(experiment_id, run_id, path)}"


def artifact_anchor(experiment_id: str, run_id: str, path: str) -> str:
    """The in-app part of `artifact_url` (a link in a run's description works on any host / port)."""
    return f"/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}{UI_QUERY}"


def ui_command(uri: str, ui_url: str | None = None) -> str | None:
    """The command that serves the UI of a store no server serves yet (None: a tracking server,
    or tracking.ui_url names where the UI is)."""
    if ui_url or urlparse(uri).scheme in ("http", "https"):
        return None
    return f"mlflow ui --backend-store-uri {uri}"


def ui_hint(uri: str, ui_url: str | None = None) -> str:
    """How to open the links of a store that no server serves yet ("" for a tracking server)."""
    command = ui_command(uri, ui_url)
    if command is None:
        return ""
    return f" (serve them with: {command}; another host / port: tracking.ui_url=URL)"


def metric_curve(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """A metric's (step, value) points sorted by step; a step logged twice (a resumed run repeats
    the steps after its last checkpoint) keeps its latest value."""
    latest: dict[int, tuple[int, float]] = {}
    for m in with_retry(client.get_metric_history, run_id, key):
        if m.step not in latest or m.timestamp >= latest[m.step][0]:
            latest[m.step] = (m.timestamp, m.value)
    return [(step, latest[step][1]) for step in sorted(latest)]
