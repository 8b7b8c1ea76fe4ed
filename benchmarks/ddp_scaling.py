"""Does data parallelism split the work? One CPU process against two (torchrun, DDP over gloo),
one torch thread each, at the same global batch, in paired rounds.

Each side is a real `python -m grpo` training run (char_target, model=small, hf generation) of
STEPS optimizer steps; its speed is the global batch over the seconds per step the run reports
for its last step (the mean over the steps, start-up and loading excluded). Rounds alternate
which side goes first; the ratio is the median of the per-round ratios (two-process samples/s
over one-process samples/s), with the min-max across rounds.

    python benchmarks/ddp_scaling.py [ROUNDS]

Last line: `ratio: X`.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = 8
GLOBAL_BATCH = 32  # completions per optimizer step, over all processes
COMMON = [
    "+env=char_target",
    # the 3.7M-parameter preset: on the 0.2M tiny model, per-token Python overhead, not compute,
    # sets the pace of generation, and a smaller batch per process saves little of it
    "model=small",
    "stages=[train]",
    "tracking=none",
    "trainer.num_generations=4",
    "trainer.beta=0",
    "trainer.max_completion_length=48",
    "generation.max_tokens_per_turn=48",
    "trainer.save_steps=1000",
    f"trainer.max_steps={STEPS}",
    "optimizer.lr=1e-4",
]
_SPEED = re.compile(r"\[train\] step (\d+)/(\d+) .*?\| ([0-9.]+) s/step")


def run(processes: int) -> float:
    """Samples (completions) per second of one training run on `processes` processes."""
    per_device = GLOBAL_BATCH // processes
    launcher = [sys.executable, "-m", "grpo"]
    if processes > 1:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={processes}",
        ]
        launcher += ["-m", "grpo"]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", ACCELERATE_USE_CPU="true")
    with tempfile.TemporaryDirectory(prefix="grpo-ddp-") as root:
        env["GRPO_OUTPUT_ROOT"] = root
        done = subprocess.run(
            [*launcher, *COMMON, f"trainer.per_device_batch_completions={per_device}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            timeout=1800,
        )
    if done.returncode != 0:
        raise SystemExit(f"{processes}-process run failed:\n{done.stderr[-3000:]}")
    last = [m for m in _SPEED.finditer(done.stdout) if m.group(1) == m.group(2)]
    if not last:
        raise SystemExit(f"no last-step speed line in the {processes}-process run:\n{done.stdout[-2000:]}")
    return GLOBAL_BATCH / float(last[-1].group(3))


def main(rounds: int) -> None:
    ratios, one, two = [], [], []
    for r in range(rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        speed = {}
        for processes in order:
            start = time.perf_counter()
            speed[processes] = run(processes)
            print(
                f"round {r + 1}: {processes} process(es): {speed[processes]:.1f} samples/s "
                f"(run {time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        one.append(speed[1])
        two.append(speed[2])
        ratios.append(speed[2] / speed[1])
    print(
        f"\nglobal batch {GLOBAL_BATCH} completions, {STEPS} steps, 1 thread per process, {rounds} paired rounds\n"
        f"1 process:   {statistics.median(one):.1f} samples/s (median)\n"
        f"2 processes: {statistics.median(two):.1f} samples/s (median)\n"
        f"2 over 1: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
