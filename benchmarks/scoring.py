"""alphabet_sort scoring throughput: rollouts scored per second on one core.

Scores realistic 3-turn rollouts (the reference completion, plus perturbed copies: two names
swapped, a name dropped, a typo, a missing `// new name!`, upper-cased, a missing tag, a turn left
unanswered) through the env's rubric, side by side with a plain re.findall + difflib scorer of the
same spec, and checks both give the same rewards. Target: >= 10,000 rollouts/s.

    python benchmarks/scoring.py [--rows 200] [--seconds 6]
Last line: `rollouts_per_s: X`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grpo.compose import load_settings  # noqa: E402
from grpo.envs import build_env  # noqa: E402
from grpo.envs.alphabet_sort import AlphabetSortEnv  # noqa: E402
from grpo.envs.base import Row  # noqa: E402


def perturbations(env: AlphabetSortEnv, row: Row, rng: random.Random) -> list[list[dict[str, str]]]:
    """The reference rollout and realistic imperfect variants of it."""
    perfect = env.reference_completion(row)

    def edit_last_turn(edit: Callable[[list[str]], list[str]]) -> list[dict[str, str]]:
        out = [dict(m) for m in perfect]
        last = out[-1]["content"].split("\n")
        out[-1]["content"] = "\n".join([last[0], *edit(last[1:-1]), last[-1]])
        return out

    def swap(lines: list[str]) -> list[str]:
        if len(lines) < 2:
            return lines
        i = rng.randrange(len(lines) - 1)
        lines = list(lines)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        return lines

    def typo(lines: list[str]) -> list[str]:
        i = rng.randrange(len(lines))
        word = lines[i]
        j = rng.randrange(len(word))
        return lines[:i] + [word[:j] + "x" + word[j + 1 :]] + lines[i + 1 :]

    upper = [dict(m, content=m["content"].upper()) if m["role"] == "assistant" else m for m in perfect]
    no_tag = [dict(m) for m in perfect]
    no_tag[0]["content"] = no_tag[0]["content"].replace("alphabetical_sorted>", "sorted>")
    return [
        perfect,
        edit_last_turn(swap),
        edit_last_turn(lambda lines: lines[:-1]),
        edit_last_turn(typo),
        edit_last_turn(lambda lines: [line.replace(" // new name!", "") for line in lines]),
        upper,
        no_tag,
        perfect[:-2],
    ]


def plain_reward(completion: list[dict[str, Any]], info: dict[str, Any], power: float) -> float:
    """The spec written the obvious way: the baseline (and a cross-check) for our scorer."""
    answers = [m["content"] for m in completion if m["role"] == "assistant"]
    total = 0.0
    for turn in range(1, info["num_turns"] + 1):
        if turn > len(answers):
            continue
        tag = "alphabetical_sorted" if turn == 1 else "combined_alphabetical_sorted"
        blocks = re.findall(f"<{tag}>(.*?)</{tag}>", answers[turn - 1], re.DOTALL)
        if not blocks:
            continue
        pred = [line.strip().lower() for line in blocks[-1].split("\n") if line.strip()]
        if not pred:
            continue
        exp = [line.strip().lower() for line in info["ground_truths"][turn - 1]]
        total += difflib.SequenceMatcher(None, "\n".join(pred), "\n".join(exp)).ratio() ** power
    return total / info["num_turns"]


def rates(fns: list[Callable[[], None]], n: int, seconds: float) -> tuple[list[float], list[float]]:
    """Rollouts per second of each fn (each scores n rollouts), as the median over rounds that run
    every fn once, alternating which goes first, for `seconds` (at least 3 rounds); and the
    per-round ratios of the first fn's rate over the second's."""
    rounds: list[list[float]] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rounds) < 3:
        rate = [0.0] * len(fns)
        order = range(len(fns)) if len(rounds) % 2 == 0 else reversed(range(len(fns)))
        for k in order:
            start = time.perf_counter()
            fns[k]()
            rate[k] = n / (time.perf_counter() - start)
        rounds.append(rate)
    medians = [statistics.median(r[k] for r in rounds) for k in range(len(fns))]
    return medians, [r[0] / r[1] for r in rounds]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    cfg = load_settings(["+env=alphabet_sort", "env.min_turns=3", f"env.num_eval_examples={args.rows}"])
    env = build_env(cfg.env, cfg.language)
    rng = random.Random(0)
    rollouts = [(row, c) for row in env.rows("eval") for c in perturbations(env, row, rng)]
    ours = [env.score(row, c)["alphabet_sort_reward"] for row, c in rollouts]
    plain = [plain_reward(c, row.info, env.similarity_power) for row, c in rollouts]
    mismatches = sum(a != b for a, b in zip(ours, plain, strict=True))
    if mismatches:
        raise SystemExit(f"scorer disagrees with the plain spec implementation on {mismatches} rollouts")

    def score_ours() -> None:
        for row, c in rollouts:
            env.score(row, c)

    def score_plain() -> None:
        for row, c in rollouts:
            plain_reward(c, row.info, env.similarity_power)

    n = len(rollouts)
    (ours_rate, plain_rate), ratios = rates([score_ours, score_plain], n, args.seconds)
    print(
        f"rollouts: {n} (3-turn rows: {args.rows}, {n // args.rows} variants each), mean reward {sum(ours) / n:.4f}"
    )
    print(f"plain re.findall + difflib scorer: {plain_rate:,.0f} rollouts/s (median of {len(ratios)} rounds)")
    print(
        f"grpo AlphabetSortEnv.score (rubric): {ours_rate:,.0f} rollouts/s  "
        f"({statistics.median(ratios):.2f}x, rounds {min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(f"rollouts_per_s: {ours_rate:.0f}")


if __name__ == "__main__":
    main()
