"""Data parallel training in real processes: torchrun (and accelerate launch) start two CPU ranks
that train over gloo. One run dir, one MLflow run, the same weights on every rank, multi-turn
rollouts in lockstep, and DDP against FSDP2 (sharded weights), each stopped and resumed by as many
processes: one MLflow run across the resume, the same curve, the same weights."""

from __future__ import annotations

import functools
import json
import math
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers.grpo_process import CHAR_TARGET_TRAIN, run_grpo, start_grpo
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from mlflow.tracking import MlflowClient

from grpo.errors import UserError
from grpo.run.checkpoints import checkpoints_of, is_complete_checkpoint
from grpo.run.distributed import follower_overrides, publish_run_dir, rendezvous_file, wait_for_run_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [
    *CHAR_TARGET_TRAIN,
    "stages=[train,eval]",
    "eval.num_examples=2",
    "eval.rollouts_per_example=2",
    "seed=5",
]
# a process that hangs in a collective is stopped here instead of stalling the suite
TIMEOUT_S = 420


CPU = {"ACCELERATE_USE_CPU": "true"}  # accelerate: gloo on CPU processes
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _checksums(stdout: str) -> dict[int, str]:
    return {int(r): c for r, c in re.findall(r"\[train\] rank (\d)/2: weights checksum (\S+)", stdout)}


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "runs").glob("*/*") if p.is_dir())


def test_rank_zero_publishes_the_run_dir_the_others_follow(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-1")
    with pytest.raises(UserError, match="rank 0 did not publish the run dir"):
        wait_for_run_dir(tmp_path, timeout=0.2)
    publish_run_dir(tmp_path, tmp_path / "runs" / "a")
    assert wait_for_run_dir(tmp_path) == tmp_path / "runs" / "a"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-2")  # another launch never reads it
    assert rendezvous_file(tmp_path) != tmp_path / ".rendezvous" / "launch-1.json"
    assert follower_overrides(tmp_path / "r") == [f"hydra.run.dir={tmp_path / 'r'}", "hydra.output_subdir=null",
                                                  "hydra/job_logging=stdout"]  # fmt: skip


def test_two_processes_train_one_run_with_the_same_weights(tmp_path):
    # HYDRA_FULL_ERROR=1 (Hydra's full tracebacks) must not cost rank 1 the way to rank 0's run dir
    done = run_grpo(
        [*TRAIN, "trainer.max_steps=3"],
        root=tmp_path,
        cwd=tmp_path,
        timeout=TIMEOUT_S,
        env_extra={**CPU, "HYDRA_FULL_ERROR": "1"},
        launcher=TORCHRUN,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    # both ranks end with the same weights
    sums = _checksums(done.stdout)
    assert sorted(sums) == [0, 1] and sums[0] == sums[1], done.stdout[-2000:]
    # one run dir, written by rank 0 only: one checkpoint dir, one evaluation, one .hydra
    runs = _runs(tmp_path)
    assert len(runs) == 1, runs
    run_dir = runs[0]
    assert [c.name for c in checkpoints_of(run_dir)] == ["checkpoint-3"]
    assert is_complete_checkpoint(run_dir / "checkpoints" / "checkpoint-3")
    assert (run_dir / "eval_final" / "results.jsonl").is_file()
    assert done.stdout.count("--- Evaluation (final) ---") == 1
    assert done.stdout.count("[train] step 3/3") == 1  # console lines from rank 0 only
    assert "on each of 2 processes" in done.stdout
    # one MLflow run, with a value at every step
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiments = client.search_experiments()
    runs_logged = client.search_runs([e.experiment_id for e in experiments])
    assert len(runs_logged) == 1
    run = runs_logged[0]
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == run.info.run_id
    assert run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/reward")) == [1, 2, 3]


# multi-turn alphabet-sort from the shipped warm start (a random model scores 0: no GRPO signal),
# episodes of 1-3 turns: the ranks' batches end after different numbers of turns, and every
# generate() is synced across ranks (a collective under FSDP; generation.lockstep=true under DDP)
MULTI_TURN = ["+env=alphabet_sort", "model=small_alphabet_sort", "stages=[train]", "env.min_turns=1",
              "env.max_turns=3", "generation.lockstep=true", "generation.max_tokens_per_turn=32",
              # one group of 4 a rank a step: a step's two ranks still differ in their prompts
              "trainer.per_device_batch_completions=4",
              "trainer.max_completion_length=512", "optimizer.lr=1e-5", "seed=5",
              # 32 tokens cut most of the warm start's answers: trained as they stand, for a signal
              *TRAIN_ON_CUT_COMPLETIONS]  # fmt: skip
# FSDP2 against DDP, per step: the same rollouts and the same update (two ranks' gradients summed
# by a reduce-scatter instead of an all-reduce); measured here, equal to every printed digit
CURVE_TOLERANCE = {"rel_tol": 1e-4, "abs_tol": 1e-9}


def _accelerate_launch(config: str) -> list[str]:
    """`accelerate launch` with the shipped accelerate/<config>.yaml, as a launcher for run_grpo."""
    return ["-m", "accelerate.commands.launch", "--config_file", str(ROOT / "accelerate" / f"{config}.yaml")]


def _curve(checkpoint: Path) -> list[tuple[int, float, float, float]]:
    """(step, loss, kl, reward) of every logged training step, from the checkpoint's trainer state."""
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return [(h["step"], h["loss"], h["kl"], h["reward"]) for h in history if "loss" in h]


def test_fsdp2_and_ddp_stop_and_resume_to_the_same_curve_and_weights(tmp_path):
    # each side trains 2 steps and is resumed, by as many processes, to step 3. DDP is `accelerate
    # launch` with the shipped accelerate/cpu_ddp.yaml and tracked (one MLflow run across the
    # resume); FSDP2 is accelerate/cpu_fsdp2.yaml
    sides = {}
    for config, tracking in (("cpu_ddp", "tracking=mlflow"), ("cpu_fsdp2", "tracking=none")):
        root = tmp_path / config
        root.mkdir()
        # FSDP2: the evaluation after training is skipped with the command that does it in one process
        stages = "stages=[train,eval]" if config == "cpu_fsdp2" else "stages=[train]"
        overrides = [o for o in MULTI_TURN if not o.startswith("stages=")]
        launch = functools.partial(
            run_grpo,
            root=root,
            cwd=root,
            timeout=TIMEOUT_S,
            env_extra=CPU,
            launcher=_accelerate_launch(config),
        )
        first = launch([*overrides, stages, tracking, "trainer.max_steps=2", "trainer.save_steps=1"])
        assert first.returncode == 0, first.stderr[-4000:]
        (run_dir,) = _runs(root)  # one run dir for both ranks
        resumed = launch([f"resume={run_dir}", "trainer.max_steps=3"])
        assert resumed.returncode == 0, resumed.stderr[-4000:]
        assert "resumed at step 2" in resumed.stdout
        resumed_dir = next(r for r in _runs(root) if r != run_dir)
        assert [c.name for c in checkpoints_of(resumed_dir)] == ["checkpoint-3"]
        assert is_complete_checkpoint(resumed_dir / "checkpoints" / "checkpoint-3")
        sums = _checksums(resumed.stdout)  # FSDP2: gathered from the shards on every rank
        assert sorted(sums) == [0, 1] and sums[0] == sums[1], resumed.stdout[-2000:]
        sides[config] = (first, run_dir, resumed_dir, sums[0])

    ddp_first, ddp_dir, ddp_resumed, ddp_sum = sides["cpu_ddp"]
    fsdp_first, fsdp_dir, fsdp_resumed, fsdp_sum = sides["cpu_fsdp2"]
    assert "FSDP2 over 2 CPU processes" in fsdp_first.stdout and "FSDP2" not in ddp_first.stdout
    assert (fsdp_dir / "checkpoints" / "checkpoint-2" / "pytorch_model_fsdp.bin").is_file()  # sharded state
    (command,) = re.findall(r"evaluate the checkpoint in one process, (python -m grpo .*)", fsdp_first.stdout)
    assert f"model.path={fsdp_dir / 'checkpoints' / 'checkpoint-2'}" in command
    args = [*shlex.split(command)[3:], "eval.num_examples=2", "tracking=none"]  # after "python -m grpo"
    evaluated = run_grpo(args, root=tmp_path, cwd=tmp_path, timeout=TIMEOUT_S, env_extra=CPU)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "--- Evaluation (eval) ---" in evaluated.stdout
    assert not (ddp_dir / "checkpoints" / "checkpoint-2" / "pytorch_model_fsdp.bin").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'cpu_ddp' / 'mlflow.db'}")
    run_id = json.loads((ddp_dir / "mlflow_run.json").read_text())["run_id"]
    assert json.loads((ddp_resumed / "mlflow_run.json").read_text())["run_id"] == run_id
    assert sorted(m.step for m in client.get_metric_history(run_id, "train/reward")) == [1, 2, 3]

    expected = _curve(ddp_resumed / "checkpoints" / "checkpoint-3")
    got = _curve(fsdp_resumed / "checkpoints" / "checkpoint-3")
    assert [e[0] for e in expected] == [g[0] for g in got] == [1, 2, 3]
    assert any(abs(e[1]) > 0 for e in expected) and expected[-1][2] > 0  # it trained: a loss, a KL
    for e, g in zip(expected, got, strict=True):
        assert all(math.isclose(a, b, **CURVE_TOLERANCE) for a, b in zip(e[1:], g[1:], strict=True)), (
            expected,
            got,
        )
    for a, b in zip(ddp_sum.split("/"), fsdp_sum.split("/"), strict=True):  # the same final weights
        assert math.isclose(float(a), float(b), rel_tol=1e-9), (ddp_sum, fsdp_sum)


@pytest.mark.parametrize("name", ["ddp", "zero2", "zero3", "fsdp2", "cpu_ddp", "cpu_fsdp2"])
def test_shipped_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "accelerate" / f"{name}.yaml"))
    expected = {
        "ddp": "MULTI_GPU",
        "zero2": "DEEPSPEED",
        "zero3": "DEEPSPEED",
        "fsdp2": "FSDP",
        "cpu_ddp": "MULTI_GPU",
        "cpu_fsdp2": "FSDP",
    }
    assert str(config.distributed_type).split(".")[-1] == expected[name]
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1])
    if "fsdp2" in name:
        assert config.fsdp_config["fsdp_version"] == 2


def test_ctrl_c_on_torchrun_stops_both_ranks_at_one_checkpoint(tmp_path):
    import signal
    import time

    log = tmp_path / "out.log"
    with open(log, "w") as out:
        proc = start_grpo(
            [*TRAIN, "stages=[train]", "trainer.max_steps=500"],
            root=tmp_path,
            cwd=tmp_path,
            env_extra=CPU,
            launcher=TORCHRUN,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + TIMEOUT_S
        while "step 2/" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=TIMEOUT_S)[1]
    assert proc.returncode != 0
    lines = re.findall(r"interrupted at step (\d+); resume with: python -m grpo resume=(\S+)", err)
    assert len(lines) == 1, err[-3000:]  # one line for the run, from rank 0
    step, run_dir = int(lines[0][0]), Path(lines[0][1])
    assert [c.name for c in checkpoints_of(run_dir)] == [f"checkpoint-{step}"]
    assert is_complete_checkpoint(run_dir / "checkpoints" / f"checkpoint-{step}")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    assert client.get_run(run_id).info.status == "KILLED"


def test_a_resume_needs_as_many_processes_as_wrote_the_checkpoint(tmp_path, monkeypatch):
    from grpo.cli.checks import check
    from grpo.compose import load_settings
    from grpo.run.checkpoints import mark_checkpoint_complete

    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 2}')
    for name in ("model.safetensors", "rng_state_0.pth", "rng_state_1.pth"):
        (checkpoint / name).write_bytes(b"x")
    mark_checkpoint_complete(checkpoint, 2)
    settings = load_settings(["+env=char_target", f"resume={tmp_path / 'run'}", "stages=[train]"])
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(UserError, match=r"written by 2 process\(es\), this run has 1; .*--nproc_per_node=2"):
        check(settings)
    monkeypatch.setenv("WORLD_SIZE", "2")
    check(settings)
