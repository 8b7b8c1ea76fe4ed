"""Shared by the tests that start real `python -m grpo` processes (interrupt / resume, several
ranks): the environment such a process runs in, and a small char_target training run."""

from __future__ import annotations

import os
from pathlib import Path

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


def process_env(root: Path, **extra: str) -> dict[str, str]:
    """os.environ for a child process writing under `root` (its output root and MLflow store),
    offline, one torch thread, unbuffered (a test that waits for a line in its log sees it when it
    is printed, not when the process exits), plus `extra`."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", GRPO_OUTPUT_ROOT=str(root), OMP_NUM_THREADS="1", **extra)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return env
