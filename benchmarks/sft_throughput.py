"""How much faster is padding-free SFT (sft.padding_free=true, the default) than padded SFT, on CPU?

Both sides are the SFT stage's own TRL SFTTrainer (grpo.sft.train.build_sft_trainer, under the
stage's attention switch) on a recipe's data, from the same initial weights, with the same seed and
so the same micro-batches of the same conversations:

    padded        sft.padding_free=false: every conversation a row, padded to the batch's longest
    padding-free  sft.padding_free=true: the batch's conversations back to back in one row, the
                  attention kept per conversation (grpo/models/packed_attention.py)

Each round trains STEPS optimizer steps on each side (which side goes first alternates) and times
`trainer.train()`; the ratio is the median over rounds of padded seconds / padding-free seconds
(= the ratio of real tokens per second, since both sides train the same tokens), with the min-max.

    python benchmarks/sft_throughput.py [ROUNDS] [STEPS] [overrides ...]
    python benchmarks/sft_throughput.py 5 20 +experiment=alphabet_sort_multilingual

Default data: +experiment=alphabet_sort_cpu (English one-turn alphabet-sort, model=small, batch 32).
GRPO_BENCH_THREADS=N sets torch's thread count (default: torch's, one per core).
Last line: `ratio: X`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(rounds: int, steps: int, overrides: list[str]) -> None:
    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.models import load_policy
    from grpo.sft.data import env_demonstrations
    from grpo.sft.train import _attention_for, _quiet_progress_bars, build_sft_trainer, prepare_examples

    if os.environ.get("GRPO_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["GRPO_BENCH_THREADS"]))
    if not any(o.startswith("+experiment=") for o in overrides):
        overrides = ["+experiment=alphabet_sort_cpu", *overrides]
    base = load_settings([*overrides, "tracking=none", f"sft.max_steps={steps}", "sft.logging_steps=100000"])
    env = build_env(base.env, base.language)
    model, tokenizer = load_policy(base.model)
    n = base.sft.batch_size * base.sft.gradient_accumulation_steps * steps
    examples = prepare_examples(base, env, env_demonstrations(env, n), model, tokenizer)
    tokens = sum(len(e.input_ids) for e in examples)
    initial = copy.deepcopy(model.state_dict())
    sides = {
        name: dataclasses.replace(base, sft=dataclasses.replace(base.sft, padding_free=free))
        for name, free in (("padded", False), ("padding-free", True))
    }

    def run(name: str, tmp: Path) -> float:
        model.load_state_dict(initial)
        settings = sides[name]
        with _quiet_progress_bars(), _attention_for(settings, model):
            trainer = build_sft_trainer(settings, model, tokenizer, examples, tmp / name)
            return float(trainer.train().metrics["train_runtime"])

    seconds: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="grpo-sft-throughput-") as tmp:
        run("padding-free", Path(tmp))  # warm-up (allocator, first-call costs)
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                seconds[name].append(run(name, Path(tmp)))
            print(
                f"round {r + 1}: padded {seconds['padded'][-1]:.1f} s, padding-free "
                f"{seconds['padding-free'][-1]:.1f} s",
                flush=True,
            )
    ratios = [a / b for a, b in zip(seconds["padded"], seconds["padding-free"], strict=True)]
    print(
        f"\nSFT throughput: {overrides[0]} {base.model.name}, {steps} steps of {base.sft.batch_size} "
        f"conversations ({tokens} real tokens, {tokens / len(examples):.0f} per conversation), "
        f"{torch.get_num_threads()} torch thread(s), {rounds} paired rounds"
    )
    for name in sides:
        median = statistics.median(seconds[name])
        print(
            f"{name:<13} {median / steps:.3f} s/step  {tokens / median:8.0f} real tokens/s (median of rounds)"
        )
    print(f"padded / padding-free seconds per round: {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    numbers = [a for a in args[:2] if a.isdigit()]
    main(
        int(numbers[0]) if numbers else 5,
        int(numbers[1]) if len(numbers) > 1 else 20,
        args[len(numbers) :],
    )
