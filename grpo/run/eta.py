"""A stage's speed and time left, for its progress line (`speed_and_eta`), and the H:MM:SS clock."""

from __future__ import annotations

import math


def speed_and_eta(elapsed: float, steps_done: int, global_step: int, max_steps: int) -> str:
    """`1.90 s/step, eta 0:01:08` for a stage's progress line: seconds per step over the steps this
    process ran (a resumed run's earlier steps took no time here), times the steps left."""
    if steps_done <= 0:
        return ""
    per_step = elapsed / steps_done
    return f"{per_step:.2f} s/step, eta {clock(per_step * max(max_steps - global_step, 0))}"


def clock(seconds: float) -> str:
    """H:MM:SS, or ? for a time not known yet."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
