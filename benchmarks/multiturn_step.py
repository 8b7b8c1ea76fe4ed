"""Seconds per GRPO training step on multi-turn alphabet-sort: batched rollouts vs one conversation
at a time, side by side.

Both sides run grpo.train.trainer.train on the tiny model with the same config (16 completions per step =
4 prompts x 4, three turns per episode, up to 128 new tokens per model turn: the default
generation.max_tokens_per_turn); the only difference is the hf backend's
`generation.batch_size`: null sends every active conversation of a turn to ONE generate call (and
keeps each conversation's KV cache between its turns), 1 generates the conversations one after
the other. Each round trains once per side, alternating which goes first; a run's cost is its
median seconds per optimizer step (first step excluded), and the ratio is the median of the
per-round ratios, with the min-max. The sides sample different tokens, so the same ratio per
completion token is printed too (the tiny random model runs every turn to its limit: the counts
agree). A measured bound, not a target (docs/benchmarks.md, Multi-turn step): about 4.2-4.6, set by the
loss and backward both sides share.

    python benchmarks/multiturn_step.py [--steps 4] [--rounds 3] [--no-reuse]

Last line: `ratio: X` (one-at-a-time s/step / batched s/step).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
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


def seconds_per_step(cfg, env, out: Path) -> tuple[float, float]:
    """(median seconds per optimizer step, first excluded; mean completion tokens per step)."""
    from step_timer import StepTimer

    from grpo.models import load_policy
    from grpo.train.trainer import train

    timer = StepTimer()
    model, tokenizer = load_policy(cfg.model)
    result = train(cfg, env, out, model=model, tokenizer=tokenizer, callbacks=[timer])
    per_step = timer.seconds_per_step()
    # completion tokens of a step (model turns and the env's turns between them), steps 2+
    lengths = [h["completions/mean_length"] for h in result.log_history if "completions/mean_length" in h]
    tokens = statistics.fmean(lengths[1:] or lengths) * cfg.trainer.per_device_batch_completions
    return per_step, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=3, help="paired (batched, one-at-a-time) runs")
    parser.add_argument("--no-reuse", action="store_true", help="batched side without KV-cache reuse")
    args = parser.parse_args()

    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env

    torch.set_num_threads(1)  # a tiny model; identical for both sides
    steps = f"trainer.max_steps={args.steps}"
    reuse = f"generation.reuse_kv_cache={not args.no_reuse}"
    cfgs = {
        "batched": load_settings([*COMMON, steps, "generation.batch_size=null", reuse]),
        "one at a time": load_settings([*COMMON, steps, "generation.batch_size=1"]),
    }
    env = build_env(cfgs["batched"].env, cfgs["batched"].language)
    ratios, token_ratios, seconds, tokens = [], [], {name: [] for name in cfgs}, {name: [] for name in cfgs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(cfgs) if r % 2 == 0 else list(reversed(cfgs))
            for name in order:
                per_step, step_tokens = seconds_per_step(
                    cfgs[name], env, Path(tmp) / f"{name}{r}".replace(" ", "_")
                )
                seconds[name].append(per_step)
                tokens[name].append(step_tokens)
            ratios.append(seconds["one at a time"][-1] / seconds["batched"][-1])
            # per completion token: the sides sample different tokens (equal counts when every
            # turn runs to its limit, as the tiny random model's do)
            token_ratios.append(
                (seconds["one at a time"][-1] / tokens["one at a time"][-1])
                / (seconds["batched"][-1] / tokens["batched"][-1])
            )
            print(
                f"round {r + 1}: batched {seconds['batched'][-1]:.3f} s/step ({tokens['batched'][-1]:.0f} tokens), "
                f"one at a time {seconds['one at a time'][-1]:.3f} s/step ({tokens['one at a time'][-1]:.0f} tokens), "
                f"ratio {ratios[-1]:.2f}, per token {token_ratios[-1]:.2f}",
                file=sys.stderr,
            )
    label = "batched (one generate call per turn" + (
        ")" if args.no_reuse else ", KV cache kept across turns)"
    )
    for name, text in (("batched", label), ("one at a time", "one conversation at a time")):
        print(
            f"{text}: {statistics.median(seconds[name]):.3f} s/step, {statistics.median(tokens[name]):.0f} "
            f"completion tokens/step (medians of {args.rounds} runs)"
        )
    print(
        f"per completion token: {statistics.median(token_ratios):.2f} (rounds {min(token_ratios):.2f}-{max(token_ratios):.2f})"
    )
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
