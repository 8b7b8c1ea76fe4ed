"""The benchmarks' clock of optimizer steps: a trainer callback that notes when each step ends.

timer = StepTimer()
... build_trainer(..., callbacks=[timer]) / train(..., callbacks=[timer]) ...
timer.seconds_per_step()   # median wall seconds of a step, the first one left out
"""

from __future__ import annotations

import statistics
import time

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def gaps(self) -> list[float]:
        """Seconds of each step after the first (the first has no start mark: warm-up)."""
        return [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)]

    def seconds_per_step(self) -> float:
        return statistics.median(self.gaps())
