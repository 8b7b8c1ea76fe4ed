"""Runs that are safe to start side by side, interrupt and resume; real `python -m grpo` processes,
real signals, a real MLflow SQLite store.

- two runs that take the same run-dir name get two folders, each with its own files and MLflow run;
- SIGINT / SIGTERM mid-training: a complete checkpoint, the MLflow run KILLED with the step, one
  line naming the resume command, exit 130 / 143; the resume then ends on the same weights as a run
  never interrupted;
- a resume keeps the resumed run's settings: a changed lr is refused in one line, an extended
  max_steps continues with the saved settings, one MLflow value per step.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers.grpo_process import CHAR_TARGET_TRAIN, run_grpo, start_grpo
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from grpo.files import claim_new_dir
from grpo.run.checkpoints import checkpoint_step, is_complete_checkpoint, latest_checkpoint

RUN = [*CHAR_TARGET_TRAIN, "trainer.save_steps=50", "seed=7"]
MAX_STEPS = 16


def _grpo_in_background(root: Path, name: str, *args: str) -> Callable[[], subprocess.CompletedProcess]:
    """A run in `root` started now, beside the test's other processes (the machine has a second
    core); the returned function waits for it. Its output goes to files: a full pipe would stall it."""
    out, err = open(root / f"{name}.out", "w+"), open(root / f"{name}.err", "w+")
    proc = start_grpo(args, root=root, cwd=root, stdout=out, stderr=err, text=True)

    def wait() -> subprocess.CompletedProcess:
        proc.wait(timeout=600)
        texts = []
        for fh in (out, err):
            fh.seek(0)
            texts.append(fh.read())
            fh.close()
        return subprocess.CompletedProcess(proc.args, proc.returncode, *texts)

    return wait


def _client(root: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{root / 'mlflow.db'}")


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]


def _steps(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_claim_new_dir_never_hands_out_a_folder_twice(tmp_path):
    base = tmp_path / "runs" / "12-00-00"
    dirs = [claim_new_dir(base) for _ in range(3)]
    assert dirs == [base, base.with_name("12-00-00_2"), base.with_name("12-00-00_3")]
    assert all(d.is_dir() for d in dirs)


@pytest.mark.slow
def test_runs_started_in_the_same_second_keep_their_own_folders(tmp_path):
    # both runs ask for the same folder name, as two runs started in the same second do
    same = "hydra.run.dir=${grpo_new_dir:" + str(tmp_path / "runs" / "12-00-00") + "}"
    procs = [
        start_grpo(
            [
                *RUN,
                "stages=[train,eval]",
                "trainer.max_steps=2",
                "eval.num_examples=2",
                "trainer.save_steps=1",
                f"seed={seed}",
                same,
            ],
            root=tmp_path,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in (1, 2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    dirs = sorted((tmp_path / "runs").iterdir())
    assert [d.name for d in dirs] == ["12-00-00", "12-00-00_2"]
    client = _client(tmp_path)
    seeds = set()
    for run_dir in dirs:
        assert is_complete_checkpoint(run_dir / "checkpoints" / "checkpoint-2")
        assert (run_dir / "eval_final" / "results.jsonl").is_file()
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
        seed = int(re.findall(r"- seed=(\d+)", overrides)[-1])  # the last seed= wins
        seeds.add(seed)
        assert f"seed: {seed}" in (run_dir / ".hydra" / "config.yaml").read_text()
        run = client.get_run(_run_id(run_dir))
        assert run.data.tags["grpo.run_dir"] == str(run_dir)
        assert run.data.params["cfg.seed"] == str(seed)
    assert seeds == {1, 2}


def _interrupt(root: Path, run_dir: Path, signum: int) -> tuple[int, str]:
    """Start a training run, send `signum` once it has logged step 2, return (exit code, stderr)."""
    log = root / f"{run_dir.name}.log"
    with open(log, "w") as out, open(root / f"{run_dir.name}.err", "w") as err:
        proc = start_grpo(
            [*RUN, "stages=[train]", f"trainer.max_steps={MAX_STEPS}", f"hydra.run.dir={run_dir}"],
            root=root, cwd=root, stdout=out, stderr=err,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while "step 2/" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no training step in time"
            time.sleep(0.02)
        proc.send_signal(signum)
        proc.wait(timeout=300)
    return proc.returncode, (root / f"{run_dir.name}.err").read_text()


@pytest.mark.slow
# SIGTERM here (what a scheduler sends); Ctrl-C's SIGINT takes the same path, and the SFT / RM
# stage test below sends it through a whole stop and resume too
@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
def test_a_signal_stops_with_a_checkpoint_and_the_resume_ends_on_the_same_weights(tmp_path, signum):
    # the same run never interrupted, for its final weights, beside the interrupted one
    straight_run = _grpo_in_background(tmp_path, "straight", *RUN, "stages=[train]", f"trainer.max_steps={MAX_STEPS}",
                                       "tracking=none", f"hydra.run.dir={tmp_path / 'straight'}")  # fmt: skip
    run_dir = tmp_path / "interrupted"
    code, err = _interrupt(tmp_path, run_dir, signum)

    assert code == 128 + signum  # 130 for SIGINT, 143 for SIGTERM
    last = err.strip().splitlines()[-1]
    match = re.fullmatch(r"interrupted at step (\d+); resume with: python -m grpo resume=(\S+)", last)
    assert match, err[-2000:]
    assert "Traceback" not in err
    step = int(match.group(1))
    assert 2 <= step < MAX_STEPS and Path(match.group(2)) == run_dir
    ckpt = latest_checkpoint(run_dir)
    assert checkpoint_step(ckpt) == step  # saved at the step it stopped (save_steps is 50)
    client = _client(tmp_path)
    run = client.get_run(_run_id(run_dir))
    assert run.info.status == "KILLED"
    assert run.data.tags["grpo.interrupted_at_step"] == str(step)
    assert run.data.tags["grpo.interrupted_by"] == signal.Signals(signum).name

    # the printed command, as it is: the saved settings continue to max_steps
    resumed = run_grpo(
        [f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'resumed'}"],
        root=tmp_path,
        cwd=tmp_path,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = tmp_path / "resumed" / "checkpoints" / f"checkpoint-{MAX_STEPS}"
    assert is_complete_checkpoint(final)
    run = client.get_run(_run_id(run_dir))
    assert run.info.status == "FINISHED" and _run_id(tmp_path / "resumed") == run.info.run_id
    assert _steps(client, run.info.run_id, "train/reward") == list(range(1, MAX_STEPS + 1))

    # the same run never interrupted: the same final weights
    straight = straight_run()
    assert straight.returncode == 0, straight.stderr[-3000:]
    expected = load_file(
        tmp_path / "straight" / "checkpoints" / f"checkpoint-{MAX_STEPS}" / "model.safetensors"
    )
    got = load_file(final / "model.safetensors")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.slow
def test_a_resume_keeps_the_runs_settings(tmp_path):
    grpo = functools.partial(run_grpo, root=tmp_path, cwd=tmp_path, timeout=600)
    run_dir = tmp_path / "first"
    first = grpo(
        [*RUN, "stages=[train]", "trainer.max_steps=3", "trainer.save_steps=1", f"hydra.run.dir={run_dir}"]
    )
    assert first.returncode == 0, first.stderr[-3000:]

    # a different lr (and beta) is refused in one line naming both, before anything runs
    refused = grpo([f"resume={run_dir}", "trainer.max_steps=5", "optimizer.lr=1e-2", "trainer.beta=0.1"])
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("error: ")
    assert "optimizer.lr: 0.001 -> 0.01" in refused.stderr and "trainer.beta: 0.0 -> 0.1" in refused.stderr
    assert "trainer.max_steps" not in refused.stderr  # extending the run is allowed
    assert not (tmp_path / "runs").exists()
    # a group change is refused even with resume_force
    other_env = grpo([f"resume={run_dir}", "+env=reverse_text", "resume_force=true"])
    assert other_env.returncode == 2 and "config group env" in other_env.stderr

    # only max_steps (and the original command repeated): the saved settings, extended
    second_dir = tmp_path / "second"
    second = grpo([*RUN, f"resume={run_dir}", "trainer.max_steps=5", f"hydra.run.dir={second_dir}"])
    assert second.returncode == 0, second.stderr[-3000:]
    assert is_complete_checkpoint(second_dir / "checkpoints" / "checkpoint-5")
    saved = (second_dir / ".hydra" / "config.yaml").read_text()
    assert "lr: 0.001" in saved and "max_steps: 5" in saved and f"resume: {run_dir}" in saved
    client = _client(tmp_path)
    run = client.get_run(_run_id(run_dir))
    assert _run_id(second_dir) == run.info.run_id
    assert run.data.params["cfg.optimizer.lr"] == "0.001" and run.data.params["cfg.trainer.beta"] == "0.0"
    assert run.data.tags["grpo.resumed.cfg.trainer.max_steps"] == "5"
    for key in ("train/reward", "train/loss"):
        assert _steps(client, run.info.run_id, key) == [1, 2, 3, 4, 5], key

    # a resume of the resume starts from what the second run really used (lr 1e-3, 5 steps)
    third = grpo([f"resume={second_dir}", "trainer.max_steps=6", f"hydra.run.dir={tmp_path / 'third'}"])
    assert third.returncode == 0, third.stderr[-3000:]
    assert _steps(client, run.info.run_id, "train/reward") == [1, 2, 3, 4, 5, 6]


STAGE_RUNS = {
    # one-turn episodes: short sequences, quick steps (the stop and resume do not depend on length)
    # 12 SFT steps of 4 demonstrations on the tiny model
    "sft": (
        ["+env=alphabet_sort", "env.max_turns=1", "stages=[sft]", "sft.num_examples=48", "sft.batch_size=4", "sft.logging_steps=1",
         "sft.lr=1e-3", "seed=3"],
        "sft/model.safetensors",
    ),
    # 12 reward-model steps of 8 pairs (48 synthetic pairs per language, 1/5 held out)
    "reward_model": (
        ["+env=alphabet_sort", "env.max_turns=1", "stages=[reward_model]", "reward_model.data.synthetic.n=120",
         "reward_model.training.logging_steps=1", "seed=3"],
        "reward_model/model.safetensors",
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(STAGE_RUNS))
def test_sft_and_reward_model_stages_stop_with_a_checkpoint_and_resume(tmp_path, stage):
    grpo = functools.partial(run_grpo, root=tmp_path, cwd=tmp_path, timeout=600)
    overrides, weights = STAGE_RUNS[stage]
    # the same stage never interrupted, for its weights, beside the interrupted one
    straight_run = _grpo_in_background(tmp_path, "straight", *overrides, "tracking=none",
                                       f"hydra.run.dir={tmp_path / 'straight'}")  # fmt: skip
    run_dir = tmp_path / "interrupted"
    log = tmp_path / "interrupted.log"
    with open(log, "w") as out, open(tmp_path / "interrupted.err", "w") as err:
        proc = start_grpo(
            [*overrides, f"hydra.run.dir={run_dir}"], root=tmp_path, cwd=tmp_path, stdout=out, stderr=err
        )
        deadline = time.monotonic() + 300
        while not re.search(rf"\[{stage}\] step 2/", log.read_text()):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no training step in time"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    err = (tmp_path / "interrupted.err").read_text()
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"interrupted during {stage} at its step (\d+); resume with: python -m grpo resume=\S+", last
    )
    assert match, err[-2000:]
    step = int(match.group(1))
    checkpoints = run_dir / f"{stage}_checkpoints"
    assert checkpoint_step(latest_checkpoint(checkpoints)) == step
    assert not (run_dir / weights).exists()  # the stage's own output is written only when it ends
    assert _client(tmp_path).get_run(_run_id(run_dir)).info.status == "KILLED"

    resumed = grpo([f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'resumed'}"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"step {step + 1}/" in resumed.stdout and f"step {step}/" not in resumed.stdout
    straight = straight_run()
    assert straight.returncode == 0, straight.stderr[-3000:]
    expected, got = load_file(tmp_path / "straight" / weights), load_file(tmp_path / "resumed" / weights)
    assert expected.keys() == got.keys()
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)

    # a later resume of the resumed run reuses the finished stage instead of training it again (the
    # run plan's rule, the same for every stage: checked once)
    if stage != "sft":
        return
    again = grpo(
        [
            f"resume={tmp_path / 'resumed'}",
            f"stages=[{stage},eval]",
            "eval.num_examples=1",
            f"hydra.run.dir={tmp_path / 'again'}",
        ]
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resume: the" in again.stdout and f"[{stage}] step" not in again.stdout


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_keeps_the_last_complete_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    with open(log, "w") as out, open(tmp_path / "run.err", "w") as err:
        proc = start_grpo(
            [*RUN, "stages=[train]", "trainer.max_steps=500", "trainer.save_steps=1", f"hydra.run.dir={run_dir}"],
            root=tmp_path, cwd=tmp_path, stdout=out, stderr=err,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while "step 3/" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    err = (tmp_path / "run.err").read_text()
    assert proc.returncode == 130
    assert re.fullmatch(
        r"interrupted at step \d+; resume with: python -m grpo resume=\S+", err.strip().splitlines()[-1]
    )
    # whatever the second signal cut short, the latest complete checkpoint is whole and resumes
    latest = latest_checkpoint(run_dir)
    assert checkpoint_step(latest) >= 2 and is_complete_checkpoint(latest)
    assert set(load_file(latest / "model.safetensors"))
    assert _client(tmp_path).get_run(_run_id(run_dir)).info.status == "KILLED"
    resumed = run_grpo(
        [
            f"resume={run_dir}",
            f"trainer.max_steps={checkpoint_step(latest) + 1}",
            f"hydra.run.dir={tmp_path / 'resumed'}",
        ],
        root=tmp_path,
        cwd=tmp_path,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]


@pytest.mark.slow
def test_ctrl_c_outside_training_stops_at_once_and_says_what_to_run(tmp_path):
    overrides = ["+env=alphabet_sort", "stages=[eval]", "eval.num_examples=200", "tracking=none"]
    with open(tmp_path / "out.log", "w") as out:
        proc = start_grpo(
            overrides, root=tmp_path, cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while "evaluating" not in (tmp_path / "out.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == (
        "interrupted during eval; nothing to resume yet, run again with: python -m grpo "
        + shlex.join(overrides)
    )
    assert "Traceback" not in err


def test_a_signal_landing_in_a_finalizer_still_stops_the_run():
    """Python drops an exception raised inside a __del__; a Ctrl-C that lands in one (a garbage
    collection during evaluation) is delivered again instead of being lost."""
    from grpo.run.interrupt import Interrupted, handle_signals

    class SignalsWhileFinalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs inside this __del__

    started = time.monotonic()
    with pytest.raises(Interrupted) as info, handle_signals():
        SignalsWhileFinalized()  # finalized at once (its last reference is gone)
        while time.monotonic() - started < 5:
            time.sleep(0.01)
    assert info.value.signum == signal.SIGINT and info.value.at_once
    assert time.monotonic() - started < 2


def _holds_a_write(db: Path) -> bool:
    """Whether another connection is inside a write transaction on `db` (holds SQLite's RESERVED
    lock): a write of our own cannot begin."""
    probe = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as ex:
        assert "locked" in str(ex), ex
        return True
    finally:
        probe.close()


def _received(pid: int, signum: int) -> bool:
    """Whether the process has taken `signum` (Linux: no longer pending for it)."""
    status = Path(f"/proc/{pid}/status").read_text()
    pending = 0
    for field in ("SigPnd", "ShdPnd"):
        pending |= int(re.search(rf"^{field}:\s*([0-9a-f]+)", status, re.M)[1], 16)
    return not pending & (1 << (signum - 1))


@pytest.mark.slow
def test_a_second_ctrl_c_inside_a_store_write_still_closes_the_run_as_killed(tmp_path):
    """The second signal lands while the process is inside a write to its SQLite store: the test
    holds a read lock on the database, so the write the first Ctrl-C causes (the run's end) stops
    at its commit, waiting for the lock; the second SIGINT arrives there, then the lock goes. The
    run must not stay RUNNING."""
    run_dir = tmp_path / "run"
    overrides = ["+env=alphabet_sort", "stages=[eval]", "eval.num_examples=200", "tracking.system_metrics=false",
                 f"hydra.run.dir={run_dir}"]  # fmt: skip
    db = tmp_path / "mlflow.db"
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        proc = start_grpo(overrides, root=tmp_path, cwd=tmp_path, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while "evaluating" not in (tmp_path / "out.log").read_text():  # the run exists, its config is in
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "err.log").read_text()
            time.sleep(0.02)
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM runs").fetchone()  # SHARED lock: no write can commit
        proc.send_signal(signal.SIGINT)  # stops the evaluation at once; the run's end writes to the store
        while not _holds_a_write(db):  # the process's write began and waits at its commit
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        while not _received(proc.pid, signal.SIGINT):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _holds_a_write(db)  # the second signal came while the write was still waiting
        reader.execute("ROLLBACK")
        reader.close()
        proc.wait(timeout=300)
    err = (tmp_path / "err.log").read_text()
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted during eval" in err.strip().splitlines()[-1]
    run = _client(tmp_path).get_run(_run_id(run_dir))
    assert run.info.status == "KILLED"
