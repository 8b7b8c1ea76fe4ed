"""Generation ahead of training (grpo/train/ahead.py, grpo/generation/generator.py, the policy
server's generator routes): real `python -m grpo.serve` processes, real HTTP, real TRL trainers on
the tiny model, real signals.

- the look-ahead reads TRL's sampler batches before the trainer asks for them, and changes nothing
  of what the trainer gets;
- one batch ahead on a built-in multi-turn env: the lag is 0 then 1 at every step, logged with
  TRL's importance-sampling metrics; the generator ends up serving exactly the trainer's weights
  (same checksum, same log-probabilities) and stops with the run;
- a batch older than generation.max_off_policy_steps is dropped, counted and generated again;
- a generator serving another model is refused in one line, before any step;
- the command line: a killed generator stops the run with a checkpoint (exit 3, one line), a
  resume goes on, Ctrl-C stops both processes and resumes; a hung generator (SIGSTOP) is the same
  one line after generation.async_generation_timeout, never a hang.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers.grpo_process import CHAR_TARGET_TRAIN, grpo_command, process_env, run_grpo, start_grpo
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.generation.base import GenRequest, Sampling
from grpo.models.weights import weights_identity
from grpo.run.checkpoints import checkpoint_step, is_complete_checkpoint, latest_checkpoint
from grpo.train.ahead import LookAhead
from grpo.train.geometry import step_geometry
from grpo.train.trainer import build_trainer
from grpo.trl_adapter.trainer import run_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# two-turn alphabet-sort on the shipped warm start (its answers score > 0: GRPO has a signal, the
# weights move): 8 completions (2 prompts x 4) per step
AHEAD = [
    "+env=alphabet_sort",
    "model=small_alphabet_sort",
    "env.min_turns=2",
    "env.max_turns=2",
    "env.max_names_per_turn=2",
    "stages=[train]",
    "tracking=none",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.max_completion_length=192",
    "generation.max_tokens_per_turn=48",
    "trainer.save_steps=1000",
    "trainer.logging_steps=1",
    "generation.num_batches_ahead=1",
    *TRAIN_ON_CUT_COMPLETIONS,
]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.is_file() and "State:\tZ" in status.read_text())


def _wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_the_look_ahead_reads_the_samplers_batches_before_the_trainer_asks():
    from trl.trainer.grpo_trainer import RepeatSampler

    def sampler():
        # 10 rows, batches of 3 prompts x 2 completions, each batch repeated twice (2 micro-steps)
        return RepeatSampler(
            list(range(10)), mini_repeat_count=2, batch_size=3, repeat_count=2, shuffle=True, seed=5
        )

    look = LookAhead(3, 2, 2)
    wrapped = look.wrap(sampler())
    plain = sampler()
    # two epochs: the wrapped sampler yields exactly what the sampler yields
    seen = [list(iter(wrapped)) for _ in range(2)]
    assert seen == [list(iter(plain)) for _ in range(2)]
    assert len(wrapped) == len(plain) == 36

    # read ahead: batch j is known before the dataloader took any of its indices, across epochs
    look = LookAhead(3, 2, 2)
    wrapped = look.wrap(sampler())
    epoch = iter(wrapped)
    first = [next(epoch) for _ in range(6)]  # the dataloader took the first batch's first copy
    predicted = [look.batch(j) for j in range(5)]  # 3 batches per epoch: 2 of them in the next epoch
    assert all(p is not None and len(p) == 3 for p in predicted)
    assert first[::2] == predicted[0]
    rest = first + list(epoch) + list(iter(wrapped))
    batches = [rest[k : k + 6 : 2] for k in range(0, len(rest), 12)]  # each batch's first copy
    assert batches == predicted + [look.batch(5)]


def test_the_hub_recipe_and_its_cpu_twin_carry_the_recipes_settings():
    from grpo.cli.checks import check

    gpu = load_settings(["+experiment=alphabet_sort_hub_recipe"])
    cpu = load_settings(["+experiment=alphabet_sort_hub_recipe_cpu"])
    g = gpu.generation
    assert (gpu.model.name, gpu.model.path, g.backend) == ("qwen3_0_6b", "Qwen/Qwen3-0.6B", "vllm_server")
    for s in (gpu, cpu):  # the same structure: one batch ahead, 8 x 8 completions per step, 1-3 turns
        assert (s.generation.num_batches_ahead, s.generation.max_concurrent) == (1, 1024)
        assert s.generation.async_generation_timeout == 300.0
        t = s.trainer
        geometry = step_geometry(t, processes=1)
        assert (t.num_generations, geometry.completions_per_step, geometry.micro_batch) == (8, 64, 8)
        assert (s.env["name"], s.env["min_turns"], s.env["max_turns"]) == ("alphabet_sort", 1, 3)
    assert (gpu.trainer.max_steps, gpu.trainer.save_steps) == (1000, 100)
    assert (cpu.model.name, cpu.generation.backend, cpu.generation.base_url) == (
        "small_alphabet_sort",
        "hf",
        None,
    )
    check(cpu)  # the twin runs here as shipped (the GPU recipe: tests/test_cli.py)


def _settings(*extra: str):
    return load_settings([*AHEAD, *extra])


def _trainer(tmp_path: Path, *extra: str):
    settings = _settings(*extra)
    env = build_env(settings.env, settings.language)
    return settings, build_trainer(settings, env, tmp_path)


@pytest.mark.slow
def test_one_batch_ahead_trains_with_the_lag_corrected_and_the_generator_ends_on_the_trained_weights(
    tmp_path,
):
    settings, bundle = _trainer(tmp_path, "trainer.max_steps=4", "optimizer.lr=2e-4", "trainer.beta=0")
    trainer, ahead = bundle.trainer, bundle.ahead
    generator = ahead.generator
    process = generator.process
    assert process is not None and process.poll() is None  # the run started its own generator
    initial = generator.info()["checksum"]
    folder = generator._folder  # the policy copy and the weight files
    assert folder is not None and (folder / "policy" / "config.json").is_file()
    try:
        run_trainer(trainer, "train")
        ahead.push_final()
        logs = [entry for entry in trainer.state.log_history if "async/lag" in entry]
        # step 1 waits for its own batch (lag 0); from then on each batch was made one step earlier
        assert [entry["async/lag"] for entry in logs] == [0.0, 1.0, 1.0, 1.0]
        assert all(entry["async/dropped"] == 0.0 for entry in logs)
        # TRL's importance-sampling correction ran on the generator's sampling logprobs
        assert all("sampling/importance_sampling_ratio/mean" in entry for entry in logs)
        assert all(0.0 < entry["sampling/importance_sampling_ratio/mean"] <= 3.0 for entry in logs)
        # two-turn episodes: model and environment tokens interleaved, the env's masked out
        rollouts = bundle.rollout.last_rollouts
        assert len(rollouts) == 8 and any(r.num_turns == 2 for r in rollouts)
        assert all(r.env_mask.count(0) > 0 and r.env_mask[0] == 1 for r in rollouts if r.num_turns == 2)

        # the generator serves exactly the trained weights: the same checksum ...
        served = generator.info()
        mine = weights_identity(trainer.model, bundle.tokenizer)
        assert served["checksum"] == mine["checksum"] != initial
        assert served["weights_version"] == trainer.state.global_step == 4
        # ... and the same log-probabilities for what it generates greedily
        backend = generator.backend(bundle.tokenizer, trainer.eos_token_ids)
        prompt = rollouts[0].prompt_ids
        (result,) = backend.generate(
            [GenRequest(max_new_tokens=6, prompt_ids=prompt)], Sampling(temperature=0)
        )
        with torch.no_grad():
            logits = trainer.model(torch.tensor([prompt + result.token_ids])).logits[0].float()
        own = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(
            1, torch.tensor(result.token_ids)[:, None]
        )
        assert torch.allclose(own[:, 0], torch.tensor(result.logprobs), atol=1e-4)
    finally:
        ahead.close()
    assert process.wait(timeout=15) is not None  # the run's generator stops with it
    assert not folder.exists()  # and leaves no weight file behind


@pytest.mark.slow
def test_a_batch_older_than_max_off_policy_steps_is_dropped_and_generated_again(tmp_path):
    # weights every 3 steps: the batch of step 3 was made with step 0's weights, 3 steps old
    _, bundle = _trainer(
        tmp_path, "trainer.max_steps=4", "generation.weight_sync_steps=3", "generation.max_off_policy_steps=2"
    )
    try:
        run_trainer(bundle.trainer, "train")
    finally:
        bundle.ahead.close()
    logs = [e for e in bundle.trainer.state.log_history if "async/lag" in e]
    assert [e["async/lag"] for e in logs] == [0.0, 1.0, 2.0, 0.0]
    assert [e["async/dropped"] for e in logs] == [0.0, 0.0, 0.0, 1.0]
    assert bundle.ahead.dropped == 1


# the key a server started by hand for runs takes weights with (GRPO_WEIGHTS_KEY, docs/serving.md)
SERVER_KEY = "a-secret-for-these-runs"


@pytest.fixture
def served_tiny(tmp_path, monkeypatch):
    """A `python -m grpo.serve model=tiny model.seed=1` (other weights than the runs' seed 0),
    started for runs: with GRPO_WEIGHTS_KEY, which the in-process runs of the test have too."""
    port = _free_port()
    log = open(tmp_path / "serve.log", "w")
    monkeypatch.setenv("GRPO_WEIGHTS_KEY", SERVER_KEY)
    proc = subprocess.Popen(
        grpo_command(["model=tiny", "model.seed=1", f"serve.port={port}"], module="grpo.serve"),
        env=process_env(tmp_path, GRPO_WEIGHTS_KEY=SERVER_KEY),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    from grpo.generation.served import GeneratorError, call_server

    deadline = time.monotonic() + 120
    while True:
        try:
            call_server(url, "/health", timeout_s=1)
            break
        except GeneratorError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_generator_serving_another_model_or_other_weights_is_refused_in_one_line(tmp_path, served_tiny):
    url = f"generation.base_url={served_tiny}"
    with pytest.raises(
        UserError, match=r"\(tiny\) serves another model than the trainer's policy \(other parameter"
    ):
        _trainer(tmp_path / "small", "trainer.max_steps=1", url)  # the run trains small_alphabet_sort
    with pytest.raises(UserError, match=r"serves other weights than the trainer's policy \(checksum"):
        _trainer(tmp_path / "seed0", "model=tiny", "trainer.max_steps=1", url)  # tiny, seed 0
    # the same model and seed as the server: accepted, and it trains
    _, bundle = _trainer(tmp_path / "seed1", "model=tiny", "seed=1", "trainer.max_steps=1", url)
    try:
        run_trainer(bundle.trainer, "train")
        assert bundle.trainer.state.global_step == 1
    finally:
        bundle.ahead.close()
    # a server the run did not start keeps running after it
    from grpo.generation.served import call_server

    assert call_server(served_tiny, "/health", timeout_s=5)["status"] == "ok"


@pytest.mark.slow
def test_generator_settings_are_refused_before_anything_loads(tmp_path, served_tiny):
    """A generation.base_url that refuses, one that serves another model, one batch ahead with a
    backend that has no generator apart: one line, exit 2, in seconds, no run folder, no MLflow run."""
    root = tmp_path / "out"
    cases = [
        (
            ["generation.base_url=http://127.0.0.1:9"],
            "generation.base_url=http://127.0.0.1:9: no python -m grpo.serve answers there",
        ),
        (
            [f"generation.base_url={served_tiny}", "model=small"],
            f"generation.base_url={served_tiny} serves 'tiny', another model than model=small",
        ),
        (["generation=vllm_colocate"], "needs a generator apart from the trainer"),
        # the right model, but a run without the server's key: its weights would be refused
        ([f"generation.base_url={served_tiny}", "model=tiny", "seed=1"], "takes no weights from this run"),
    ]
    for extra, expected in cases:
        started = time.monotonic()
        done = run_grpo(["+env=alphabet_sort", "generation.num_batches_ahead=1", *extra], root=root)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr[-2000:]
        assert time.monotonic() - started < 30  # the port is not waited on for generation.timeout_s (120 s)
    assert not (root / "runs").exists() and not (root / "mlflow.db").exists()


# ---- the command line: faults, Ctrl-C, resume ---------------------------------------------------------

RUN = [
    *CHAR_TARGET_TRAIN,
    "stages=[train]",
    "trainer.save_steps=1000",
    "generation.num_batches_ahead=1",
    "seed=3",
]


def _start(root: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
    log = root / f"{name}.log"
    out = open(log, "w")
    proc = start_grpo(args, root=root, cwd=root, stdout=out, stderr=subprocess.STDOUT, text=True)
    return proc, log


def _wait_for(proc: subprocess.Popen, log: Path, pattern: str, seconds: float = 300) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while True:
        found = re.search(pattern, log.read_text())
        if found:
            return found
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {pattern!r} in time: " + log.read_text()[-2000:]
        time.sleep(0.05)


def _generator_pid(proc: subprocess.Popen, log: Path) -> int:
    return int(_wait_for(proc, log, r"\(python -m grpo\.serve, pid (\d+),").group(1))


@pytest.mark.slow
def test_a_killed_generator_stops_the_run_with_a_checkpoint_and_ctrl_c_stops_both_then_resume_ends_it(
    tmp_path,
):
    run_dir = tmp_path / "run"
    proc, log = _start(tmp_path, "first", *RUN, "trainer.max_steps=12", f"hydra.run.dir={run_dir}")
    pid = _generator_pid(proc, log)
    _wait_for(proc, log, r"step 2/12")
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=120) == 3
    text = log.read_text()
    last = text.strip().splitlines()[-1]
    found = re.fullmatch(
        rf"\[generation\] the generator process \(pid {pid}\) was killed by SIGKILL; stopped at step (\d+); "
        r"resume with: python -m grpo resume=(\S+)",
        last,
    )
    assert found, text[-2000:]
    assert "Traceback" not in text
    step = int(found.group(1))
    assert step >= 2 and Path(found.group(2)) == run_dir
    assert checkpoint_step(latest_checkpoint(run_dir)) == step
    assert is_complete_checkpoint(run_dir / "checkpoints" / f"checkpoint-{step}")
    # MLflow: the run FAILED with the lag of each step logged (0, then 1)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    assert client.get_run(run_id).info.status == "FAILED"
    lags = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/async/lag"))
    assert lags[:2] == [(1, 0.0), (2, 1.0)]

    # resume: a new generator; Ctrl-C (SIGINT to the trainer alone, as a terminal sends it to the
    # foreground process group, which the generator's own session is not part of) stops both
    proc, log = _start(tmp_path, "second", f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'second'}")
    pid = _generator_pid(proc, log)
    _wait_for(proc, log, rf"step {step + 2}/12")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert re.search(r"interrupted at step (\d+); resume with: python -m grpo resume=", log.read_text())
    assert _wait_gone(pid), "the generator outlived its trainer"
    stopped = checkpoint_step(latest_checkpoint(tmp_path / "second"))
    assert step + 2 <= stopped < 12

    done = run_grpo(
        [f"resume={tmp_path / 'second'}", f"hydra.run.dir={tmp_path / 'third'}"], root=tmp_path, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert is_complete_checkpoint(tmp_path / "third" / "checkpoints" / "checkpoint-12")
    assert f"resumed at step {stopped}" in done.stdout


@pytest.mark.slow
def test_a_hung_generator_stops_the_run_after_the_timeout_not_a_hang(tmp_path):
    proc, log = _start(
        tmp_path, "hung", *RUN, "trainer.max_steps=50", "generation.async_generation_timeout=3"
    )
    pid = _generator_pid(proc, log)
    _wait_for(proc, log, r"step 2/50")
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        code = proc.wait(timeout=120)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGCONT)
    assert code == 3
    assert time.monotonic() - started < 60
    last = log.read_text().strip().splitlines()[-1]
    # the batch the trainer waits for, or the weights it pushes: whichever the hang reaches first
    assert re.fullmatch(
        r"\[generation\] (no generation batch|the generator at http://127\.0\.0\.1:\d+ did not answer \S+) "
        r"within 3 s.*; stopped at step \d+; resume with: python -m grpo resume=\S+",
        last,
    ), last
    assert _wait_gone(pid), "the hung generator outlived its trainer"
