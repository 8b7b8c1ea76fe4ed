"""Does GRPO make the model better at alphabet-sort, on a CPU? Measured side by side in one run.

The recipe is conf/experiment/alphabet_sort_cpu.yaml (what `python -m grpo +experiment=alphabet_sort_cpu`
runs): a small offline model, a reduced alphabet-sort (same scoring code), an SFT warm start on
the env's own demonstrations, then GRPO. This script runs its pieces in one process, with fixed
seeds, and evaluates each policy on the SAME eval rollouts (the first eval.num_examples rows of the
eval split x eval.rollouts_per_example, seeded by eval.seed):

    random init                the untrained model
    after SFT                  the warm start
    after GRPO                 trainer.max_steps of GRPO from the SFT checkpoint
    control                    the same GRPO steps from the same checkpoint with optimizer.lr=0

The control isolates what GRPO's updates add (same rollouts, same time, no learning). Gains come
with a paired standard error over examples (each example's mean over its rollouts, GRPO minus
control).

    python benchmarks/learning_alphabet_sort.py [overrides ...]     # e.g. trainer.max_steps=40
    GRPO_BENCH_THREADS=1 python benchmarks/learning_alphabet_sort.py   # torch threads (default: torch's, one per core)

The thread count changes the order of float sums and so the whole trajectory: compare runs at the
same count. Measured here on 2 cores (2 threads): gain 0.0873 in 17.6 min (README "See it learn").

Last line: `gain: X` (mean reward after GRPO minus the control's).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def paired_gain(a: list[list[float]], b: list[list[float]]) -> tuple[float, float]:
    """Mean of a - b over examples (each example's mean over its rollouts) and its standard error."""
    diffs = [statistics.fmean(x) - statistics.fmean(y) for x, y in zip(a, b, strict=True)]
    sem = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
    return statistics.fmean(diffs), sem


def main(overrides: list[str]) -> None:
    import torch

    from grpo.cli.checks import check
    from grpo.compose import load_settings
    from grpo.config import ModelConfig
    from grpo.envs import build_env
    from grpo.evaluation.evaluator import evaluate
    from grpo.generation import make_backend
    from grpo.models import load_policy
    from grpo.sft.train import train_sft
    from grpo.train.trainer import train

    if os.environ.get("GRPO_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["GRPO_BENCH_THREADS"]))
    settings = load_settings(["+experiment=alphabet_sort_cpu", "tracking=none", *overrides])
    check(settings)
    settings = dataclasses.replace(settings, eval=dataclasses.replace(settings.eval, show_examples=False))
    env = build_env(settings.env, settings.language)
    out = Path(tempfile.mkdtemp(prefix="grpo-learning-"))
    results: dict[str, object] = {}
    seconds: dict[str, float] = {}

    def evaluation(label: str, model, tokenizer) -> None:
        backend = make_backend(settings.generation, model, tokenizer, settings.model)
        results[label] = evaluate(settings, env, backend, out / f"eval_{label}", label=label)

    start = time.perf_counter()
    model, tokenizer = load_policy(settings.model)
    evaluation("random", model, tokenizer)
    seconds["eval"] = time.perf_counter() - start

    start = time.perf_counter()
    sft = train_sft(settings, env, out / "sft", model=model, tokenizer=tokenizer)
    seconds["sft"] = time.perf_counter() - start
    evaluation("sft", sft.model, sft.tokenizer)

    sft_model = ModelConfig(name="sft", source="pretrained", path=str(sft.path), seed=settings.model.seed)
    for label, lr in (("grpo", settings.optimizer.lr), ("control", 0.0)):
        run = dataclasses.replace(
            settings, model=sft_model, optimizer=dataclasses.replace(settings.optimizer, lr=lr)
        )
        start = time.perf_counter()
        model, tokenizer = load_policy(sft_model)
        trained = train(run, env, out / label, model=model, tokenizer=tokenizer)
        seconds[label] = time.perf_counter() - start
        evaluation(label, trained.model, trained.tokenizer)

    n = results["random"].n * results["random"].r
    print(
        f"\nalphabet-sort on CPU: {settings.model.name} model, {n} eval rollouts per row of the table "
        f"(temperature {settings.eval.temperature}), {torch.get_num_threads()} torch thread(s), {out}"
    )
    print(f"{'policy':<12} {'mean reward':>12} {'std':>7} {'seconds':>8}")
    for label, time_key in (("random", "eval"), ("sft", "sft"), ("grpo", "grpo"), ("control", "control")):
        r = results[label]
        print(f"{label:<12} {r.mean:>12.4f} {r.std:>7.4f} {seconds[time_key]:>8.0f}")
    gain, sem = paired_gain(results["grpo"].rewards, results["control"].rewards)
    print(f"GRPO - control: {gain:+.4f} (paired standard error {sem:.4f} over {results['grpo'].n} examples)")
    print(f"gain: {gain:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
