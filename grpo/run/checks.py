"""The settings rules of the run as a whole: every number finite, the stages and their order, and
what resume=<run dir> needs (a training stage, a complete checkpoint, as many processes as wrote it).

Walked by the registry grpo/cli/checks.py, each on the part of the settings it names; UserError
(one line: field, value, fix) on the first rule broken. Light: no torch, reads checkpoint files
only by name."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from grpo.config import STAGES
from grpo.errors import reject
from grpo.run.resume import ResumePlan


def check_finite_numbers(node: Any, path: str = "") -> None:
    """No setting is NaN or infinite (optimizer.lr=nan, trainer.beta=inf, an env argument, a value
    under *.extra): such a number passes every range check by accident (NaN compares False) and
    fails later, inside a library, or trains on garbage."""
    if isinstance(node, float) and not math.isfinite(node):
        reject(f"{path}={node}: a setting must be a finite number")
    elif isinstance(node, dict):
        for key, value in node.items():
            check_finite_numbers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_finite_numbers(value, f"{path}[{i}]")


def check_stages(stages: list[str]) -> None:
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        reject(
            f"stages={list(stages)}: each stage must be one of {', '.join(STAGES)} (in the order to run them), "
            "e.g. stages=[eval,train,eval]"
        )
    if "sft" in stages and "train" in stages and stages.index("sft") > stages.index("train"):
        reject(
            f"stages={list(stages)}: sft must come before train (it is the warm start GRPO continues from), "
            "e.g. stages=[sft,eval,train,eval]"
        )


def check_resume(resume: str, stages: list[str], plan: ResumePlan | None) -> None:
    """resume=<run dir> with these stages. `plan`: the run's resume plan (None: read here)."""
    if not {"train", "sft", "reward_model"} & set(stages):
        reject(
            f"resume={resume} needs a training stage: add train (or sft, reward_model) to stages "
            "(e.g. stages=[train,eval])"
        )
    if "sft" in stages or "reward_model" in stages:
        return  # a run interrupted in an earlier stage has no GRPO checkpoint yet (grpo/run/resume.py)
    from grpo.run.checkpoints import latest_checkpoint

    checkpoint = (plan or ResumePlan.read(resume)).checkpoints.get("train")
    if checkpoint is None:
        latest_checkpoint(resume)  # UserError: nothing complete to resume from
        return
    _same_processes(resume, checkpoint)


def _same_processes(resume: str, checkpoint: Path) -> None:
    """A checkpoint holds one RNG state per process (rng_state.pth, or rng_state_<rank>.pth): the
    data order and the sampling continue only with as many processes as wrote it."""
    from grpo.run.distributed import world_size

    wrote = len(list(checkpoint.glob("rng_state_*.pth"))) or len(list(checkpoint.glob("rng_state.pth")))
    if wrote and wrote != world_size():
        how = f"torchrun --nproc_per_node={wrote} -m grpo" if wrote > 1 else "python -m grpo (one process)"
        reject(
            f"resume={resume}: {checkpoint.name} was written by {wrote} process(es), this run has "
            f"{world_size()}; resume it with as many: {how} resume={resume}"
        )
