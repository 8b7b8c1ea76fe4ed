"""Batched rollout engine vs one conversation at a time, batching alone: multi-turn alphabet_sort,
model tokens generated per second.

    python benchmarks/rollout_batching.py [--prompts 8] [--rollouts 8] [--max-tokens-per-turn 64]
                                          [--rounds 3] [--threads 1]

Both modes run the same engine, model (model=tiny), rows and sampling settings in this process;
"batched" makes one generate() call per turn over every active conversation, "sequential" sets the
hf backend's batch_size=1 (one generate() call per conversation per turn). NEITHER keeps a
conversation's KV cache between its turns (reuse_kv_cache=false on both): only a batched call can
keep one, so leaving it on would mix batching with cache reuse; benchmarks/kv_reuse.py measures
reuse alone. The completion budget is large enough for every episode to play all its turns.

The two modes draw their tokens differently (one seeded stream per generate() call), so they do
not generate the same number of tokens: each side's rate is model tokens generated per second
(env turns not counted), and rollouts/s is shown beside it. Each round runs both modes,
alternating which goes first; prints a table of medians, then `ratio: X` (batched tokens/s over
sequential tokens/s: the median of the per-round ratios, with the min-max) as the last line.

Both modes use ONE torch thread by default: the tiny model's matrices are too small to gain from
splitting, and on a busy machine (more runnable processes than cores) two OpenMP threads waiting
for each other make every batched op 10x slower while the sequential mode's small ops stay
single-threaded; one thread is the conservative setting for the batched side. --threads 0 keeps
torch's default.
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
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--max-tokens-per-turn", type=int, default=64)
    parser.add_argument("--max-completion-tokens", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="paired (batched, sequential) runs")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads for both modes; 0 = torch's default"
    )
    args = parser.parse_args()

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation.hf import HFBackend
    from grpo.models import load_policy
    from grpo.rollout import Sampling, run_rollouts

    cfg = load_settings(["+env=alphabet_sort"])
    env = build_env(cfg.env, cfg.language)
    model, tokenizer = load_policy(cfg.model)
    rows = env.rows("eval", args.prompts)
    sampling = Sampling(
        temperature=1.0, top_p=1.0, max_tokens_per_turn=args.max_tokens_per_turn, seed=args.seed
    )
    template = cfg.model.chat_template_kwargs
    modes = {  # batching alone: no KV cache kept between turns on either side
        "batched": HFBackend(model, tokenizer, chat_template_kwargs=template, reuse_kv_cache=False),
        "sequential": HFBackend(
            model, tokenizer, batch_size=1, chat_template_kwargs=template, reuse_kv_cache=False
        ),
    }

    def run(backend: HFBackend, rows_: list, rollouts: int) -> tuple[float, list]:
        start = time.perf_counter()
        out = run_rollouts(
            env,
            rows_,
            backend,
            rollouts_per_row=rollouts,
            sampling=sampling,
            max_completion_tokens=args.max_completion_tokens,
        )
        return time.perf_counter() - start, out

    for backend in modes.values():  # warm-up: first-call allocations and lazy initialisation
        run(backend, rows[:1], 2)

    runs: dict[str, list[tuple[float, int, int, int]]] = {name: [] for name in modes}
    ratios = []
    for r in range(args.rounds):
        for name in list(modes) if r % 2 == 0 else list(reversed(modes)):
            seconds, rollouts = run(modes[name], rows, args.rollouts)
            turns = sum(x.num_turns for x in rollouts)
            tokens = sum(sum(x.env_mask) for x in rollouts)
            runs[name].append((seconds, len(rollouts), turns, tokens))
        # model tokens per second: the two sides sample different tokens
        (b_s, _, _, b_tok), (s_s, _, _, s_tok) = runs["batched"][-1], runs["sequential"][-1]
        ratios.append((b_tok / b_s) / (s_tok / s_s))

    print(
        f"alphabet_sort, model=tiny, {args.prompts} prompts x {args.rollouts} rollouts, "
        f"max_tokens_per_turn={args.max_tokens_per_turn}, max_completion_tokens={args.max_completion_tokens}, "
        f"torch threads={torch.get_num_threads()}, no KV reuse on either side, medians of {args.rounds} rounds"
    )
    print(
        f"{'mode':<12}{'seconds':>10}{'rollouts':>10}{'turns':>8}{'model tok':>11}{'tok/s':>9}{'rollouts/s':>12}"
    )
    for name, results in runs.items():
        seconds = statistics.median(x[0] for x in results)
        tokens = statistics.median(x[3] for x in results)
        rate = statistics.median(x[3] / x[0] for x in results)
        _, n, turns, _ = results[-1]
        print(f"{name:<12}{seconds:>10.2f}{n:>10}{turns:>8}{tokens:>11.0f}{rate:>9.0f}{n / seconds:>12.2f}")
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
