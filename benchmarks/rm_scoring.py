"""Reward-model scoring throughput: batched vs one sequence at a time, tiny backbone.

Builds the offline tiny reward model (random weights, language tag token), saves it with its
calibration as the reward_model stage would, loads it through the GRPO scorer
(grpo.rewards.learned.RewardModelScorer) and scores 256 completions of alphabet_sort (reference
episodes and corrupted ones, 1-3 turns each): once in length-sorted batches, once one sequence per
forward pass, side by side in this process (best of --repeats). Checks both give the same scores.
Target: ratio >= 5.

    python benchmarks/rm_scoring.py [--completions 256] [--batch-size 64] [--repeats 3] [--threads 1]
Last line: `ratio: X`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def build_checkpoint(out: Path, pairs: list) -> None:
    """A tiny RM dir with real calibration statistics (what the reward_model stage writes)."""
    from grpo.cli import load_settings
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64, help="completions per forward pass (batched)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from grpo.cli import load_settings
    from grpo.envs import build_env
    from grpo.reward_model.synthetic import env_pairs
    from grpo.rewards.learned import RewardModelScorer

    cfg = load_settings(["+env=alphabet_sort"])
    env = build_env(cfg.env, cfg.language)
    pairs = env_pairs(
        env, args.completions // 2, severity=0.5, corruptions=["swap", "drop", "duplicate", "format"], seed=0
    )
    prompts = [p.prompt for p in pairs] * 2
    completions = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    languages = ["en"] * len(completions)

    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(Path(tmp), pairs)
        batched = RewardModelScorer(tmp, batch_size=args.batch_size, device="cpu")
        single = RewardModelScorer(tmp, batch_size=1, device="cpu")

        def run_batched() -> list:
            return batched.normalized(prompts, completions, languages)

        def run_single() -> list:
            return [
                single.normalized([p], [c], [lang])[0]
                for p, c, lang in zip(prompts, completions, languages, strict=True)
            ]

        lengths = [len(ids) for ids in batched.encoder.encode(prompts, completions, languages)]
        print(
            f"{len(completions)} completions, {min(lengths)}-{max(lengths)} tokens (mean {sum(lengths) / len(lengths):.0f}), "
            f"tiny backbone, {args.threads} thread(s)"
        )
        best = {"batched": float("inf"), "one at a time": float("inf")}
        results = {}
        for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
            for name, fn in (("batched", run_batched), ("one at a time", run_single)):
                start = time.perf_counter()
                results[name] = fn()
                best[name] = min(best[name], time.perf_counter() - start)
        diff = max(abs(a - b) for a, b in zip(results["batched"], results["one at a time"], strict=True))
        assert diff < 1e-3, f"batched and single scores differ by {diff}"
        for name, seconds in best.items():
            print(f"{name:>14}: {seconds:.3f} s  ({len(completions) / seconds:,.0f} completions/s)")
        print(f"max |batched - single| score difference: {diff:.2e}")
        print(f"ratio: {best['one at a time'] / best['batched']:.1f}")


if __name__ == "__main__":
    main()
