"""Training overhead of our code path over a bare TRL GRPOTrainer script, side by side.

Same tiny model weights, same single-turn environment (char_target) and reward, same GRPOConfig:
- ours: grpo.train.train (what `python -m grpo ... stages=[train]` runs): the env's rows as the
  dataset, rollout_func -> the batched rollout engine -> the hf backend, rubric reward adapters,
  checkpoint marker and progress callbacks;
- bare TRL: GRPOTrainer with the same prompts and a plain reward function, TRL generating with
  its own model.generate.
Runs alternate (ours, TRL, ours, TRL, ...) in one process; a run's cost is the median seconds
between consecutive optimizer steps (the first step, with its warm-up, excluded), and a side's
cost is its best run: other load on the machine only ever adds time, so the best run is the
closest to the code's own cost. Target: ratio <= 1.10.

    python benchmarks/overhead_vs_trl.py [--steps 16] [--rounds 4]

Last line: `ratio: X` (ours / bare TRL seconds per step).
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
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

COMMON = [
    "+env=char_target",
    "stages=[train]",
    "trainer.num_generations=8",
    "trainer.per_device_batch_completions=16",
    "trainer.beta=0",
    "trainer.max_completion_length=32",
    "generation.max_tokens_per_turn=32",
    "trainer.save_steps=100000",
    "optimizer.lr=1e-3",
]


def step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    return StepTimer()


def median_step(timer) -> float:
    gaps = [b - a for a, b in zip(timer.ends, timer.ends[1:], strict=False)]
    return statistics.median(gaps)


def run_ours(cfg, env, out: Path) -> float:
    from grpo.models import load_policy
    from grpo.train import train

    model, tokenizer = load_policy(cfg.model)
    timer = step_timer()
    train(cfg, env, out, model=model, tokenizer=tokenizer, callbacks=[timer])
    return median_step(timer)


def run_bare_trl(cfg, env, out: Path) -> float:
    """What a user would write with TRL alone: dataset of prompts, a reward function, GRPOTrainer."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from grpo.envs.char_target import target_fraction
    from grpo.models import load_policy
    from grpo.train import grpo_config_kwargs

    model, tokenizer = load_policy(cfg.model)
    rows = env.rows("train")
    dataset = Dataset.from_list([{"prompt": row.prompt} for row in rows])
    targets, min_length = env.targets, env.min_length

    def target_char_fraction(completions, **kwargs):
        return [target_fraction(c[0]["content"], targets, min_length) for c in completions]

    kwargs = grpo_config_kwargs(cfg, out, [1.0])  # the identical GRPOConfig
    timer = step_timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[target_char_fraction],
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    # same console output as ours (which prints its own compact line instead of the log dicts)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return median_step(timer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=4, help="alternating (ours, TRL) pairs")
    args = parser.parse_args()

    import torch

    from grpo.cli import load_settings
    from grpo.envs import build_env

    torch.set_num_threads(1)  # a tiny model; identical for both sides
    cfg = load_settings([*COMMON, f"trainer.max_steps={args.steps}"])
    env = build_env(cfg.env, cfg.language)
    ours: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            ours.append(run_ours(cfg, env, Path(tmp) / f"ours{r}"))
            bare.append(run_bare_trl(cfg, env, Path(tmp) / f"trl{r}"))
            print(f"round {r}: ours {ours[-1]:.3f} s/step, bare TRL {bare[-1]:.3f} s/step", file=sys.stderr)
    o, b = min(ours), min(bare)
    steps = args.steps - 1
    print(
        f"ours (grpo.train, rollout engine): {o:.3f} s/step (best of {args.rounds} runs; median of {steps} steps each)"
    )
    print(
        f"bare TRL GRPOTrainer:              {b:.3f} s/step (best of {args.rounds} runs; median of {steps} steps each)"
    )
    print(
        f"median over runs: ours {statistics.median(ours):.3f}, bare TRL {statistics.median(bare):.3f} s/step"
    )
    print(f"ratio: {o / b:.3f}")


if __name__ == "__main__":
    main()
