"""The MLflow tracker on a real SQLite store: run lifecycle, params, metrics, evaluations,
artifacts, plots, resume, failures, several writer processes, tracking=none."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.grpo_process import run_grpo
from helpers.mlflow_server import MlflowServer
from mlflow import MlflowClient

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.errors import UserError
from grpo.evaluation.summary import EvalResult
from grpo.run.layout import MLFLOW_RUN_FILE
from grpo.tracking import NullTracker, make_tracker
from grpo.tracking.mlflow_tracker import eval_scores, render_messages, sample_table
from grpo.tracking.params import config_params, safe_name, varied_overrides
from grpo.tracking.store import (
    EXPERIMENT_KIND_TAG,
    MODEL_TRAINING_KIND,
    experiment_url,
    get_or_create_experiment,
    make_client,
    metric_curve,
    run_url,
    tracking_uri,
    ui_hint,
    with_retry,
)


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """A migrated, empty MLflow SQLite file: copying it saves each test MLflow's table creation."""
    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    make_client(f"sqlite:///{db}")
    return db


@pytest.fixture
def root(tmp_path, empty_store) -> Path:
    """An output root whose default store (mlflow.db) already has MLflow's tables."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return tmp_path


def _cfg(root: Path, *overrides: str):
    return load_settings(["+env=alphabet_sort", "tracking=mlflow", f"output_root={root}", *overrides])


def _eval_result(out: Path, label: str, scores: list[float]) -> EvalResult:
    """An EvalResult backed by real results.jsonl / metadata.json files (one rollout per example)."""
    out.mkdir(parents=True, exist_ok=True)
    records = [
        {
            "example_id": i,
            "rollout_index": 0,
            "language": "en",
            "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"sort {i} b a"}],
            "completion": [{"role": "assistant", "content": f"a b {i}"}],
            "alphabetical": s,
            "reward": s,
            "num_turns": 1,
            "truncated": False,
        }
        for i, s in enumerate(scores)
    ]
    (out / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (out / "metadata.json").write_text(json.dumps({"label": label}))
    mean = sum(scores) / len(scores)
    return EvalResult(
        label=label,
        n=len(scores),
        r=1,
        mean=mean,
        std=0.0,
        per_function={"alphabetical": mean},
        per_function_std={"alphabetical": 0.0},
        per_language={"en": {"mean": mean, "std": 0.0, "count": len(scores), "truncated": 0.0}},
        pass_at_k=None,
        rewards=[[s] for s in scores],
        results_path=out / "results.jsonl",
        metadata_path=out / "metadata.json",
        seconds=0.5,
    )


def _train_log(callback, step: int, reward: float, kl: float) -> None:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    state = TrainerState()
    state.global_step = step
    logs = {
        "loss": 0.5 / step,
        "reward": reward,
        "kl": kl,
        "rewards/alphabetical/mean": reward,
        "grad_norm": 1.0,
    }
    callback.on_log(
        TrainingArguments(output_dir="unused", report_to="none"), state, TrainerControl(), logs=logs
    )


def _artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for a in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, a.path) if a.is_dir else {a.path}
    return found


def test_run_logs_params_metrics_evals_artifacts_and_plots(root):
    cfg = _cfg(root, "trainer.beta=0.04", "optimizer.lr=3e-6")
    run_dir = root / "runs" / "r1"
    tracker = make_tracker(cfg, run_dir)
    with tracker:
        tracker.log_config(cfg)
        tracker.log_eval("baseline", _eval_result(run_dir / "eval_baseline", "baseline", [0.1, 0.3]), step=0)
        callback = tracker.trainer_callback()
        for step, (reward, kl) in enumerate([(0.2, 0.01), (0.4, 0.02), (0.3, 0.05)], start=1):
            _train_log(callback, step, reward, kl)
        tracker.log_eval("final", _eval_result(run_dir / "eval_final", "final", [0.5, 0.7]), step=3)
        tracker.finish_run(0.6)

    # the default store: <output_root>/mlflow.db, artifacts next to it, one experiment per env
    assert tracking_uri(cfg) == f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri(cfg))
    run = client.get_run(tracker.run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name == "grpo-alphabet_sort"
    assert run.info.artifact_uri.startswith((root / "mlartifacts" / "grpo-alphabet_sort").as_uri())
    assert run.info.status == "FINISHED"
    assert json.loads((run_dir / MLFLOW_RUN_FILE).read_text())["run_id"] == tracker.run_id

    params = run.data.params
    assert params["cfg.trainer.beta"] == "0.04" and params["cfg.optimizer.lr"] == "3e-06"
    assert params["cfg.optimizer.betas"] == "[0.9, 0.99]"  # a list is one JSON value
    assert params["cfg.env.name"] == "alphabet_sort" and params["cfg.output_root"] == str(root)
    assert all(k.startswith("cfg.") for k in params) and not any(k.startswith("cfg.hydra") for k in params)
    assert params == config_params(cfg)
    # the env's translations are no params; the resolved config artifact keeps every setting
    assert not any(k.startswith("cfg.env.prompts") for k in params)
    resolved = yaml.safe_load(
        Path(client.download_artifacts(tracker.run_id, "config.yaml", str(root))).read_text()
    )
    assert resolved["env"]["prompts"]["en"] == cfg.env["prompts"]["en"]
    assert resolved["trainer"]["beta"] == 0.04

    assert [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, "train/reward")] == [
        (1, 0.2),
        (2, 0.4),
        (3, 0.3),
    ]
    assert [m.step for m in client.get_metric_history(tracker.run_id, "train/rewards/alphabetical/mean")] == [
        1,
        2,
        3,
    ]
    metrics = run.data.metrics
    assert metrics["eval/baseline/mean"] == pytest.approx(0.2)
    assert metrics["eval/final/mean"] == pytest.approx(0.6)
    assert metrics["eval/final/func/alphabetical"] == pytest.approx(0.6)
    assert metrics["eval/final/lang/en/count"] == 2
    assert [m.step for m in client.get_metric_history(tracker.run_id, "eval/final/mean")] == [3]
    assert metrics["objective"] == pytest.approx(0.6)
    # an evaluation's constants are tags: as metrics they would lead the UI's chart view
    assert not any(k.endswith(("/num_examples", "/rollouts_per_example", "/seconds")) for k in metrics)
    assert (
        run.data.tags["eval/final/num_examples"] == "2"
        and run.data.tags["eval/final/rollouts_per_example"] == "1"
    )
    assert float(run.data.tags["eval/baseline/seconds"]) >= 0

    assert _artifacts(client, tracker.run_id) >= {
        "config.yaml",
        "eval/baseline/results.jsonl",
        "eval/baseline/metadata.json",
        "eval/baseline/samples.json",
        "eval/final/samples.json",
        "plots/train_curves.png",
        "plots/eval_by_function.png",
    }
    local = Path(client.download_artifacts(tracker.run_id, "eval/final/samples.json", str(root / "dl")))
    table = json.loads(local.read_text())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert [(r["prompt"], r["completion"], r["reward"], r["alphabetical"]) for r in rows] == [
        ("sort 0 b a", "a b 0", 0.5, 0.5),
        ("sort 1 b a", "a b 1", 0.7, 0.7),
    ]
    config_yaml = Path(client.download_artifacts(tracker.run_id, "config.yaml", str(root / "dl"))).read_text()
    assert "beta: 0.04" in config_yaml and "${" not in config_yaml  # resolved


def test_experiments_open_on_the_runs_table(root, capsys):
    """grpo's experiments carry MLflow's model-training kind (an older untagged one gets it, a
    user's own choice stays), and the run's first line links the runs table of the UI."""
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    old = client.create_experiment("grpo-alphabet_sort")
    mine = client.create_experiment("mine", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    tracker = make_tracker(_cfg(root), root / "runs" / "r1")
    with tracker:
        pass
    assert tracker.experiment_id == old
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    assert get_or_create_experiment(client, "mine", None) == mine
    assert client.get_experiment(mine).tags[EXPERIMENT_KIND_TAG] == "genai_development"
    new = get_or_create_experiment(client, "fresh", None)
    assert client.get_experiment(new).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    line = capsys.readouterr().out.splitlines()[1]
    # a SQLite store: where `mlflow ui` serves it by default, and how to serve it or point elsewhere
    assert line.startswith(
        f"mlflow: run page http://127.0.0.1:5000/#/experiments/{old}/runs/{tracker.run_id}"
        f"?workflowType=machine_learning, runs table http://127.0.0.1:5000/#/experiments/{old}/runs"
        "?workflowType=machine_learning&viewStateShareKey=grpo (serve them with: mlflow ui --backend-store-uri sqlite:///"
    ), line
    assert line.endswith("; another host / port: tracking.ui_url=URL)")
    # a server: its own host and port; tracking.ui_url wins over both
    assert (
        experiment_url("http://host:5001/", "7")
        == "http://host:5001/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=grpo"
    )
    # the view that link opens: a saved view of the experiment (MLflow's envelope), the key metrics
    # shown; written once, not again while it holds the same state
    for experiment_id in (old, new):
        tag = client.get_experiment(experiment_id).tags["mlflow.sharedViewState.grpo"]
        view = json.loads(tag)
        assert view["name"] == "grpo: rewards" and isinstance(view["createdAt"], int)
        columns = json.loads(view["state"])["selectedColumns"]
        assert "metrics.`objective`" in columns and "metrics.`eval/final/mean`" in columns
    get_or_create_experiment(client, "fresh", None)
    assert client.get_experiment(new).tags["mlflow.sharedViewState.grpo"] == tag
    assert (
        run_url("http://host:5001", "7", "abc")
        == "http://host:5001/#/experiments/7/runs/abc?workflowType=machine_learning"
    )
    assert run_url("sqlite:///x.db", "7", "abc", "http://box:8080/").startswith(
        "http://box:8080/#/experiments/7/runs/abc?"
    )
    assert ui_hint("http://host:5001", None) == "" and ui_hint("sqlite:///x.db", "http://box:8080") == ""


def test_an_exception_marks_the_run_failed_and_propagates(root):
    cfg = _cfg(root)
    tracker = make_tracker(cfg, root / "run")
    with pytest.raises(RuntimeError, match="loss is NaN"), tracker:
        tracker.log_config(cfg)
        _train_log(tracker.trainer_callback(), 1, 0.5, 0.0)
        raise RuntimeError("loss is NaN")
    run = MlflowClient(tracking_uri(cfg)).get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["grpo.error"] == "RuntimeError: loss is NaN"
    assert run.data.metrics["train/reward"] == 0.5  # what was logged before the failure stays


def test_a_run_ends_with_its_page_and_links_its_readable_pages(root):
    """The lines a run ends with name its run page, the final evaluation's and the last training
    step's readable pages, and the command that serves them; the run page's Description links
    each readable page (MLflow's UI renders it as markdown)."""
    cfg = _cfg(root)
    tracker = make_tracker(cfg, root / "run")
    with tracker:
        tracker.log_config(cfg)
        tracker.log_eval("baseline", _eval_result(root / "e0", "baseline", [0.0, 1.0]))
        tracker.log_completions(
            {
                "step": [3],
                "prompt": ["sort b a"],
                "completion": ["<alphabetical_sorted>a b"],
                "reward": [0.5],
            },
            3,
        )
        tracker.log_eval("final", _eval_result(root / "e1", "final", [1.0, 1.0]), step=3)
    client = MlflowClient(tracking_uri(cfg))
    run = client.get_run(tracker.run_id)
    base = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{tracker.run_id}"
    query = "?workflowType=machine_learning"
    assert tracker.where() == [
        f"mlflow: run '{run.info.run_name}': {base}{query}",
        f"mlflow: training: completions of the last logged step: {base}/artifacts/train/completions/step-000003.html{query}",
        f"mlflow: final evaluation: sample rollouts: {base}/artifacts/eval/final/samples.html{query}",
        f"mlflow: open them with: mlflow ui --backend-store-uri {tracking_uri(cfg)} (another host / port: "
        "tracking.ui_url=URL)",
    ]
    note = run.data.tags["mlflow.note.content"]
    pages = {"eval/baseline/samples.html", "train/completions/step-000003.html", "eval/final/samples.html"}
    for page in pages:
        assert (
            f"(/#/experiments/{run.info.experiment_id}/runs/{tracker.run_id}/artifacts/{page}{query})" in note
        )
    assert pages <= _artifacts(client, tracker.run_id)  # each link names a page the run has


def test_a_start_refused_after_the_run_opened_leaves_no_run_and_no_folder(tmp_path, empty_store):
    """`python -m grpo` with a model dir that passes the preflight (its files are there) but cannot
    load (an empty config.json): one line, exit 2, no run in the runs table, no run folder."""
    root = tmp_path / "out"
    root.mkdir()
    shutil.copy(empty_store, root / "mlflow.db")
    broken = tmp_path / "broken-model"
    broken.mkdir()
    for name in ("config.json", "tokenizer_config.json"):
        (broken / name).write_text("{}", encoding="utf-8")
    proc = run_grpo(
        ["+env=alphabet_sort", "model.source=pretrained", f"model.path={broken}", "tracking=mlflow"],
        root=root,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"model.path='{broken}'" in errors[0], proc.stderr
    assert "mlflow: run " in proc.stdout and "removed (the start was refused" in proc.stdout
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiments = client.search_experiments()
    assert client.search_runs([e.experiment_id for e in experiments]) == []  # none, FAILED or other
    assert not (root / "runs").exists()  # the run folder Hydra claimed went too
    assert list(root.rglob("config.yaml")) == []  # and the run's artifacts


def test_ctrl_c_marks_the_run_killed(root):
    cfg = _cfg(root)
    tracker = make_tracker(cfg, root / "run")
    with pytest.raises(KeyboardInterrupt), tracker:
        raise KeyboardInterrupt
    assert MlflowClient(tracking_uri(cfg)).get_run(tracker.run_id).info.status == "KILLED"


def test_resume_continues_the_same_run(root):
    first_dir = root / "runs" / "first"
    cfg = _cfg(root, "trainer.max_steps=2")
    first = make_tracker(cfg, first_dir)
    with pytest.raises(RuntimeError), first:  # the first run dies after two steps
        first.log_config(cfg)
        first.log_eval("baseline", _eval_result(first_dir / "ev", "baseline", [0.1, 0.3]), step=0)
        callback = first.trainer_callback()
        _train_log(callback, 1, 0.1, 0.0)
        _train_log(callback, 2, 0.2, 0.0)
        raise RuntimeError("killed")

    resumed_cfg = _cfg(root, "trainer.max_steps=4", f"resume={first_dir}")
    second = make_tracker(resumed_cfg, root / "runs" / "second")
    with second:
        second.log_config(resumed_cfg)
        second.log_eval("baseline", _eval_result(root / "ev2", "baseline", [0.1, 0.3]), step=0)
        callback = second.trainer_callback()
        _train_log(callback, 3, 0.3, 0.0)
        _train_log(callback, 4, 0.4, 0.0)

    assert second.run_id == first.run_id
    client = MlflowClient(tracking_uri(cfg))
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED"
    assert metric_curve(client, run.info.run_id, "train/reward") == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    assert run.data.params["cfg.trainer.max_steps"] == "2"  # params are immutable ...
    assert run.data.tags["grpo.resumed.cfg.trainer.max_steps"] == "4"  # ... the change is a tag
    assert run.data.params["cfg.resume"] == "None" and run.data.tags["grpo.resumed.cfg.resume"] == str(
        first_dir
    )
    assert len(client.search_runs([run.info.experiment_id])) == 1
    # the re-run baseline evaluation does not append its samples a second time
    table = Path(client.download_artifacts(run.info.run_id, "eval/baseline/samples.json", str(root / "dl")))
    assert len(json.loads(table.read_text())["data"]) == 2


def test_tracking_none_creates_no_store(tmp_path):
    cfg = load_settings(["+env=alphabet_sort", "tracking=none", f"output_root={tmp_path}"])
    tracker = make_tracker(cfg, tmp_path / "run")
    assert isinstance(tracker, NullTracker)
    with tracker:
        tracker.log_config(cfg)
        tracker.log_metrics({"x": 1.0}, step=1)
        tracker.log_eval("baseline", _eval_result(tmp_path / "ev", "baseline", [0.5]), step=0)
        tracker.finish_run(0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ev"]


@pytest.mark.parametrize("uri", ["./mlruns", "file:///tmp/mlruns", "/abs/mlruns"])
def test_file_store_uri_is_a_user_error(tmp_path, uri):
    with pytest.raises(UserError, match="tracking.uri=.*file store.*sqlite:///"):
        check(_cfg(tmp_path, f"tracking.uri={uri}"))


def test_unknown_backend_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="tracking.backend=wandb"):
        check(_cfg(tmp_path, "tracking.backend=wandb"))


def test_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracking_uri(_cfg(tmp_path, "tracking.uri=sqlite:///sub/x.db")) == f"sqlite:///{tmp_path}/sub/x.db"


def test_train_metrics_names_and_values():
    import torch

    from grpo.tracking.trainer_callback import train_metrics

    logs = {
        "loss": 1.5,
        "rewards/f/mean": torch.tensor(0.25),
        "train_runtime": 3.0,
        "note": "text",
        "x": None,
    }
    assert train_metrics(logs, "train/") == {
        "train/loss": 1.5,
        "train/rewards/f/mean": 0.25,
        "train/summary/runtime": 3.0,
    }


def test_helpers():
    assert safe_name("eval/a@b:c") == "eval/a_b_c"
    # Hydra writes a job's bools capitalised: a shared `x=false` is not a varied `x=False`
    assert varied_overrides(["x=False", "+y=null", "seed=1"], ["x=false", "+y=null", "seed=0,1"]) == [
        "seed=1"
    ]
    assert varied_overrides(["+env=a", "lr=1e-06", "beta=0"], ["+env=a", "lr=1e-6,3e-6", "beta=0,1"]) == [
        "lr=1e-06",
        "beta=0",
    ]
    assert render_messages([{"role": "assistant", "content": "hi"}]) == "hi"
    assert render_messages([{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]) == (
        "[assistant] a\n\n[user] b"
    )
    scores = eval_scores(
        {"eval/final/func/f": 0.5, "eval/baseline/func/f": 0.1, "eval/final/mean": 0.4, "x": 1}
    )
    assert list(scores) == ["baseline", "final"]
    assert scores["final"] == {"f": 0.5, "(total)": 0.4}


def test_sample_table_limit_and_columns(tmp_path):
    result = _eval_result(tmp_path, "eval", [0.1, 0.2, 0.3])
    table = sample_table(result.results_path, ["alphabetical"], limit=2)
    assert table["reward"] == [0.1, 0.2] and table["alphabetical"] == [0.1, 0.2]
    assert table["prompt"] == ["sort 0 b a", "sort 1 b a"]


def test_with_retry_retries_a_locked_database_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert with_retry(flaky) == "ok" and len(calls) == 3
    with pytest.raises(ValueError):
        with_retry(lambda: (_ for _ in ()).throw(ValueError("bad value")))


def _writer(uri: str, experiment: str, worker: int, steps: int, queue) -> None:
    """One process logging `steps` steps into a shared store (the first one creates its tables)."""
    cfg = load_settings(
        ["+env=alphabet_sort", "tracking=mlflow", f"tracking.uri={uri}", f"tracking.experiment={experiment}"]
    )
    tracker = make_tracker(cfg, Path(uri.removeprefix("sqlite:///")).parent / f"run{worker}")
    with tracker:
        tracker.log_config(cfg)
        for step in range(1, steps + 1):
            tracker.log_metrics({"train/reward": worker + step / 1000, "train/kl": 0.1}, step)
    queue.put(tracker.run_id)


@pytest.mark.slow
def test_parallel_writers_share_one_fresh_sqlite_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    ctx = multiprocessing.get_context("spawn")  # separate interpreters, like joblib's loky workers
    queue = ctx.Queue()
    steps = 40
    procs = [ctx.Process(target=_writer, args=(uri, "shared", w, steps, queue)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    run_ids = [queue.get(timeout=5) for _ in procs]
    client = MlflowClient(uri)
    for run_id in run_ids:
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert len(client.get_metric_history(run_id, "train/reward")) == steps
        assert len(client.get_metric_history(run_id, "train/kl")) == steps
    assert len(client.search_experiments(filter_string="name = 'shared'")) == 1


# ---- a real tracking server --------------------------------------------------------------------


@pytest.fixture
def mlflow_server(tmp_path) -> Iterator[str]:
    """`mlflow server` on a free 127.0.0.1 port with its own SQLite store and artifact directory."""
    server = MlflowServer(tmp_path / "server")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.mark.slow
def test_run_logs_to_a_tracking_server(tmp_path, mlflow_server):
    root = tmp_path / "outputs"
    cfg = _cfg(root, f"tracking.uri={mlflow_server}")
    tracker = make_tracker(cfg, root / "run")
    with tracker:
        tracker.log_config(cfg)
        _train_log(tracker.trainer_callback(), 1, 0.25, 0.01)
        tracker.log_eval("final", _eval_result(root / "run" / "eval_final", "final", [0.5, 1.0]), step=1)
        tracker.finish_run(0.75)

    client = MlflowClient(mlflow_server)
    run = client.get_run(tracker.run_id)
    assert client.get_experiment(run.info.experiment_id).name == "grpo-alphabet_sort"
    assert run.info.status == "FINISHED"
    assert run.data.params == config_params(cfg)
    assert run.data.metrics["train/reward"] == 0.25 and run.data.metrics["eval/final/mean"] == 0.75
    # artifacts went through the server into its own artifact store
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert _artifacts(client, tracker.run_id) >= {
        "config.yaml",
        "eval/final/results.jsonl",
        "eval/final/samples.json",
        "plots/train_curves.png",
    }
    assert list((tmp_path / "server" / "artifacts").rglob("results.jsonl"))
    assert not (root / "mlflow.db").exists() and not (root / "mlartifacts").exists()


def test_a_rewards_by_language_plot_without_points_is_refused(tmp_path):
    """No language with a point (a run that never validated): a clear error, no empty picture."""
    from grpo.tracking.plots import RM_REWARD, plot_rewards_by_language

    path = tmp_path / "rm_vs_gold.png"
    with pytest.raises(ValueError, match="no language has a point"):
        plot_rewards_by_language({"en": {RM_REWARD: [], "rubric": []}}, path)
    assert not path.exists()
    plot_rewards_by_language({"en": {RM_REWARD: [(1, 0.5), (2, 0.7)], "rubric": [(1, 0.1), (2, 0.2)]}}, path)
    assert path.stat().st_size > 0


def test_plot_legends_read_at_the_docs_column_width(tmp_path, monkeypatch):
    """Shown as wide as the docs' reading column (~1000 px at 1400 px), every legend and label of
    a plot reads at >= 11 px, three language panels (results.md's plots) or one."""
    from matplotlib.figure import Figure

    from grpo.tracking.plots import RM_REWARD, plot_reward_curves, plot_rewards_by_language, plot_train_curves

    saved = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), savefig(fig, *a, **k))[1])
    curve = [(1, 0.1), (2, 0.3), (3, 0.2)]
    panels = {
        lang: {RM_REWARD: curve, "rubric": curve, "format": curve} for lang in ("de", "fr", "ru", "zh", "ja")
    }
    plot_rewards_by_language(panels, tmp_path / "by_language.png")
    plot_reward_curves({"lr=1e-6": curve, "lr=3e-6": curve}, tmp_path / "sweep.png", "val/reward")
    plot_train_curves(
        {"train/reward": curve, "val/reward": curve}, tmp_path / "train.png", evals={"final": (3, 0.2)}
    )
    assert len(saved) == 3
    for fig in saved:
        shown = 1000 / (fig.get_size_inches()[0] * 72)  # screen px per point at the column's width
        texts = [t for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        texts += [ax.yaxis.label for ax in fig.axes if ax.get_ylabel()]
        assert texts
        small = [
            (t.get_text(), round(t.get_fontsize() * shown, 1)) for t in texts if t.get_fontsize() * shown < 11
        ]
        assert not small, small


def test_a_language_mix_run_gets_per_language_plots(root):
    """val/lang/<code>/mean curves and per-language reward curves (a learned RM against the rubric)
    are drawn when the run logged more than one language; an English run gets neither."""
    from grpo.tracking.plots import by_language

    cfg = _cfg(root, "language=mix", "language.members=[en,sv]")
    tracker = make_tracker(cfg, root / "runs" / "mix")
    with tracker:
        tracker.log_config(cfg)
        for step in (1, 2, 3):
            tracker.log_metrics(
                {
                    "train/reward": 0.1 * step,
                    "train/rewards/alphabetical/en/mean": 0.1 * step,
                    "train/rewards/alphabetical/sv/mean": 0.2 * step,
                    "train/rewards/reward_model/en/mean": 1.0 + step,
                    "train/rewards/reward_model/sv/mean": -1.0 + step,
                    "val/lang/en/mean": 0.3,
                    "val/lang/sv/mean": 0.4,
                },
                step,
            )
        tracker.finish_run(0.5)
    client = MlflowClient(tracking_uri(cfg))
    assert _artifacts(client, tracker.run_id) >= {
        "plots/val_by_language.png",
        "plots/rewards_by_language.png",
    }
    names = list(client.get_run(tracker.run_id).data.metrics)
    assert by_language(names, "train/rewards/") == {
        "en": {
            "alphabetical": "train/rewards/alphabetical/en/mean",
            "reward_model": "train/rewards/reward_model/en/mean",
        },
        "sv": {
            "alphabetical": "train/rewards/alphabetical/sv/mean",
            "reward_model": "train/rewards/reward_model/sv/mean",
        },
    }
    assert by_language(names, "val/lang/") == {"en": {"": "val/lang/en/mean"}, "sv": {"": "val/lang/sv/mean"}}

    english = make_tracker(_cfg(root), root / "runs" / "en")
    with english:
        english.log_config(_cfg(root))
        english.log_metrics(
            {"train/reward": 0.2, "train/rewards/alphabetical/mean": 0.2, "val/lang/en/mean": 0.3}, 1
        )
        english.finish_run(0.5)
    found = _artifacts(client, english.run_id)
    assert "plots/train_curves.png" in found
    assert not found & {"plots/val_by_language.png", "plots/rewards_by_language.png"}


def test_system_metrics_are_on_by_default_and_sampled_while_the_run_is_open(root):

    assert load_settings(["+env=alphabet_sort"]).tracking.system_metrics  # the default
    cfg = _cfg(root, "tracking.system_metrics_interval=0.2")
    tracker = make_tracker(cfg, root / "run")
    with tracker:
        time.sleep(1.5)  # MLflow's monitor thread samples every 0.2 s meanwhile
    client = MlflowClient(tracking_uri(cfg))
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    for name in ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"):
        assert name in run.data.metrics
    history = client.get_metric_history(tracker.run_id, "system/cpu_utilization_percentage")
    assert len(history) >= 2 and [m.step for m in history] == list(range(len(history)))

    off = _cfg(root, "tracking.system_metrics=false", "tracking.system_metrics_interval=0.2")
    quiet = make_tracker(off, root / "run2")
    with quiet:
        time.sleep(0.6)
    assert not any(k.startswith("system/") for k in client.get_run(quiet.run_id).data.metrics)


@pytest.mark.parametrize(
    ("interval", "message"),
    [
        ("0", "must be > 0 seconds"),
        ("-1", "must be > 0 seconds"),
        ("nan", "=nan: a setting must be a finite number"),
    ],
)
def test_a_bad_system_metrics_interval_is_one_line(interval, message):
    from grpo.cli.checks import check

    with pytest.raises(UserError, match=f"tracking.system_metrics_interval.?{message}"):
        check(load_settings(["+env=alphabet_sort", f"tracking.system_metrics_interval={interval}"]))


def test_a_sweep_parent_is_named_by_the_short_keys_it_varies():
    from grpo.tracking.sweep import short_keys

    assert short_keys({"optimizer.lr": "1e-6,3e-6", "trainer.beta": "0,0.04"}) == {
        "lr": "1e-6,3e-6",
        "beta": "0,0.04",
    }
    # two keys with one last part keep their full names
    assert short_keys({"model.lora.r": "8,16", "reward_model.lora.r": "4", "seed": "1,2"}) == {
        "model.lora.r": "8,16",
        "reward_model.lora.r": "4",
        "seed": "1,2",
    }


def test_run_names_say_what_ran_on_what_and_the_overrides_that_differ():
    from grpo.tracking.params import MAX_RUN_NAME, run_name

    train = ["eval", "train", "eval"]
    assert run_name(train, "alphabet_sort", "sv", ["+env=alphabet_sort", "language=sv", "optimizer.lr=1e-5",
                    "trainer.max_steps=200", "tracking.uri=http://x", "hydra.run.dir=y"]) == (
        "train alphabet_sort sv · lr=1e-5 steps=200"
    )  # fmt: skip
    # an evaluation of a checkpoint: the model by its folder; a preset after what it is the context of
    assert run_name(["eval"], "alphabet_sort", "en", ["+experiment=alphabet_sort_cpu", "stages=[eval]",
                    "model.path=/o/runs/2026-12-03/06-55-07/checkpoints/checkpoint-120"]) == (
        "eval alphabet_sort en · checkpoint-120 exp=alphabet_sort_cpu"
    )  # fmt: skip
    assert run_name(["eval"], "alphabet_sort", "en", ["model.path=/o/runs/2026-12-03/06-55-07"]) == (
        "eval alphabet_sort en · 2026-12-03/06-55-07"
    )
    assert run_name(["sft", "eval", "train", "eval"], "char_target", "en", []) == "sft+train char_target en"
    # two keys with one last part keep their full names; a long name is cut, the start kept
    long = run_name(
        train, "x", "en", ["model.lora.r=8", "reward_model.lora.r=4", "seed=3", "trainer.beta=0.04"]
    )
    assert long.startswith("train x en · model.lora.r=8 reward_model.lora.r=4")
    assert len(long) == MAX_RUN_NAME and long.endswith("…")
