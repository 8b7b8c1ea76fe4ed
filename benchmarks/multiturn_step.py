"""Seconds per GRPO training step on multi-turn alphabet-sort: batched rollouts vs one conversation
at a time, side by side.

Both sides run grpo.train.train on the tiny model with the same config (16 completions per step =
4 prompts x 4, three turns per episode, up to 128 new tokens per model turn: the default
generation.max_tokens_per_turn); the only difference is the hf backend's
`generation.batch_size`: null sends every active conversation of a turn to ONE generate call,
1 generates the conversations one after the other. Runs alternate in one process; a side's cost
is its best run's median seconds per optimizer step (first step excluded). Target: >= 3x.

    python benchmarks/multiturn_step.py [--steps 4] [--rounds 2]

Last line: `ratio: X` (one-at-a-time s/step / batched s/step).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

COMMON = [
    "+env=alphabet_sort",
    "env.min_turns=3",
    "stages=[train]",
    "trainer.num_generations=4",
    "trainer.per_device_batch_completions=16",
    "trainer.beta=0",
    "trainer.max_completion_length=1024",
    "generation.max_tokens_per_turn=128",
    "trainer.save_steps=100000",
]


def seconds_per_step(cfg, env, out: Path) -> float:
    from transformers import TrainerCallback

    from grpo.models import load_policy
    from grpo.train import train

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    timer = StepTimer()
    model, tokenizer = load_policy(cfg.model)
    train(cfg, env, out, model=model, tokenizer=tokenizer, callbacks=[timer])
    return statistics.median(b - a for a, b in zip(timer.ends, timer.ends[1:], strict=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating (batched, one-at-a-time) pairs")
    args = parser.parse_args()

    import torch

    from grpo.cli import load_settings
    from grpo.envs import build_env

    torch.set_num_threads(1)  # a tiny model; identical for both sides
    batched_cfg = load_settings([*COMMON, f"trainer.max_steps={args.steps}", "generation.batch_size=null"])
    single_cfg = load_settings([*COMMON, f"trainer.max_steps={args.steps}", "generation.batch_size=1"])
    env = build_env(batched_cfg.env, batched_cfg.language)
    batched: list[float] = []
    single: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            batched.append(seconds_per_step(batched_cfg, env, Path(tmp) / f"batched{r}"))
            single.append(seconds_per_step(single_cfg, env, Path(tmp) / f"single{r}"))
            print(
                f"round {r}: batched {batched[-1]:.3f} s/step, one at a time {single[-1]:.3f} s/step",
                file=sys.stderr,
            )
    b, s = min(batched), min(single)
    print(f"batched (one generate call per turn): {b:.3f} s/step (best of {args.rounds} runs)")
    print(f"one conversation at a time:           {s:.3f} s/step (best of {args.rounds} runs)")
    print(f"ratio: {s / b:.2f}")


if __name__ == "__main__":
    main()
