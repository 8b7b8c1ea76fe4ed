"""A stage's speed and time left on its progress line (grpo/run/eta.py)."""

from __future__ import annotations

from grpo.run.eta import clock, speed_and_eta


def test_speed_and_eta_count_only_the_steps_this_process_ran():
    # resumed at step 2, 5 steps run here in 10 s, 10 of 17 left
    assert speed_and_eta(10.0, 5, 7, 17) == "2.00 s/step, eta 0:00:20"
    assert speed_and_eta(10.0, 0, 7, 17) == ""
    assert clock(3725.4) == "1:02:05" and clock(float("nan")) == "?"
