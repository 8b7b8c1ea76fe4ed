"""`python -m grpo.cli.compare` on a real MLflow SQLite store holding sweeps (parent + child runs)."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from grpo.cli.compare import main
from grpo.tracking.store import make_client
from grpo.tracking.sweep_comparison import best_point, final_reward

# job -> (varied overrides, status, train/reward per step, baseline, final)
JOBS = {
    0: (["optimizer.lr=1e-06", "trainer.beta=0.0"], "FINISHED", [0.1, 0.3, 0.2], 0.1, 0.25),
    1: (["optimizer.lr=3e-06", "trainer.beta=0.0"], "FINISHED", [0.1, 0.4, 0.6], 0.1, 0.55),
    2: (["optimizer.lr=3e-06", "trainer.beta=0.04"], "FAILED", [0.2], None, None),
}


def _sweep(client: MlflowClient, experiment_id: str, name: str, jobs: dict) -> str:
    parent = client.create_run(experiment_id, run_name=name, tags={"grpo.sweep": "true"})
    for num, (varied, status, rewards, baseline, final) in jobs.items():
        child = client.create_run(
            experiment_id,
            run_name=",".join(varied),
            tags={
                "mlflow.parentRunId": parent.info.run_id,
                "grpo.job_num": str(num),
                "grpo.varied": json.dumps(varied),
            },
        )
        now = int(time.time() * 1000)
        metrics = [Metric("train/reward", r, now, step) for step, r in enumerate(rewards, start=1)]
        if baseline is not None:
            metrics.append(Metric("eval/baseline/mean", baseline, now, 0))
        if final is not None:
            metrics.append(Metric("eval/final/mean", final, now, len(rewards)))
        client.log_batch(child.info.run_id, metrics=metrics)
        client.set_terminated(child.info.run_id, status=status)
    client.set_terminated(
        parent.info.run_id, status="FAILED" if any(j[1] == "FAILED" for j in jobs.values()) else "FINISHED"
    )
    return parent.info.run_id


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, str, str]:
    """A store with an older 1-job sweep and the latest 3-job sweep (one job failed)."""
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    client = make_client(f"sqlite:///{db}")
    experiment_id = client.create_experiment(
        "grpo-alphabet_sort", artifact_location=(db.parent / "art").as_uri()
    )
    old = _sweep(client, experiment_id, "sweep old", {0: (["seed=1"], "FINISHED", [0.9], None, 0.9)})
    time.sleep(0.01)  # distinct start times
    latest = _sweep(client, experiment_id, "sweep latest", JOBS)
    return db, old, latest


@pytest.fixture
def store(tmp_path, template) -> tuple[str, str, str]:
    db, old, latest = template
    shutil.copy(db, tmp_path / "mlflow.db")  # artifacts still go to the template's artifact root
    return f"sqlite:///{tmp_path / 'mlflow.db'}", old, latest


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line[:1].isdigit()]


def test_latest_sweep_table_and_png(store, tmp_path, capsys):
    uri, _, latest = store
    png = tmp_path / "curves.png"
    assert main(["--uri", uri, "--out", str(png), "--no-log"]) == 0
    out = capsys.readouterr().out
    assert f"sweep latest (MLflow run {latest}, 3 jobs)" in out
    assert _table(out) == [
        ["0", "1e-06", "0.0", "FINISHED", "0.1000", "0.2500", "2", "(0.3000)"],
        ["1", "3e-06", "0.0", "FINISHED", "0.1000", "0.5500", "*", "3", "(0.6000)"],
        ["2", "3e-06", "0.04", "FAILED", "-", "-", "1", "(0.2000)"],
    ]
    header = next(line for line in out.splitlines() if line.startswith("job"))
    assert header.split()[:3] == ["job", "optimizer.lr", "trainer.beta"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not MlflowClient(uri).list_artifacts(latest)  # --no-log


def test_a_named_sweep_is_logged_to_its_parent(store, tmp_path, capsys):
    uri, old, _ = store
    assert main(["--uri", uri, "--sweep", old, "--out", str(tmp_path / "old.png")]) == 0
    assert _table(capsys.readouterr().out) == [["0", "1", "FINISHED", "-", "0.9000", "*", "1", "(0.9000)"]]
    client = MlflowClient(uri)
    assert {a.path for a in client.list_artifacts(old, "compare")} == {
        "compare/reward_curves.png",
        "compare/summary.txt",
    }
    summary = Path(client.download_artifacts(old, "compare/summary.txt", str(tmp_path))).read_text()
    assert "seed" in summary and "0.9000" in summary


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "0123456789abcdef0123456789abcdef"], "no such run"),
        (["--experiment", "grpo-nope"], "grpo-nope: no such experiment (available: grpo-alphabet_sort"),
    ],
)
def test_bad_arguments_are_one_line_errors(store, capsys, args, message):
    uri, _, _ = store
    assert main(["--uri", uri, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path, capsys):
    db = tmp_path / "nothing" / "mlflow.db"
    assert main(["--uri", f"sqlite:///{db}"]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert not db.parent.exists()


def test_default_store_follows_output_root(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("GRPO_OUTPUT_ROOT", str(tmp_path / "elsewhere"))
    assert main([]) == 2
    assert str(tmp_path / "elsewhere" / "mlflow.db") in capsys.readouterr().err


def test_best_point_and_final_reward():
    assert best_point([(1, 0.2), (2, 0.5), (3, 0.5), (4, math.nan)]) == (2, 0.5)
    assert best_point([(1, math.nan)]) is None and best_point([]) is None
    assert final_reward({"eval/final/mean": 0.3, "objective": 0.9}) == 0.3
    assert final_reward({"objective": 0.9, "eval/eval/mean": 0.1}) == 0.9
    assert final_reward({"eval/eval/mean": 0.1}) == 0.1 and final_reward({}) is None
