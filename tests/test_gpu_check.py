"""The GPU check's CPU dry run: benchmarks/gpu_check.sh --cpu-dry-run runs every workload of the
GPU check (GRPO hf full and LoRA, SFT, the reward model; vLLM colocate on vLLM's CPU build, with
model=tiny_vllm, and skipped in one line without it) through grpo's own stage code on model=tiny,
so the script cannot rot where no GPU ever runs it. It runs where every row can: vLLM's CPU build
(.ci/run's second venv, `-m vllm`); without it, it skips (the main suite ran the same rows less the
vLLM one, a duplicate of 50 s)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from helpers.grpo_process import process_env
from helpers.vllm_marks import NEEDS_VLLM_CPU

pytestmark = NEEDS_VLLM_CPU

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = [
    "GRPO hf, full fine-tuning",
    "GRPO hf, full fine-tuning, dynamic cache",
    "GRPO hf, LoRA",
    "GRPO hf, one batch ahead",
    "model=qwen3_0_6b as shipped (hf), full",
    "model=qwen3_0_6b as shipped (hf), LoRA",
    "model=qwen3_0_6b as shipped (hf), full, no checkpointing",
    "GRPO vLLM colocate",
    "SFT",
    "reward model",
]


def test_cpu_dry_run_measures_every_workload(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu-dry-run"],
        capture_output=True, text=True, env=process_env(tmp_path), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    table = done.stdout[done.stdout.index("| workload |") :].splitlines()
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table[2:] if line.strip()]
    rows = {row[0]: row[1:] for row in cells}
    assert list(rows) == WORKLOADS, table
    for name in WORKLOADS:
        tokens, per_step, steps, memory, plan, what = rows[name]
        if name.startswith("GRPO vLLM"):  # vLLM's CPU build: the engine samples the weights that train
            ratio = re.search(r"sampler/trainer probability ratio ([\d.]+)-([\d.]+)", what)
            assert ratio and abs(float(ratio[1]) - 1) < 1e-3 and abs(float(ratio[2]) - 1) < 1e-3, what
        # a step time and the steps it comes from; no GPU memory on CPU
        assert float(per_step) > 0 and int(steps) >= 2, (name, rows[name])
        assert memory == "-"
        if name.endswith("one batch ahead"):  # the generator's batches are not the trainer's to time
            assert tokens == "-" and "steps/s" in what and "async/wait_s" in what, what
        else:
            assert float(tokens.replace(",", "")) > 0, (name, rows[name])
        # every GRPO row has its memory plan (for the host's memory on the dry run)
        if name.startswith(("GRPO", "model=")):
            assert float(plan) > 0, (name, plan)
        else:
            assert plan == "-", (name, plan)
    generated = re.search(r"([\d,]+) generated tokens", rows["GRPO hf, full fine-tuning"][5])
    assert generated and int(generated[1].replace(",", "")) > 0
    assert "GPU check on CPU (dry run: model=tiny)" in done.stdout
