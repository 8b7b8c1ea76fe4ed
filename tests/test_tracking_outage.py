"""A tracking-server outage in the middle of training (grpo/tracking/spool.py): a real `mlflow
server` process is stopped while the real TRL trainer trains the tiny model, for longer than a
call's retry budget. Training goes on, the run's calls are kept on disk, and they are sent in
order when the server is back (during the run, or later with `python -m grpo.tracking.sync`):
the run ends FINISHED with every step's train/reward exactly once."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers.grpo_process import process_env, run_grpo, start_grpo
from helpers.mlflow_server import MlflowServer
from mlflow import MlflowClient
from transformers import TrainerCallback

import grpo.tracking.spool as spool_module
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.tracking import make_tracker
from grpo.train.trainer import build_trainer

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


class Outage(TrainerCallback):
    """Stops the server after step `at`; at step `until` starts it again, once at least `seconds`
    have passed since it stopped (until=None: never)."""

    def __init__(self, server: MlflowServer, at: int, until: int | None = None, seconds: float = 0.0) -> None:
        self.server, self.at, self.until, self.seconds = server, at, until, seconds
        self.stopped_at: float | None = None
        self.restarted = False
        self.steps_while_down = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            self.server.stop()
            self.stopped_at = time.monotonic()
        elif self.stopped_at is not None and not self.restarted:
            self.steps_while_down += 1
            if state.global_step == self.until:
                time.sleep(max(0.0, self.seconds - (time.monotonic() - self.stopped_at)))
                self.down_s = time.monotonic() - self.stopped_at
                self.server.start()
                self.restarted = True


def settings(tmp_path, url, steps):
    return load_settings(
        [
            "+env=char_target",
            "stages=[train]",
            "tracking=mlflow",
            f"tracking.uri={url}",
            "tracking.system_metrics=false",
            f"output_root={tmp_path}",
            "trainer.num_generations=4",
            "trainer.per_device_batch_completions=8",
            f"trainer.max_steps={steps}",
            "trainer.logging_steps=1",
            "trainer.save_steps=1000",
            "trainer.beta=0",
            "trainer.max_completion_length=12",
            "generation.max_tokens_per_turn=12",
        ]
    )


def train_through(cfg, run_dir, outage):
    env = build_env(cfg.env, cfg.language)
    tracker = make_tracker(cfg, run_dir)
    began = time.monotonic()
    with tracker:
        tracker.log_config(cfg)
        bundle = build_trainer(cfg, env, run_dir, tracker=tracker, callbacks=[outage])
        bundle.trainer.train()
    return tracker, time.monotonic() - began


def reward_steps(url, run_id):
    return [m.step for m in MlflowClient(url).get_metric_history(run_id, "train/reward")]


def test_training_goes_on_through_an_outage_and_the_calls_arrive_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(spool_module, "PROBE_S", 2.0)  # try the store every 2 s while it is away
    server = MlflowServer(tmp_path / "server")
    url = server.start()
    try:
        outage = Outage(server, at=3, until=30, seconds=6.0)  # longer than a call's retry budget (~3.5 s)
        cfg = settings(tmp_path, url, steps=40)
        with caplog.at_level(logging.WARNING, logger="grpo.tracking.spool"):
            tracker, seconds = train_through(cfg, tmp_path / "run", outage)
        assert outage.restarted and outage.steps_while_down == 27  # training went on meanwhile
        client = MlflowClient(url)
        run = client.get_run(tracker.run_id)
        assert run.info.status == "FINISHED"
        assert reward_steps(url, tracker.run_id) == list(range(1, 41))  # every step, once
        messages = [r.getMessage() for r in caplog.records]
        assert sum("is unreachable" in m for m in messages) == 1
        back = [m for m in messages if "answers again" in m]
        assert len(back) == 1 and "kept call(s) sent, in order" in back[0]
        assert not tracker.spool.pending
        print(
            f"outage run: {seconds:.1f} s for 40 steps, {outage.steps_while_down} steps in the {outage.down_s:.1f} s the server was down"
        )
    finally:
        server.stop()


def test_a_server_that_never_returns_is_synced_later_once(tmp_path, caplog):
    server = MlflowServer(tmp_path / "server")
    url = server.start()
    try:
        outage = Outage(server, at=2)
        cfg = settings(tmp_path, url, steps=6)
        run_dir = tmp_path / "run"
        with caplog.at_level(logging.WARNING, logger="grpo.tracking.spool"):
            tracker, _ = train_through(cfg, run_dir, outage)  # ends normally
        left = [r.getMessage() for r in caplog.records if "still unreachable" in r.getMessage()]
        assert len(left) == 1 and f"python -m grpo.tracking.sync {run_dir}" in left[0]
        kept = tracker.spool.pending
        assert kept > 0

        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        sync = [sys.executable, "-m", "grpo.tracking.sync", str(run_dir)]
        away = subprocess.run(sync, capture_output=True, text=True, env=env, timeout=300)
        assert (
            away.returncode == 1
            and "unreachable" in away.stderr
            and f"{kept} call(s) stay kept" in away.stderr
        )

        server.start()
        first = subprocess.run(sync, capture_output=True, text=True, env=env, timeout=300)
        assert first.returncode == 0, first.stderr
        assert f"sent {kept} kept call(s) to run {tracker.run_id}" in first.stdout
        second = subprocess.run(sync, capture_output=True, text=True, env=env, timeout=300)
        assert second.returncode == 0 and "nothing to send" in second.stdout

        run = MlflowClient(url).get_run(tracker.run_id)
        assert run.info.status == "FINISHED"
        assert reward_steps(url, tracker.run_id) == list(range(1, 7))  # once each, after two syncs
    finally:
        server.stop()


def test_sync_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grpo.tracking.sync", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no readable mlflow_run.json" in proc.stderr


class ServerLater(TrainerCallback):
    """Starts the server once training has done `at` steps (the run started while it was away)."""

    def __init__(self, server: MlflowServer, at: int) -> None:
        self.server, self.at, self.started = server, at, False

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at and not self.started:
            self.server.start()
            self.started = True


def test_a_run_that_starts_while_the_server_is_away_is_created_when_it_answers(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(spool_module, "PROBE_S", 1.0)
    server = MlflowServer(tmp_path / "server")  # not started yet
    try:
        cfg = settings(tmp_path, server.url, steps=12)
        run_dir = tmp_path / "run"
        with caplog.at_level(logging.WARNING, logger="grpo.tracking.spool"):
            tracker, _ = train_through(cfg, run_dir, ServerLater(server, at=3))
        assert tracker.run_id is not None  # created from the kept call once the server answered
        client = MlflowClient(server.url)
        run = client.get_run(tracker.run_id)
        assert run.info.status == "FINISHED"
        assert client.get_experiment(run.info.experiment_id).name == "grpo-char_target"
        assert reward_steps(server.url, tracker.run_id) == list(range(1, 13))
        assert run.data.params["cfg.trainer.max_steps"] == "12"
        recorded = (run_dir / "mlflow_run.json").read_text()
        assert tracker.run_id in recorded
        messages = [r.getMessage() for r in caplog.records]
        assert sum("is unreachable" in m for m in messages) == 1
        assert sum("answers again" in m for m in messages) == 1
    finally:
        server.stop()


def test_sweep_children_started_while_the_server_is_away_land_under_their_parent(tmp_path):
    server = MlflowServer(tmp_path / "server")
    url = server.start()
    env = process_env(None)
    sweep_dir = tmp_path / "sweep"
    args = [
        "-m", "+env=char_target", "model=tiny", "stages=[train]",
        "tracking=mlflow", f"tracking.uri={url}", "tracking.system_metrics=false", f"output_root={tmp_path}",
        f"hydra.sweep.dir={sweep_dir}", "trainer.num_generations=4", "trainer.per_device_batch_completions=8",
        "trainer.max_completion_length=16", "generation.max_tokens_per_turn=16", "trainer.save_steps=1000",
        "trainer.max_steps=3,4",
    ]  # fmt: skip
    try:
        proc = start_grpo(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = MlflowClient(url)
        deadline = time.monotonic() + 300
        parent = None
        while (
            parent is None and time.monotonic() < deadline and proc.poll() is None
        ):  # the parent, then the outage
            experiments = [e.experiment_id for e in client.search_experiments()]
            found = (
                client.search_runs(experiments, filter_string="tags.`grpo.sweep` = 'true'")
                if experiments
                else []
            )
            parent = found[0] if found else None
            time.sleep(0.2)
        assert parent is not None, proc.communicate()[1][-3000:]
        server.stop()
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert (sweep_dir / "1" / "mlflow_spool").is_dir()  # the second job started while it was away

        server.start()
        for job in ("0", "1"):
            synced = subprocess.run(
                [sys.executable, "-m", "grpo.tracking.sync", str(sweep_dir / job)],
                capture_output=True, text=True, env=env, timeout=300,
            )  # fmt: skip
            assert synced.returncode == 0, synced.stderr
        children = client.search_runs(
            [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
        )
        assert sorted(c.data.params["cfg.trainer.max_steps"] for c in children) == ["3", "4"]
        for child in children:
            steps = int(child.data.params["cfg.trainer.max_steps"])
            assert child.info.status == "FINISHED"
            assert reward_steps(url, child.info.run_id) == list(range(1, steps + 1))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def migrated_store(tmp_path_factory):
    from grpo.tracking.store import make_client

    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    make_client(f"sqlite:///{db}")
    return db


def test_a_locked_sqlite_store_keeps_the_calls_until_it_is_free(
    tmp_path, monkeypatch, caplog, migrated_store
):
    import sqlite3

    monkeypatch.setattr(spool_module, "WRITE_BUDGET_S", 1.0)  # keep a busy store's call after 1 s
    monkeypatch.setattr(spool_module, "PROBE_S", 0.0)  # and try again at the next call
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)  # MLflow's tables, made once for the module
    cfg = load_settings(
        ["+env=char_target", "tracking=mlflow", f"output_root={tmp_path}", "tracking.system_metrics=false"]
    )
    tracker = make_tracker(cfg, tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="grpo.tracking.spool"), tracker:
        tracker.log_metrics({"train/reward": 0.1}, step=1)
        lock = sqlite3.connect(db, timeout=0.1)
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the file
        tracker.log_metrics({"train/reward": 0.2}, step=2)  # kept: the store is locked
        assert tracker.spool.pending == 1
        lock.rollback()
        lock.close()
        tracker.log_metrics({"train/reward": 0.3}, step=3)  # sends the kept call first, then this one
        assert tracker.spool.pending == 0
    history = MlflowClient(f"sqlite:///{db}").get_metric_history(tracker.run_id, "train/reward")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    messages = [r.getMessage() for r in caplog.records]
    assert any("is unreachable" in m and "database is locked" in m for m in messages)
    assert any("answers again" in m for m in messages)


def test_an_evaluation_with_its_server_away_says_so_once_and_its_dataset_input_arrives_later(tmp_path):
    """A real `python -m grpo` evaluation whose tracking server is not there: the outage is one
    plain line (no store error text for the dataset input: it is kept like every other call), and
    the sync sends the run, its name, metrics and dataset input once the server is up."""
    server = MlflowServer(tmp_path / "server")  # its port is closed until started
    run_dir = tmp_path / "run"
    args = ["+env=alphabet_sort", "stages=[eval]", "language=sv", "eval.num_examples=2",
            "eval.rollouts_per_example=1", "generation.max_tokens_per_turn=8", "tracking=mlflow",
            f"tracking.uri={server.url}", "tracking.system_metrics=false", f"hydra.run.dir={run_dir}"]  # fmt: skip
    env = process_env(tmp_path)
    proc = run_grpo(args, root=tmp_path, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()  # Hydra's log lines go to stdout
    away = [line for line in lines if "is unreachable" in line]
    assert (
        len(away) == 1 and f"the tracking store {server.url} is unreachable (connection refused);" in away[0]
    )
    assert not [line for line in lines if "NoneType" in line or "dataset input" in line or "plots" in line]
    assert sum("still unreachable" in line for line in lines) == 1
    kept = [
        json.loads(line)["op"] for line in (run_dir / "mlflow_spool" / "calls.jsonl").read_text().splitlines()
    ]
    assert kept[0] == "create_run" and "inputs" in kept and kept[-1] == "status"

    server.start()
    try:
        synced = subprocess.run([sys.executable, "-m", "grpo.tracking.sync", str(run_dir)], capture_output=True,
                                text=True, env=env, timeout=300)  # fmt: skip
        assert synced.returncode == 0, synced.stderr
        run = MlflowClient(server.url).get_run(
            json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
        )
        assert run.info.status == "FINISHED"
        assert "eval/eval/mean" in run.data.metrics
        # named by what ran, on what, and its overrides (a run created from the spool, too); the
        # whole command line but hydra.* is a tag
        assert run.info.run_name.startswith("eval alphabet_sort sv · examples=2 rollouts=1 max_tokens")
        assert run.data.tags["grpo.overrides"] == " ".join(args[:-1])
        (dataset_input,) = run.inputs.dataset_inputs
        assert dataset_input.dataset.name == "alphabet_sort-eval"
        assert {t.key: t.value for t in dataset_input.tags} == {"mlflow.data.context": "eval"}
    finally:
        server.stop()
