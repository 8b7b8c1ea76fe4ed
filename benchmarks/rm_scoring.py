"""Reward-model scoring against its compute floor, and batched against one sequence at a time.

Builds the offline tiny reward model (random weights, language tag token), saves it with its
calibration as the reward_model stage would, and loads it through the GRPO scorer
(grpo.rewards.learned.RewardModelScorer). Two measurements, each in paired rounds that alternate
which side goes first; a ratio is the median of the per-round ratios, with the min-max:

1. **floor_ratio** on 256 alphabet_sort episodes (reference and corrupted, 1-3 turns, ~80-900
   tokens): the scorer's batched path (render, tokenize, length-bucketed batches, forward,
   normalise) against the compute floor: the same backbone's bare forward (no score head, no
   Python around it) over the same tokens without padding, each sequence at its own length. It is
   measured in each round on full padding-free batches of real tokens at several widths and
   sizes; the cheapest per-row seconds of each width, fit as a + b*w + c*w^2, summed over the
   sequences' lengths give the floor (the time reports the floor, not the calibration's time).
   floor seconds / scorer seconds = the scorer's throughput as a share of the floor's. Target >= 0.8.
2. **short ratio** on 256 short sequences (a one-line prompt and a one-turn answer of 2-4 names,
   <= 64 tokens): one sequence per forward pass against batches. Target >= 5.

Both paths must give the same scores (checked). Torch threads: --threads (1 by default, stable on
a shared machine).

    python benchmarks/rm_scoring.py [--rounds 5] [--threads 1]
Last line: `floor_ratio: X`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
COMPLETIONS = 256
MAX_SHORT_TOKENS = 64


def build_checkpoint(out: Path, pairs: list) -> None:
    """A tiny RM dir with real calibration statistics (what the reward_model stage writes)."""
    from grpo.compose import load_settings
    from grpo.reward_model.backbone import RMMeta, build_backbone, save_reward_model
    from grpo.reward_model.calibration import Calibration
    from grpo.reward_model.scoring import SequenceEncoder, score_ids

    cfg = load_settings(["+env=alphabet_sort", "reward_model=learned"])
    model, tokenizer = build_backbone(
        cfg.reward_model.backbone, ["en"], tag_token=True, per_language_heads=False
    )
    encoder = SequenceEncoder(tokenizer, cfg.reward_model.backbone.max_length, tag_token=True)
    completions = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    ids = encoder.encode([p.prompt for p in pairs] * 2, completions, ["en"] * len(completions))
    scores = score_ids(model, ids, tokenizer.pad_token_id, 64)
    meta = RMMeta(languages=["en"], tag_token=True, per_language_heads=False, max_length=encoder.max_length)
    save_reward_model(model, tokenizer, meta, Calibration.fit(scores, ["en"] * len(scores)), out)


def episodes(env_args: list[str], n_pairs: int) -> tuple[list, list, list]:
    """Prompts and completions of alphabet_sort: each pair's reference and corrupted episode."""
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.reward_model.synthetic import env_pairs

    cfg = load_settings(["+env=alphabet_sort", *env_args])
    env = build_env(cfg.env, cfg.language)
    pairs = env_pairs(env, n_pairs, severity=0.5, corruptions=["swap", "drop", "duplicate", "format"], seed=0)
    return pairs, [p.prompt for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs]


# padding-free batches at these widths and token counts measure the backbone's cost per sequence
# of a given length (the cheapest batch shape of each width counts)
FLOOR_WIDTHS = (32, 64, 128, 256, 512, 1024)
FLOOR_TOKENS = (2048, 4096, 8192, 16384)


def floor_model(model: Any, sequences: list[list[int]]) -> Callable[[], float]:
    """The compute floor of `sequences`, measured: the bare backbone (no score head, no Python
    around it) on full, padding-free batches of real tokens at FLOOR_WIDTHS x FLOOR_TOKENS; the
    cheapest seconds per row of each width fit a + b*w + c*w^2 (per-row work, the projections,
    attention), and the floor is that fit summed over the sequences' own lengths. Returns a
    function that measures it again (seconds)."""
    import numpy as np
    import torch

    from grpo.reward_model.backbone import inner_model

    backbone = inner_model(model).model  # the transformer under the score head
    flat = torch.tensor([t for seq in sequences for t in seq], dtype=torch.long)
    shapes = [(w, max(1, n // w)) for w in FLOOR_WIDTHS for n in FLOOR_TOKENS]
    batches = [(w, flat.repeat(r * w // len(flat) + 1)[: r * w].view(r, w)) for w, r in shapes]
    lengths = np.array([len(s) for s in sequences], dtype=float)

    def run() -> float:
        per_row = dict.fromkeys(FLOOR_WIDTHS, float("inf"))
        with torch.inference_mode():
            for width, batch in batches:
                start = time.perf_counter()
                backbone(input_ids=batch, use_cache=False)
                per_row[width] = min(per_row[width], (time.perf_counter() - start) / len(batch))
        w = np.array(FLOOR_WIDTHS, dtype=float)
        design = np.stack([np.ones_like(w), w, w * w], axis=1)
        coef, *_ = np.linalg.lstsq(design, np.array([per_row[x] for x in FLOOR_WIDTHS]), rcond=None)
        return float(np.sum(coef[0] + coef[1] * lengths + coef[2] * lengths**2))

    return run


def timed(fn: Callable[[], Any]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


def paired(
    name_a: str, run_a: Callable[[], float], name_b: str, run_b: Callable[[], float], rounds: int
) -> list[float]:
    """Per-round ratios (seconds of b over seconds of a; each function returns its seconds),
    alternating which side goes first."""
    ratios = []
    for r in range(rounds):
        times = {}
        for name, fn in (
            ((name_a, run_a), (name_b, run_b)) if r % 2 == 0 else ((name_b, run_b), (name_a, run_a))
        ):
            times[name] = fn()
        ratios.append(times[name_b] / times[name_a])
        print(
            f"  round {r + 1}: {name_a} {times[name_a]:.3f} s, {name_b} {times[name_b]:.3f} s, ratio {ratios[-1]:.2f}",
            flush=True,
        )
    return ratios


def summary(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from grpo.rewards.learned import RewardModelScorer

    pairs, prompts, completions = episodes([], COMPLETIONS // 2)
    languages = ["en"] * len(completions)
    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(Path(tmp), pairs)
        batched = RewardModelScorer(tmp, batch_size=64, device="cpu")
        single = RewardModelScorer(tmp, batch_size=1, device="cpu")

        # 1. the batched scorer against the compute floor
        ids = batched.encoder.encode(prompts, completions, languages)
        lengths = [len(s) for s in ids]
        print(
            f"1. {len(ids)} alphabet_sort episodes, {min(lengths)}-{max(lengths)} tokens "
            f"(mean {statistics.fmean(lengths):.0f}), {args.threads} thread(s)"
        )
        floor = floor_model(batched.rm.model, ids)
        floor()  # warm-up
        floor_ratios = paired(
            "scorer",
            timed(lambda: batched.normalized(prompts, completions, languages)),
            "floor",
            floor,
            args.rounds,
        )

        # 2. short sequences: batched against one at a time
        _, _, short_completions = episodes(["env.max_turns=1", "env.max_names_per_turn=4"], COMPLETIONS // 2)
        short_prompts = [[{"role": "user", "content": "Sort these names."}]] * len(short_completions)
        short_ids = batched.encoder.encode(short_prompts, short_completions, languages)
        keep = [i for i, s in enumerate(short_ids) if len(s) <= MAX_SHORT_TOKENS]
        short_prompts = [short_prompts[i] for i in keep]
        short_completions = [short_completions[i] for i in keep]
        short_languages = ["en"] * len(keep)
        short_lengths = [len(short_ids[i]) for i in keep]
        print(
            f"2. {len(keep)} short sequences, {min(short_lengths)}-{max(short_lengths)} tokens "
            f"(mean {statistics.fmean(short_lengths):.0f})"
        )
        results: dict[str, list] = {}

        def run_batched() -> None:
            results["batched"] = batched.normalized(short_prompts, short_completions, short_languages)

        def run_single() -> None:
            results["single"] = [
                single.normalized([p], [c], [lang])[0]
                for p, c, lang in zip(short_prompts, short_completions, short_languages, strict=True)
            ]

        short_ratios = paired("batched", timed(run_batched), "one at a time", timed(run_single), args.rounds)
        diff = max(abs(a - b) for a, b in zip(results["batched"], results["single"], strict=True))
        assert math.isfinite(diff) and diff < 1e-3, f"batched and single scores differ by {diff}"
        print(f"max |batched - single| score difference: {diff:.2e}")
        # how far the batched path is from the floor on these short sequences too
        short_floor = floor_model(batched.rm.model, [short_ids[i] for i in keep])
        short_floor_ratios = paired("batched", timed(run_batched), "floor", short_floor, args.rounds)
        print(f"short floor ratio (floor / batched): {summary(short_floor_ratios)}")
        print(f"short ratio (one at a time / batched): {summary(short_ratios)}  (target >= 5)")
        print(f"floor_ratio: {summary(floor_ratios)}")


if __name__ == "__main__":
    main()
