"""A stage's TRL trainer, built and run the same way by every stage (train, sft, reward_model).

- callbacks: the stage's own (its one compact progress line, the tracker's metrics), then the
  checkpoint marker (grpo/run/checkpoints.py), then the stop callback last so that its save
  request follows every other callback of the step (grpo/run/interrupt.py); transformers'
  PrinterCallback is removed, since each stage prints its own line (`make_trainer`);
- before the trainer exists: the libraries' notices quieted (grpo/trl_adapter/logs.py), FSDP2 over
  CPU processes when the launch asked for FSDP and the fused LM head's compact path on CPU
  (grpo/trl_adapter/devices.py);
- training: `trainer.train(resume_from_checkpoint=...)`, then the stop check (`run_trainer`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from grpo.run.checkpoints import marker_callback
from grpo.run.interrupt import check_stopped, stop_callback
from grpo.trl_adapter.devices import score_labelled_positions_on_cpu, shard_cpu_processes_if_asked
from grpo.trl_adapter.logs import quiet_library_notices


def make_trainer(trainer_cls: type, stage: str, callbacks: Sequence[Any] = (), **kwargs: Any) -> Any:
    """`trainer_cls(**kwargs)` for `stage` (train, sft, reward_model) with grpo's callbacks (see
    the module docstring): `callbacks`, the checkpoint marker, the stop callback last."""
    from transformers.trainer_callback import PrinterCallback

    score_labelled_positions_on_cpu()  # the loss head skips unlabelled positions on CPU too
    quiet_library_notices(kwargs.get("model"))
    shard_cpu_processes_if_asked(stage)
    trainer = trainer_cls(callbacks=[*callbacks, marker_callback(), stop_callback(stage)], **kwargs)
    trainer.remove_callback(PrinterCallback)  # the stage prints one compact line per log instead
    return trainer


def run_trainer(trainer: Any, stage: str, resume_from: str | os.PathLike[str] | None = None) -> float:
    """Train (from the checkpoint `resume_from` when given); the seconds it took. Raises
    Interrupted when a first Ctrl-C / SIGTERM stopped it (the step's checkpoint is on disk)."""
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.perf_counter() - start
    check_stopped(stage)
    return seconds


def point_model_at(model: Any, path: str | os.PathLike[str]) -> None:
    """TRL loads a second copy of the policy from its path (the reference model when beta > 0
    without LoRA: config._name_or_path; a colocated vLLM engine: name_or_path): point both at
    `path`, where these weights are saved."""
    model.config._name_or_path = str(path)
    model.name_or_path = str(path)
