"""The "Will it fit?" table of docs/training.md: the memory plan of the Qwen3-0.6B recipe and of the
same recipe on a 4B model, full fine-tuning and LoRA, with hf generation, vLLM colocated and a vLLM
server, on GPUs of 24, 48, 80 and 141 GiB.

    python scripts/will_it_fit.py            # ~10 min on 2 CPU cores (the 4B plans are the slow part)

Each plan is `model=qwen3_0_6b` as shipped (64 completions per step in micro-batches of 8,
gradient checkpointing, 1,024-token completions, beta 0.04, bf16) with the architecture of
model=qwen3_0_6b_random or model=qwen3_4b_random (random weights: the same memory as the
checkpoints, no hub), measured once on CPU for a GPU and then put on each device size
(`MemoryPlan.on`: vLLM colocated takes generation.gpu_memory_utilization of each). A cell is the
plan's peak and whether it fits after memory.reserve_gib (1.5 GiB).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEVICES = (24, 48, 80, 141)
MODELS = (("Qwen3-0.6B", "qwen3_0_6b_random"), ("Qwen3-4B", "qwen3_4b_random"))
BACKENDS = (("hf", "hf"), ("vLLM colocate (0.3)", "vllm_colocate"), ("vLLM server", "vllm_server"))


def main() -> int:
    from grpo.compose import load_settings
    from grpo.memory.device import GIB, Device
    from grpo.memory.models import with_random_weights
    from grpo.memory.plan import plan_memory

    started = time.perf_counter()
    print(
        "| model | weights | generation | "
        + " | ".join(f"{d} GiB" for d in DEVICES)
        + " | largest part (24 GiB) |"
    )
    print("|---|---|---|" + "---|" * len(DEVICES) + "---|")
    for label, preset in MODELS:
        for lora in (False, True):
            for backend_label, backend in BACKENDS:
                overrides = [
                    "+env=alphabet_sort",
                    "model=qwen3_0_6b",
                    f"generation={backend}",
                    "memory.device_gib=80",
                ]
                if lora:
                    overrides.append("model.lora.enabled=true")
                settings = with_random_weights(load_settings(overrides), preset)
                plan = plan_memory(settings)
                cells = []
                for size in DEVICES:
                    on = plan.on(Device("cuda", size * GIB, f"{size} GiB", plan.device.reserve_bytes))
                    cells.append(f"{on.peak.total / GIB:.1f} {'fits' if on.fits else '**no**'}")
                part, bytes_ = plan.on(
                    Device("cuda", 24 * GIB, "24 GiB", plan.device.reserve_bytes)
                ).largest_part()
                print(
                    f"| {label} | {'LoRA r16' if lora else 'full'} | {backend_label} | "
                    + " | ".join(cells)
                    + f" | {part} {bytes_ / GIB:.1f} GiB ({plan.peak.name}) |",
                    flush=True,
                )
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
