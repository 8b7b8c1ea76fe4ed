"""Ctrl-C and SIGTERM: stop at a step boundary with a checkpoint, then exit 130 / 143.

    with handle_signals():                         # the entry point, around the whole run
        enter_stage("eval")                        # stages.py, before each stage
        callbacks = [..., stop_callback("train")]  # each training stage (train, sft, reward_model)
        trainer.train()
        check_stopped("train")                     # raises Interrupted after a graceful stop

The first SIGINT or SIGTERM while a trainer runs only sets `stop.signum`: the trainer finishes its
current step, saves a checkpoint (marked complete as any other, grpo/run/checkpoints.py), and the stage
raises `Interrupted` (with the step) when `trainer.train()` returns. Outside a trainer (loading,
evaluation) there is no step to finish, so the first signal raises `Interrupted` at once. A second
signal always raises at once: a save it cuts short never gets its completion marker, so the latest
complete checkpoint stays the one a resume picks.

`Interrupted` derives from KeyboardInterrupt: `except Exception` blocks let it through, and the
tracker closes its MLflow run as KILLED (tagged with the step). The entry point turns it into one
line, `interrupted at step N; resume with: python -m grpo ... resume=<run dir>`, and exit code
128 + the signal number (130 for SIGINT, 143 for SIGTERM).

Handlers can only be installed from the main thread; elsewhere `handle_signals` leaves the
process's handlers alone (and a stage simply never sees a stop request).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo.run.distributed import any_rank, is_main

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run stopped on a signal; `step` is the last completed training step of `stage`."""

    def __init__(self, signum: int, stage: str | None = None, step: int | None = None, at_once: bool = False):
        self.signum, self.stage, self.step, self.at_once = signum, stage, step, at_once
        super().__init__(f"{signal.Signals(signum).name} during {stage or 'the run'}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass
class StopRequest:
    """The state the signal handler shares with the training callbacks."""

    # the first signal received, None while running normally
    signum: int | None = None
    # the stage a trainer is running (None outside training: a signal then stops at once)
    stage: str | None = None
    # the last step a trainer finished, for the message of an immediate stop
    step: int | None = None
    # the stage the run is in (eval, ...), to name it when a signal stops it at once
    phase: str | None = None


# the run's stop request (one run per process); None outside `handle_signals`
_current: StopRequest | None = None


def current() -> StopRequest | None:
    return _current


@contextlib.contextmanager
def handle_signals() -> Iterator[StopRequest]:
    """Install the SIGINT / SIGTERM handlers for the block (see the module docstring); the
    previous handlers come back afterwards."""
    global _current
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.signum is None and stop.stage is not None:
            stop.signum = signum
            if not is_main():
                return
            print(
                f"\n[grpo] {signal.Signals(signum).name}: stopping after step {(stop.step or 0) + 1} of "
                f"{stop.stage} with a checkpoint (send it again to stop at once)",
                file=sys.stderr,
                flush=True,
            )
            return
        stop.signum = stop.signum or signum
        raise Interrupted(signum, stop.stage or stop.phase, stop.step, at_once=True)

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, handler)
    _current = stop
    try:
        yield stop
    finally:
        _current = None
        for s, h in previous.items():
            signal.signal(s, h)


def enter_stage(stage: str) -> None:
    """Name the stage the run is in (for the line of a signal that stops it at once)."""
    if _current is not None:
        _current.phase = stage


def stop_callback(stage: str) -> Any:
    """A transformers TrainerCallback for `stage`: at each step end, after a first signal (on any
    rank), it asks the trainer to save a checkpoint and stop; `check_stopped(stage)` after train()
    then raises Interrupted. Without `handle_signals` around the run it does nothing."""
    from transformers import TrainerCallback

    class StopAtStepEnd(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stop = current()
            if stop is not None:
                stop.stage, stop.step = stage, state.global_step

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stop = current()
            if stop is None:
                return
            stop.step = state.global_step
            # every rank stops at the same step when any one got the signal (grpo/run/distributed.py)
            if any_rank(stop.signum is not None) and stop.signum is None:
                stop.signum = signal.SIGTERM
            if stop.signum is not None and state.global_step < state.max_steps:
                control.should_save = True
                control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stop = current()
            if stop is not None and stop.signum is None:
                stop.stage = None  # out of the trainer: a signal now stops at once

    return StopAtStepEnd()


def check_stopped(stage: str) -> None:
    """After a stage's trainer returned: raise Interrupted if it stopped on a signal."""
    stop = current()
    if stop is not None and stop.signum is not None:
        raise Interrupted(stop.signum, stage, stop.step)
