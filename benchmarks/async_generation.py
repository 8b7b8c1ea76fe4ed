"""Steps per second of GRPO training, synchronous vs one batch ahead, on the same 2 cores, with the
final policies scored side by side.

Both sides train the same recipe (default: +experiment=alphabet_sort_cpu, the README's headline
CPU recipe: the shipped warm start model=small_alphabet_sort on one-turn alphabet-sort; with
--recipe alphabet_sort_hub_recipe_cpu: multi-turn alphabet-sort, 1-3 turns) for the same steps
with the same seeds, through grpo.train.trainer in this process:

    sync    generation.num_batches_ahead=0: each step generates its own rollouts in the trainer,
            then trains on them; one process, torch on every core (2 threads here);
    ahead   generation.num_batches_ahead=1: the rollouts of step k+1 are generated while step k
            trains, on the generator process the run starts (python -m grpo.serve); the cores are
            split as the run splits them by default (generation.generator_threads=null: half for
            the generator, the rest for the trainer: 1 + 1 here), weights pushed after every
            step, the loss corrected by the generator's sampling logprobs.

Each round runs both sides, alternating which goes first. A side's cost is its median seconds per
optimizer step, the first two steps left out (the first batch of `ahead` is generated while its
trainer waits); the speed-up is the median of the per-round ratios (sync s/step / ahead s/step).
G and T are the sync side's seconds per step in generation (its rollout function) and in the rest
of the step (loss, backward, optimizer, rewards): a perfect overlap on separate devices would give
(G + T) / max(G, T). After each run the final policy is evaluated on the recipe's evaluation rows
(eval.num_examples x eval.rollouts_per_example, seeded, the same rows for both); the reward delta
is paired by example over all rounds.

    python benchmarks/async_generation.py [--recipe alphabet_sort_cpu] [--steps 30] [--rounds 2]

Last two lines: `async_speedup: X` and `reward_delta: Y (SE Z)` (ahead - sync).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_side(settings: Any, env: Any, out: Path, threads: int) -> dict[str, Any]:
    """Train one side; its seconds per step, G and T (sync), waits (ahead) and final evaluation."""
    import torch
    from step_timer import StepTimer

    from grpo.evaluation.evaluator import evaluate
    from grpo.evaluation.setup import EvalSetup
    from grpo.generation import make_backend
    from grpo.train.trainer import build_trainer
    from grpo.trl_adapter.trainer import run_trainer

    torch.set_num_threads(threads)

    timer = StepTimer()
    bundle = build_trainer(settings, env, out, callbacks=[timer])
    trainer, generation = bundle.trainer, []
    if bundle.ahead is None:  # the sync side: time its rollout function (G)
        rollout = trainer.rollout_func

        def timed(prompts: Any, owner: Any) -> Any:
            start = time.perf_counter()
            try:
                return rollout(prompts, owner)
            finally:
                generation.append(time.perf_counter() - start)

        trainer.rollout_func = timed
    try:
        run_trainer(trainer, "train")
    finally:
        if bundle.ahead is not None:
            bundle.ahead.close()
    per_step = timer.gaps()[1:]
    logs = trainer.state.log_history
    side: dict[str, Any] = {"s_per_step": statistics.median(per_step)}
    if generation:
        side["G"] = statistics.median(generation[2:])
        side["T"] = side["s_per_step"] - side["G"]
    waits = [e["async/wait_s"] for e in logs if "async/wait_s" in e][2:]
    made = [e["async/generate_s"] for e in logs if "async/generate_s" in e][2:]
    if waits:
        side["wait"], side["generate"] = statistics.median(waits), statistics.median(made)
        side["lag"] = max(e["async/lag"] for e in logs if "async/lag" in e)
        side["dropped"] = max(e["async/dropped"] for e in logs if "async/dropped" in e)
    torch.set_num_threads(threads)
    backend = make_backend(settings.generation, trainer.model, bundle.tokenizer, settings.model)
    result = evaluate(EvalSetup.of(settings), env, backend, out / "eval", label="final")
    side["rewards"], side["mean"] = result.rewards, result.mean
    return side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="alphabet_sort_cpu", help="an +experiment= recipe")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=2, help="paired (sync, ahead) runs")
    args = parser.parse_args()

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.evaluation.summary import paired_difference
    from grpo.generation.generator import split_cores

    common = [
        f"+experiment={args.recipe}",
        "stages=[train]",
        "tracking=none",
        f"trainer.max_steps={args.steps}",
        "trainer.save_steps=100000",
        "trainer.eval_steps=0",
        "trainer.keep_best=false",
        "trainer.logging_steps=1",  # the async metrics of every step
        "eval.show_examples=false",
    ]
    settings = {
        "sync": load_settings([*common, "generation.num_batches_ahead=0"]),
        "ahead": load_settings([*common, "generation.num_batches_ahead=1"]),
    }
    env = build_env(settings["sync"].env, settings["sync"].language)
    cores = sum(split_cores(None))
    trainer_threads, generator_threads = split_cores(None)
    sides: dict[str, list[dict[str, Any]]] = {"sync": [], "ahead": []}
    ratios = []
    with tempfile.TemporaryDirectory(prefix="grpo-async-bench-") as tmp:
        for r in range(args.rounds):
            order = ["sync", "ahead"] if r % 2 == 0 else ["ahead", "sync"]
            for name in order:
                # each side the whole machine its way: sync torch on every core; ahead splits them itself
                side = run_side(dataclasses.replace(settings[name]), env, Path(tmp) / f"{name}{r}", cores)
                sides[name].append(side)
            s, a = sides["sync"][-1], sides["ahead"][-1]
            ratios.append(s["s_per_step"] / a["s_per_step"])
            print(
                f"round {r + 1}: sync {s['s_per_step']:.3f} s/step (G {s['G']:.3f} + T {s['T']:.3f}), reward "
                f"{s['mean']:.4f}; ahead {a['s_per_step']:.3f} s/step (waited {a['wait']:.3f} s, batch generated "
                f"in {a['generate']:.3f} s, lag {a['lag']:.0f}, dropped {a['dropped']:.0f}), reward {a['mean']:.4f}; "
                f"ratio {ratios[-1]:.3f}",
                file=sys.stderr,
                flush=True,
            )
    g = statistics.median(s["G"] for s in sides["sync"])
    t = statistics.median(s["T"] for s in sides["sync"])
    print(
        f"recipe: +experiment={args.recipe}, {args.steps} steps per run, {args.rounds} rounds, {cores} cores"
    )
    print(
        f"sync (one process, {cores} threads): {statistics.median(s['s_per_step'] for s in sides['sync']):.3f} s/step"
    )
    print(
        f"one batch ahead (trainer {trainer_threads} thread(s) + generator {generator_threads} thread(s)): "
        f"{statistics.median(s['s_per_step'] for s in sides['ahead']):.3f} s/step, the trainer waited "
        f"{statistics.median(s['wait'] for s in sides['ahead']):.3f} s per step"
    )
    print(f"G {g:.3f} s, T {t:.3f} s per sync step: bound (G+T)/max(G,T) = {(g + t) / max(g, t):.2f}")
    # per example, both sides' rollouts over every round
    merged = {name: [[v for side in runs for v in side["rewards"][i]] for i in range(len(runs[0]["rewards"]))]
              for name, runs in sides.items()}  # fmt: skip
    delta, se = paired_difference(merged["ahead"], merged["sync"])
    print(f"async_speedup: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    print(f"reward_delta: {delta:+.4f} (SE {se:.4f})")


if __name__ == "__main__":
    main()
