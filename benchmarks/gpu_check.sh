#!/usr/bin/env bash
# GPU check: a few GRPO training steps on multi-turn alphabet-sort with the exact Qwen3-0.6B
# architecture and RANDOM weights (model=qwen3_0_6b_random: no download, no network), once with
# hf generation and once with vLLM colocated in the training process (generation=vllm_colocate).
# For each it prints generation throughput (model tokens per second inside the rollouts) and
# seconds per optimizer step. One H200: well under 8 minutes.
#
#   bash benchmarks/gpu_check.sh            # needs a CUDA GPU; vLLM: pip install -e '.[vllm]'
#   STEPS=6 bash benchmarks/gpu_check.sh    # more steps, steadier numbers
#
# Each backend runs in its own process (a clean GPU for each). Step 1 (CUDA / vLLM warm-up) is
# not counted. The random model never emits EOS, so every model turn runs to its token limit:
# 64 conversations (8 prompts x 8) x 3 turns x 128 new tokens per optimizer step.
set -euo pipefail
cd "$(dirname "$0")/.."

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false
STEPS="${STEPS:-4}"
OUT="$(mktemp -d -t grpo-gpu-check-XXXXXX)"
trap 'rm -rf "$OUT"' EXIT

python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu_check: no CUDA GPU visible")'

run_backend() {
  local backend="$1"
  python - "$backend" "$STEPS" "$OUT/$backend" <<'PY'
import statistics
import sys
import time

from transformers import TrainerCallback

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.train.trainer import build_trainer

backend, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = load_settings(
    [
        "+env=alphabet_sort",
        "env.min_turns=3",
        "model=qwen3_0_6b_random",
        f"generation={backend}",
        "stages=[train]",
        "tracking=none",
        "trainer.num_generations=8",
        "trainer.per_device_batch_completions=32",
        "trainer.gradient_accumulation_steps=2",
        f"trainer.max_steps={steps}",
        "trainer.beta=0",
        "trainer.bf16=true",
        "trainer.max_completion_length=1024",
        "generation.max_tokens_per_turn=128",
        "trainer.save_steps=100000",
        "optimizer.lr=1e-6",
    ]
)
check(cfg)  # the rules `python -m grpo` runs first (GPU, vLLM installed, batch geometry)


class StepTimer(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


timer = StepTimer()
bundle = build_trainer(cfg, build_env(cfg.env, cfg.language), out, callbacks=[timer])
rollout = bundle.trainer.rollout_func
calls = []  # (seconds, model tokens) per rollout_func call = one generation batch


def timed_rollout(prompts, trainer):
    start = time.perf_counter()
    result = rollout(prompts, trainer)
    calls.append((time.perf_counter() - start, sum(sum(mask) for mask in result["env_mask"])))
    return result


bundle.trainer.rollout_func = timed_rollout
bundle.trainer.train()
gen_seconds = sum(s for s, _ in calls[1:])
gen_tokens = sum(t for _, t in calls[1:])
per_step = statistics.median(b - a for a, b in zip(timer.ends, timer.ends[1:]))
print(
    f"RESULT {backend}: generation {gen_tokens / gen_seconds:,.0f} tokens/s "
    f"({gen_tokens} model tokens in {gen_seconds:.1f} s over {len(calls) - 1} generation batches) | "
    f"{per_step:.2f} s/step (median of {len(timer.ends) - 1} steps)"
)
PY
}

results=()
for backend in hf vllm_colocate; do
  echo "== $backend =="
  line="$(run_backend "$backend" 2>&1 | tee /dev/stderr | grep '^RESULT ' || true)"
  results+=("${line:-RESULT $backend: FAILED (see the output above)}")
done
echo
echo "model=qwen3_0_6b_random, alphabet_sort (3 turns), 64 completions per step, 128 tokens per turn:"
printf '%s\n' "${results[@]#RESULT }"
