"""Training overhead of our code path over a bare TRL GRPOTrainer script, side by side.

Same tiny model weights, same single-turn environment (char_target) and reward, same GRPOConfig:
- ours: grpo.train.trainer.train (what `python -m grpo ... stages=[train]` runs): the env's rows as the
  dataset, rollout_func -> the batched rollout engine -> the hf backend, rubric reward adapters,
  checkpoint marker and progress callbacks;
- bare TRL: GRPOTrainer with the same prompts and a plain reward function, TRL generating with
  its own model.generate.
Each round trains once per side in one process, alternating which goes first; a run's cost is
the median seconds between consecutive optimizer steps (the first step, with its warm-up,
excluded), and the ratio is the median of the per-round ratios, with the min-max (a pair shares
the machine's load of its moment). Target: ratio <= 1.05.

    python benchmarks/overhead_vs_trl.py [--steps 16] [--rounds 5]

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
    from grpo.train.trainer import train

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
    from grpo.train.grpo_args import grpo_config_kwargs

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
    parser.add_argument("--rounds", type=int, default=5, help="paired (ours, TRL) runs")
    args = parser.parse_args()

    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env

    torch.set_num_threads(1)  # a tiny model; identical for both sides
    cfg = load_settings([*COMMON, f"trainer.max_steps={args.steps}"])
    env = build_env(cfg.env, cfg.language)
    sides = {"ours": run_ours, "bare TRL": run_bare_trl}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
                seconds[name].append(sides[name](cfg, env, Path(tmp) / f"{name.replace(' ', '_')}{r}"))
            ratios.append(seconds["ours"][-1] / seconds["bare TRL"][-1])
            print(
                f"round {r + 1}: ours {seconds['ours'][-1]:.3f} s/step, bare TRL {seconds['bare TRL'][-1]:.3f} s/step, "
                f"ratio {ratios[-1]:.3f}",
                file=sys.stderr,
            )
    steps = args.steps - 1
    for name, label in (
        ("ours", "ours (grpo.train.trainer, rollout engine)"),
        ("bare TRL", "bare TRL GRPOTrainer"),
    ):
        print(
            f"{label}: {statistics.median(seconds[name]):.3f} s/step (median of {args.rounds} runs of {steps} steps)"
        )
    print(f"ratio: {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
