#!/usr/bin/env bash
# GPU check: the real job's code paths at the real size, on one GPU, offline. The exact Qwen3-0.6B
# architecture with RANDOM weights (model=qwen3_0_6b_random: no download), bf16:
#   - GRPO on 3-turn alphabet-sort with hf generation, full fine-tuning and LoRA (4 steps each:
#     64 completions per step, 128 new tokens per turn; the random model never stops early): the
#     static KV cache with CUDA graphs (the GPU default) and today's dynamic cache side by side, and
#     one batch ahead with grpo's policy server as the generator on the same GPU;
#   - model=qwen3_0_6b as shipped (64 completions per step in micro-batches of 8, gradient
#     checkpointing, 3 turns x 256 tokens), random weights, hf generation, full and LoRA, and full
#     without gradient checkpointing (what it costs in s/step and saves in peak memory);
#   - every GRPO row with its memory plan's peak beside the measured peak;
#   - GRPO with vLLM colocated (generation=vllm_colocate), skipped with one line without vLLM; its
#     note gives the sampler/trainer probability ratio (~1: the engine samples the weights that
#     train, in their dtype); the CPU dry run runs it too where vLLM's CPU build is installed;
#   - 20 SFT steps (8 conversations per step, padding-free);
#   - 20 reward-model steps with a Qwen3-0.6B-sized backbone (reward_model/backbone=qwen3_0_6b_random).
# For each: tokens/s, s/step and peak GPU memory, then one summary table (benchmarks/gpu_check.py).
# About 8 minutes on one H100 or H200 (not measured yet with the rows added on 2026-12-05).
#
#   bash benchmarks/gpu_check.sh                      # grpo and its dependencies installed
#   bash benchmarks/gpu_check.sh --wheels .whl        # a machine without them and without network:
#                                                     # the wheels of benchmarks/gpu_wheels.sh
#   bash benchmarks/gpu_check.sh --cpu-dry-run        # the same code path on CPU, model=tiny (< 2 min)
#   bash benchmarks/gpu_check.sh --steps 8            # more GRPO steps, steadier numbers
#
# --wheels DIR installs DIR's wheels and grpo itself (from this tree) with --no-index --no-deps
# into a private folder, put first on PYTHONPATH and removed at exit; nothing else on the machine
# changes. A carried wheel's requirement that the machine's packages do not meet is one line each.
set -euo pipefail
cd "$(dirname "$0")/.."

wheels=""
args=()
while (($#)); do
  case "$1" in
    --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
    --wheels=*) wheels="${1#--wheels=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# the interpreter that holds torch (on the lent GPU machines: python3)
PY="${PYTHON:-python3}"

if [ -n "$wheels" ]; then
  compgen -G "$wheels/*.whl" >/dev/null || { echo "gpu_check: no wheels in $wheels (make them with benchmarks/gpu_wheels.sh)" >&2; exit 2; }
  site="$(mktemp -d -t grpo-site-XXXXXX)"
  build="$(mktemp -d -t grpo-build-XXXXXX)"
  trap 'rm -rf "$site" "$build"' EXIT
  # grpo from a copy of this tree: the build leaves nothing in the working tree
  cp -r pyproject.toml README.md grpo conf sweeps "$build"/
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation \
    --target "$site" "$wheels"/*.whl "$build"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" benchmarks/gpu_check.py --requirements "$site"
fi
"$PY" benchmarks/gpu_check.py ${args[@]+"${args[@]}"}
