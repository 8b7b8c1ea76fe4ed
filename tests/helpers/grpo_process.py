"""The one way a test starts a real `python -m grpo` process: `run_grpo` runs it to its end,
`start_grpo` leaves it running (for the tests that signal or watch it); both in the environment
`process_env` makes. Also a small char_target training run such tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .random_model import TRAIN_ON_CUT_COMPLETIONS

# a short GRPO run on char_target with the tiny model: 8 completions per step, 16 tokens each
CHAR_TARGET_TRAIN = [
    "+env=char_target",
    "env.num_train_examples=64",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=8",
    "trainer.beta=0",
    "trainer.max_completion_length=16",
    "generation.max_tokens_per_turn=16",
    "optimizer.lr=1e-3",
    *TRAIN_ON_CUT_COMPLETIONS,
]

# the cache of built tiny tokenizers: a child may share the parent's, it changes no result
_INHERITED = ("GRPO_CACHE_DIR",)


def process_env(root: Path | None, **extra: str | None) -> dict[str, str]:
    """os.environ for a child process, without the grpo, MLflow and Hydra settings of the shell that
    runs the tests (GRPO_* but GRPO_CACHE_DIR, MLFLOW_*, HYDRA_FULL_ERROR): the test sets what it
    needs. Offline, one torch thread, unbuffered (a test that waits for a line in its log sees it
    when it is printed, not when the process exits); writing under `root` (GRPO_OUTPUT_ROOT; unset
    for None: the run writes where its overrides or cwd say); then `extra`, where None unsets one."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in _INHERITED or not (key.startswith(("GRPO_", "MLFLOW_")) or key == "HYDRA_FULL_ERROR")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    if root is not None:
        env["GRPO_OUTPUT_ROOT"] = str(root)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def grpo_command(args: Sequence[str], module: str = "grpo", launcher: Sequence[str] = ()) -> list[str]:
    """`python [launcher...] -m module args...` with this interpreter; `launcher` puts a launcher
    module in front, e.g. ("-m", "torch.distributed.run", "--nproc_per_node=2")."""
    return [sys.executable, *launcher, "-m", module, *args]


def start_grpo(
    args: Sequence[str],
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    env_extra: Mapping[str, str | None] | None = None,
    module: str = "grpo",
    launcher: Sequence[str] = (),
    **popen: Any,
) -> subprocess.Popen:
    """`python -m grpo *args` (another `module`, a `launcher` in front: grpo_command) started and
    left running, in `cwd` (None: the test's) and process_env(root, **env_extra); `popen` goes to
    Popen (stdout, stderr, text)."""
    return subprocess.Popen(
        grpo_command(args, module, launcher), cwd=cwd, env=process_env(root, **(env_extra or {})), **popen
    )


def run_grpo(
    args: Sequence[str],
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    env_extra: Mapping[str, str | None] | None = None,
    module: str = "grpo",
    launcher: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`python -m grpo *args` run to its end (TimeoutExpired after `timeout` seconds) with its
    stdout and stderr captured as text; where and how as `start_grpo`."""
    return subprocess.run(
        grpo_command(args, module, launcher),
        cwd=cwd,
        env=process_env(root, **(env_extra or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
