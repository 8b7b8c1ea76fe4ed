"""How long does `python -m grpo +env=alphabet_sort --cfg job` take, composing the config once?

The preflight composes and checks every command line before Hydra runs it. For `--cfg job` it now
prints that composition itself; before, Hydra composed the same config a second time to print it.
The second path is still what `--cfg job --package _global_` takes (a package selection is left
to Hydra), and it prints the same text, so it is the baseline, measured in the same rounds: each
round runs both commands as fresh processes, alternating which goes first. The ratio is the median
of the per-round ratios (two compositions over one), with the min-max; the wall times are medians.

    python benchmarks/cfg_job.py [ROUNDS]          (default 7)

Last line: `ratio: X`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

ONCE = [sys.executable, "-m", "grpo", "+env=alphabet_sort", "--cfg", "job"]
TWICE = [*ONCE, "--package", "_global_"]
# the goal for the one-composition path
TARGET_S = 0.5


def wall(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out


def main(rounds: int) -> None:
    wall(ONCE)  # warm the file cache and the byte-code
    once, twice, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            (t2, out2), (t1, out1) = wall(TWICE), wall(ONCE)
        else:
            (t1, out1), (t2, out2) = wall(ONCE), wall(TWICE)
        assert out1 == out2, "the two paths printed different configs"
        once.append(t1)
        twice.append(t2)
        ratios.append(t2 / t1)
        print(f"round {r + 1}: once {t1:.3f} s, twice {t2:.3f} s, ratio {t2 / t1:.2f}", flush=True)
    median = statistics.median(once)
    print(
        f"--cfg job: median {median:.3f} s (target <= {TARGET_S} s); composed twice: {statistics.median(twice):.3f} s"
    )
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
