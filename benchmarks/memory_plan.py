"""How close is the memory plan to what a run really takes? On CPU, against measured peaks.

Per workload (the exact Qwen3-0.6B architecture with random weights, model=qwen3_0_6b_random,
bf16, GRPO on one-turn alphabet-sort at small micro-batches, stages=[train], two optimizer steps): the plan's peak
(grpo/memory: fake tensors under PyTorch's MemTracker, planned for this host's CPU) beside the
peak a real run of the same settings reaches, measured in a fresh process: GRPO training through
grpo's own stage code (build_trainer, TRL's trainer: generation, the micro-steps, the optimizer),
the process's peak resident memory (Linux VmHWM, reset after the model loads) over its resident
memory before training, plus the policy's weights (in the resident memory the peak is measured
above), with glibc's malloc returning freed blocks at once (MALLOC below). The memory the run
holds besides tensors (the trainer's Python objects, the dataset) counts in the measurement and
not in the plan; the plan's prompts are the longest of the env's rows, the run's as they come.

    python benchmarks/memory_plan.py            # the workloads below, ~6 min on 2 cores
    python benchmarks/memory_plan.py --quick    # the first two

Last line: `memory_plan_error: X`, the largest |plan - measured| / measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

COMMON = [
    "+env=alphabet_sort",
    "env.min_turns=1",
    "env.max_turns=1",
    "model=qwen3_0_6b_random",
    "stages=[train]",
    "tracking=none",
    "trainer.num_generations=2",
    # two optimizer steps: the second is the steady state the plan measures (optimizer states alive
    # while a later micro-batch runs with the earlier ones' gradients)
    "trainer.max_steps=2",
    "trainer.save_steps=1000",
    "trainer.beta=0",
    "trainer.mask_truncated_completions=false",
    "trainer.truncated_reward=null",
    "generation.max_tokens_per_turn=64",
    "trainer.max_completion_length=64",
    "memory.plan=true",
]
# glibc's malloc with a fixed threshold for mmap and trimming: freed tensors go back to the system
# at once, so the resident memory follows the live tensors. With its default (a threshold that
# rises to 32 MB after the first large free), freed blocks stay in the heap and the resident
# memory after a step stayed 4 GiB above what was live (LoRA row: 5.88 GiB peak against 4.23)
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
# (name, overrides): what each row changes
WORKLOADS = [
    ("full fine-tuning, micro-batch 2", ["trainer.per_device_batch_completions=2"]),
    (
        "gradient checkpointing, micro-batch 4",
        ["trainer.per_device_batch_completions=4", "trainer.gradient_checkpointing=true"],
    ),
    ("LoRA r16, micro-batch 4", ["trainer.per_device_batch_completions=4", "model.lora.enabled=true"]),
    (
        "reference model (beta 0.04), micro-batch 2",
        ["trainer.per_device_batch_completions=2", "trainer.beta=0.04"],
    ),
    (
        "2 micro-batches of 4, 128 tokens",
        [
            "trainer.per_device_batch_completions=4",
            "trainer.completions_per_step=8",
            "generation.max_tokens_per_turn=128",
            "trainer.max_completion_length=128",
        ],
    ),
]


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(overrides: list[str]) -> dict[str, float]:
    """In this (fresh) process: the peak resident memory of a real GRPO training stage."""
    import gc

    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.memory.models import parameter_bytes
    from grpo.models import load_policy
    from grpo.train.trainer import train

    torch.set_num_threads(int(os.environ.get("GRPO_BENCH_THREADS", "2")))
    settings = load_settings(overrides)
    env = build_env(settings.env, settings.language)
    model, tokenizer = load_policy(settings.model)
    weights = parameter_bytes(model)
    gc.collect()
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-memory-bench-") as tmp:
        train(settings, env, tmp, model=model, tokenizer=tokenizer)
    peak = _status("VmHWM")
    return {"measured": peak - before + weights, "seconds": time.perf_counter() - started}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--measure"]:
        print("RESULT " + json.dumps(measure(argv[1:])), flush=True)
        return 0
    from grpo.compose import load_settings
    from grpo.memory.plan import plan_memory

    workloads = WORKLOADS[:2] if "--quick" in argv else WORKLOADS
    rows, errors = [], []
    for name, extra in workloads:
        overrides = [*COMMON, *extra]
        started = time.perf_counter()
        plan = plan_memory(load_settings(overrides), force=True, use_cache=False)
        planned_s = time.perf_counter() - started
        child = subprocess.run(
            [sys.executable, __file__, "--measure", *overrides],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **MALLOC},
        )
        result = next((line for line in child.stdout.splitlines() if line.startswith("RESULT ")), None)
        if result is None:
            print(child.stdout[-2000:], child.stderr[-4000:], sep="\n")
            raise SystemExit(f"{name}: the measured run failed (exit {child.returncode})")
        measured = json.loads(result.removeprefix("RESULT "))
        error = (plan.peak.total - measured["measured"]) / measured["measured"]
        errors.append(abs(error))
        rows.append(
            f"| {name} | {plan.peak.total / 2**30:.2f} ({plan.peak.name}) | {measured['measured'] / 2**30:.2f} | "
            f"{error:+.1%} | {planned_s:.1f} | {measured['seconds']:.0f} |"
        )
        print(rows[-1], flush=True)
    print()
    print(
        "Qwen3-0.6B architecture (model=qwen3_0_6b_random), bf16, CPU, 2 GRPO steps of 1-turn alphabet-sort"
    )
    print("| workload | plan peak (GiB) | measured peak (GiB) | error | plan s | run s |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"memory_plan_error: {max(errors):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
