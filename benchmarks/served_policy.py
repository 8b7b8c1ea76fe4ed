"""The served-policy path of a verifiers v1 environment against grpo's in-process rollout engine:
model tokens per second on the same episodes.

- served: the v1 taskset of the tests (tests/v1_envs/vf_grpo_sortera: Swedish, two model turns, a
  scripted user) through `+env=verifiers` — verifiers runs each episode (grpo's chat harness, its
  interception server, its training client rendering to token ids) and the policy answers on
  grpo's policy server (/inference/v1/generate, concurrent requests batched);
- in-process: the same prompts and the same scripted user turn as a grpo Environment, through
  grpo.rollout.run_rollouts (one generate call per turn for every conversation, KV cache kept
  between turns).

Both sides use one HFBackend on the same loaded model, the same rows, rollouts per row, sampling
settings and per-turn token limit, in this process. Each round runs both (alternating which goes
first); the ratio is the median of the per-round ratios of model tokens/s (served over
in-process), with the min-max. Sampling is seeded on both sides but with different streams, so
the token counts differ a little; tokens/s accounts for that.

    python benchmarks/served_policy.py [--model small_alphabet_sort] [--prompts 8] [--rollouts 4]
                                       [--rounds 3] [--max-tokens-per-turn 48] [--threads 1]

Last line: `ratio: X` (target >= 0.8).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "v1_envs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small_alphabet_sort")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens-per-turn", type=int, default=48)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import vf_grpo_sortera as sortera

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.envs.base import Environment, Row
    from grpo.generation import make_backend
    from grpo.generation.base import Sampling
    from grpo.rollout import run_rollouts

    settings = load_settings(
        [
            "+env=verifiers",
            "env.id=vf-grpo-sortera",
            "language=sv",
            f"model={args.model}",
            f"env.args={{num_tasks: {args.prompts}}}",
        ]
    )
    served_env = build_env(settings.env, settings.language)
    rows = served_env.rows("eval", args.prompts)

    class ScriptedUser(Environment):
        """The taskset's episode as a grpo env: the same prompt, the same user turn, two model turns."""

        max_turns = 2
        multi_turn = True

        def env_response(self, messages, state, row: Row):
            if sum(m["role"] == "assistant" for m in messages) >= 2:
                return None
            return [
                {"role": "user", "content": sortera.FOLLOW_UP.format(extra=" och ".join(row.info["extra"]))}
            ]

    engine_env = ScriptedUser(language="sv", name="sortera")
    engine_rows = [
        Row(r.id, r.prompt, {**r.info, "extra": list(served_env._task(r)[0].data.extra)}, r.language)
        for r in rows
    ]
    backend = make_backend(settings.generation, None, None, settings.model)
    sampling = Sampling(temperature=1.0, top_p=1.0, max_tokens_per_turn=args.max_tokens_per_turn, seed=0)

    def run(name: str) -> tuple[float, int, float]:
        env, batch = (served_env, rows) if name == "served" else (engine_env, engine_rows)
        start = time.perf_counter()
        rollouts = run_rollouts(
            env, batch, backend, rollouts_per_row=args.rollouts, sampling=sampling, max_completion_tokens=1024
        )
        seconds = time.perf_counter() - start
        assert all(r.num_turns == 2 for r in rollouts), "an episode did not take its two turns"
        return (
            seconds,
            sum(sum(r.env_mask) for r in rollouts),
            statistics.fmean(r.num_turns for r in rollouts),
        )

    for name in ("served", "in-process"):
        run(name)  # warm-up (the server starts, the renderer loads its tokenizer)
    ratios, speed = [], {"served": [], "in-process": []}
    for r in range(args.rounds):
        order = ["served", "in-process"] if r % 2 == 0 else ["in-process", "served"]
        seen = {}
        for name in order:
            seconds, tokens, _ = seen[name] = run(name)
            speed[name].append(tokens / seconds)
        ratios.append(speed["served"][-1] / speed["in-process"][-1])
        print(
            f"round {r + 1}: "
            + ", ".join(f"{n} {seen[n][0]:.2f} s {seen[n][1]} tokens" for n in ("served", "in-process"))
            + f", ratio {ratios[-1]:.2f}",
            flush=True,
        )
    batcher = served_env._server.batcher
    print(
        f"server: {batcher.jobs} requests in {batcher.calls} generate calls ({batcher.jobs / batcher.calls:.1f} per call)"
    )
    for name in speed:
        print(f"{name:>10}: {statistics.median(speed[name]):,.0f} model tokens/s")
    print(f"ratio: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    served_env.close()


if __name__ == "__main__":
    main()
