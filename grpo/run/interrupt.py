"""Ctrl-C and SIGTERM: stop at a step boundary with a checkpoint, then exit 130 / 143.

    with handle_signals():                         # the entry point, around the whole run
        enter_stage("eval")                        # stages.py, before each stage
        callbacks = [..., stop_callback("train")]  # each training stage (train, sft, reward_model)
        trainer.train()
        check_stopped("train")                     # raises Interrupted after a graceful stop

The first SIGINT or SIGTERM while a trainer runs only sets `stop.signum`: the trainer finishes its
current step, saves a checkpoint (marked complete as any other, grpo/run/checkpoints.py), and the stage
raises `Interrupted` (with the step) when `trainer.train()` returns. Outside a trainer (loading,
evaluation) there is no step to finish, so the first signal raises `Interrupted` at once (when it
lands inside a `__del__`, whose exceptions Python drops, it is delivered again 50 ms later). A second
signal always raises at once: a save it cuts short never gets its completion marker, so the latest
complete checkpoint stays the one a resume picks. The one exception is a tracking-store write
(`signals_held`): a signal landing inside one is acted on as soon as that write returns, so no store
transaction is cut in half and the run's closing status always gets written; a further signal
while one is held raises at once.

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
    # (stage, step, what runs inside its step) of a trainer whose step runs another trainer
    # (`inside_step`), else None
    outer: tuple[str | None, int | None, str] | None = None
    # how many `signals_held` blocks the main thread is in, and the signal held until they end
    holding: int = 0
    held: int | None = None


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
            stage, step, inner = stop.outer or (stop.stage, stop.step, "")
            inner = f"the {inner} and " if inner else ""
            print(
                f"\n[grpo] {signal.Signals(signum).name}: stopping after {inner}step {(step or 0) + 1} of "
                f"{stage} with a checkpoint (send it again to stop at once)",
                file=sys.stderr,
                flush=True,
            )
            return
        stop.signum = stop.signum or signum
        if stop.holding and stop.held is None:
            stop.held = signum  # raised when the store write returns (`signals_held`)
            if is_main():
                print(
                    f"\n[grpo] {signal.Signals(signum).name}: stopping once the tracking store has taken the "
                    "current write (send it again to stop now)",
                    file=sys.stderr,
                    flush=True,
                )
            return
        if _in_finalizer(frame):
            # Python prints and drops an exception raised inside a __del__ (a garbage collection
            # the signal happened to land in): deliver the signal again in a moment instead
            threading.Timer(0.05, signal.raise_signal, (signum,)).start()
            return
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


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Around one write to the tracking store (an SQLite transaction, a request): a signal that
    would stop the run at once is held until the block ends, then raised as `Interrupted` (even
    when the block raised: the stop wins), so a write is never cut in the middle and the writes
    that close the run still find the store free. A further signal while one is held raises at
    once. Nested blocks hold until the outermost ends. Off the main thread, or outside
    `handle_signals`, it does nothing (signals reach only the main thread)."""
    stop = _current
    if stop is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    stop.holding += 1
    try:
        yield
    finally:
        stop.holding -= 1
        if not stop.holding and stop.held is not None:
            signum, stop.held = stop.held, None
            raise Interrupted(signum, stop.stage or stop.phase, stop.step, at_once=True)


def _in_finalizer(frame: Any) -> bool:
    """Whether the interrupted code runs inside a __del__ (whose exceptions Python drops)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


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


@contextlib.contextmanager
def inside_step(what: str, stage: str, step: int) -> Iterator[None]:
    """Around a trainer run inside another trainer's step (a preference round trains the RM inside
    a GRPO step, grpo/train/rounds.py): the outer stage and step come back afterwards, so a signal
    after it still stops the outer stage at a step boundary; a signal during it ends the inner
    trainer early, and the outer stage stops at its next step end. `what` names the inner work in
    the signal's line; `stage` and `step` are the outer trainer's (its own callback may not have
    said them yet: a round runs at the start of training too)."""
    stop = current()
    if stop is None:
        yield
        return
    stop.outer = (stage, step, what)
    stop.stage, stop.step = stage, step
    try:
        yield
    finally:
        stop.stage, stop.step, stop.outer = stage, step, None


def check_stopped(stage: str) -> None:
    """After a stage's trainer returned: raise Interrupted if it stopped on a signal."""
    stop = current()
    if stop is not None and stop.signum is not None:
        raise Interrupted(stop.signum, stage, stop.step)
