"""Checkpoints and resume: a real `python -m grpo` training process is killed with SIGKILL after
its first checkpoints; `resume=<its run dir>` continues from its latest COMPLETE checkpoint at the
same global step, with the same weights, optimizer and scheduler state and the same data order."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.grpo_process import start_grpo
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from safetensors.torch import load_file
from transformers import TrainerCallback

from grpo.compose import load_run, load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.run.checkpoints import (
    COMPLETE_MARKER,
    checkpoint_step,
    checkpoints_of,
    is_complete_checkpoint,
    latest_checkpoint,
    mark_checkpoint_complete,
)
from grpo.train.rollout_func import PromptIndex
from grpo.train.trainer import train

RUN = [
    "+env=char_target",
    "env.num_train_examples=64",
    "stages=[train]",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.beta=0",
    "trainer.max_completion_length=16",
    "generation.max_tokens_per_turn=16",
    "trainer.save_steps=1",
    "trainer.save_total_limit=3",
    "optimizer.lr=1e-3",
    "seed=7",
    *TRAIN_ON_CUT_COMPLETIONS,
]


class StartState(TrainerCallback):
    """What the trainer holds when training (re)starts: step, weights, optimizer, scheduler."""

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        self.step = state.global_step
        self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        # deep copies: the optimizer updates its state tensors in place during the next step
        self.optimizer = copy.deepcopy(optimizer.state_dict())
        self.scheduler = copy.deepcopy(lr_scheduler.state_dict())


def _complete(run_dir: Path) -> list[Path]:
    return [c for c in checkpoints_of(run_dir) if is_complete_checkpoint(c)]


@pytest.mark.slow
def test_resume_after_sigkill_continues_at_the_same_step(tmp_path):
    run1 = tmp_path / "run1"
    log = tmp_path / "run1.log"
    with open(log, "w") as out:
        proc = start_grpo(
            [*RUN, "trainer.max_steps=500", f"hydra.run.dir={run1}"],
            root=tmp_path,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 300
            while len(_complete(run1)) < 2:
                assert proc.poll() is None, f"training exited early:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no checkpoint in time:\n{log.read_text()[-3000:]}"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    ckpt = latest_checkpoint(run1)
    step = checkpoint_step(ckpt)
    assert step >= 2 and is_complete_checkpoint(ckpt)
    # a save torn by the kill is never "latest": simulate one if the kill did not land in a save
    torn = run1 / "checkpoints" / f"checkpoint-{step + 1}"
    if not torn.exists():
        torn.mkdir()
        shutil.copy(ckpt / "model.safetensors", torn / "model.safetensors")
        (torn / "trainer_state.json").write_text(json.dumps({"global_step": step + 1}))
    assert not is_complete_checkpoint(torn)
    assert latest_checkpoint(run1) == ckpt

    cfg, plan = load_run(
        [*RUN, f"trainer.max_steps={step + 1}", f"resume={run1}", "trainer.log_completions=true"]
    )
    # the plan read once: the killed run's latest complete checkpoint, nothing forced
    assert plan.source == run1 and plan.checkpoints == {"train": ckpt} and plan.forced == ()
    # a resume refuses such changes (tests/test_interrupt_resume.py); forced, they are reported
    with pytest.raises(UserError, match="seed: 7 -> 8; trainer.num_generations: 4 -> 2"):
        load_settings([*RUN, "seed=8", "trainer.num_generations=2", f"resume={run1}"])
    changed, forced = load_run(
        [*RUN, "seed=8", "trainer.num_generations=2", f"resume={run1}", "resume_force=true"]
    )
    assert changed.trainer.seed == changed.env["seed"] == 8 and changed.trainer.num_generations == 2
    assert forced.forced == ("seed: 7 -> 8", "trainer.num_generations: 4 -> 2")
    env = build_env(cfg.env, cfg.language)
    start = StartState()
    result = train(cfg, env, tmp_path / "run2", callbacks=[start])

    assert start.step == step  # the same global step
    saved = load_file(ckpt / "model.safetensors")
    assert all(torch.equal(start.weights[k], saved[k]) for k in saved)
    saved_opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert saved_opt["state"].keys() == start.optimizer["state"].keys()
    for key, state in saved_opt["state"].items():
        for name, value in state.items():
            assert torch.equal(
                torch.as_tensor(start.optimizer["state"][key][name]), torch.as_tensor(value)
            ), name
    saved_sched = torch.load(ckpt / "scheduler.pt", weights_only=True)
    assert start.scheduler["last_epoch"] == saved_sched["last_epoch"] == step

    assert result.global_step == step + 1
    # the restored history goes on: steps 1..k from the killed run, then k+1
    assert [h["step"] for h in result.log_history if "reward" in h] == list(range(1, step + 2))
    assert result.checkpoint_dir == tmp_path / "run2" / "checkpoints" / f"checkpoint-{step + 1}"

    # the same data order: resumed step k+1 trains on chunk k of the sampler's seeded permutation
    prompts_per_step = 8 // 4
    order = torch.randperm(64, generator=torch.Generator().manual_seed(7)).tolist()
    expected = order[step * prompts_per_step : (step + 1) * prompts_per_step]
    table = pd.read_parquet(
        tmp_path / "run2" / "checkpoints" / "completions" / f"completions_{step + 1:05d}.parquet"
    )
    index = PromptIndex(env.rows("train"))
    seen = [index.row_for([dict(m) for m in prompt]).id for prompt in table["prompt"][::4]]
    assert seen == expected


def test_latest_checkpoint_skips_incomplete_ones(tmp_path):
    ckpts = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        path = ckpts / f"checkpoint-{step}"
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"w")
        (path / "optimizer.pt").write_bytes(b"o")
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    mark_checkpoint_complete(ckpts / "checkpoint-2", 2)
    mark_checkpoint_complete(ckpts / "checkpoint-4", 4)
    # checkpoint-6: killed before the marker
    assert latest_checkpoint(tmp_path) == ckpts / "checkpoint-4"
    assert latest_checkpoint(ckpts) == ckpts / "checkpoint-4"  # the checkpoints dir itself works too
    # a file listed in the marker went missing (e.g. a half-finished rotation delete)
    (ckpts / "checkpoint-4" / "optimizer.pt").unlink()
    assert latest_checkpoint(tmp_path) == ckpts / "checkpoint-2"
    # a marker from another step, or a trainer state that does not parse, is not complete
    (ckpts / "checkpoint-2" / COMPLETE_MARKER).write_text(json.dumps({"global_step": 4, "files": []}))
    with pytest.raises(UserError, match=r"no complete checkpoint under .*\(3 incomplete skipped\)"):
        latest_checkpoint(tmp_path)
    with pytest.raises(UserError, match="no such directory"):
        latest_checkpoint(tmp_path / "missing")


def test_a_resume_without_the_saved_config_says_it_cannot_check_the_settings(tmp_path, capsys):
    from omegaconf import OmegaConf

    from grpo.run.resume import ResumePlan

    # a run made from Python: a complete GRPO checkpoint, no .hydra/config.yaml
    path = tmp_path / "checkpoints" / "checkpoint-2"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"w")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    mark_checkpoint_complete(path, 2)
    plan = ResumePlan.read(tmp_path)
    err = capsys.readouterr().err
    assert plan.saved is None and plan.checkpoints["train"] == path
    assert err.count("\n") == 1 and err.startswith("warning: resume=")
    assert ".hydra/config.yaml is missing" in err and "cannot check" in err
    # the command line's settings are used as they are
    cfg, same = plan.apply(OmegaConf.create({"resume": str(tmp_path)}), ["trainer.lr=1"], set())
    assert same is plan and cfg.resume == str(tmp_path)

    # an empty folder has nothing to continue: no warning here, the checks refuse it in one line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not ResumePlan.read(empty).resumable
    assert capsys.readouterr().err == ""
    with pytest.raises(UserError, match="no complete checkpoint"):
        latest_checkpoint(empty)
