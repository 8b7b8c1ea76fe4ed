"""KV-cache reuse across turns: 3-turn alphabet_sort rollouts per second with each conversation's
cache kept between its turns (the hf backend's default) against encoding the whole conversation
again every turn (generation.reuse_kv_cache=false).

Both sides run the same engine, model, rows and seeded sampling in this process; the rollouts
are checked to be token for token the same. Each round runs both (alternating which goes first);
the ratio is the median of the per-round ratios (no-reuse seconds over reuse seconds), with the
min-max. Generated tokens per second are medians too.

    python benchmarks/kv_reuse.py [--model tiny|small] [--prompts 8] [--rollouts 4] [--rounds 5]
                                  [--max-tokens-per-turn 64] [--threads 1]

Last line: `ratio: X`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens-per-turn", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation.base import Sampling
    from grpo.generation.hf import HFBackend
    from grpo.models import load_policy
    from grpo.rollout import run_rollouts

    cfg = load_settings(["+env=alphabet_sort", f"model={args.model}", "env.min_turns=3", "env.max_turns=3"])
    env = build_env(cfg.env, cfg.language)
    model, tokenizer = load_policy(cfg.model)
    rows = env.rows("eval", args.prompts)
    sampling = Sampling(temperature=1.0, top_p=1.0, max_tokens_per_turn=args.max_tokens_per_turn, seed=0)
    backends = {
        "reuse": HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs),
        "no reuse": HFBackend(
            model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs, reuse_kv_cache=False
        ),
    }

    def run(name: str) -> tuple[float, list]:
        start = time.perf_counter()
        rollouts = run_rollouts(
            env,
            rows,
            backends[name],
            rollouts_per_row=args.rollouts,
            sampling=sampling,
            max_completion_tokens=2048,
        )
        return time.perf_counter() - start, rollouts

    run("reuse")  # warm-up
    ratios, speed = [], {name: [] for name in backends}
    for r in range(args.rounds):
        order = ["reuse", "no reuse"] if r % 2 == 0 else ["no reuse", "reuse"]
        seconds, episodes = {}, {}
        for name in order:
            seconds[name], episodes[name] = run(name)
        for a, b in zip(episodes["reuse"], episodes["no reuse"], strict=True):
            assert a.completion_ids == b.completion_ids, "reuse changed the sampled tokens"
        generated = sum(sum(e.env_mask) for e in episodes["reuse"])
        for name in backends:
            speed[name].append(generated / seconds[name])
        ratios.append(seconds["no reuse"] / seconds["reuse"])
        turns = statistics.fmean(e.num_turns for e in episodes["reuse"])
        print(
            f"round {r + 1}: reuse {seconds['reuse']:.2f} s, no reuse {seconds['no reuse']:.2f} s, "
            f"ratio {ratios[-1]:.2f} ({len(episodes['reuse'])} episodes, {turns:.1f} turns, {generated} tokens)",
            flush=True,
        )
    for name in backends:
        print(f"{name:>9}: {statistics.median(speed[name]):,.0f} generated tokens/s")
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
