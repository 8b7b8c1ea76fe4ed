"""Generation backends for the rollout engine, chosen by `generation.backend`.

    backend = make_backend(cfg.generation, model, tokenizer, cfg.model)

- hf: transformers `generate()` on the policy, token-level (ids, env mask, logprobs).
- openai: any OpenAI-compatible /v1/chat/completions endpoint, text-level, evaluation only.
- vllm_colocate / vllm_server: vLLM (GPU), token-level (grpo/generation/vllm.py).

A new backend is a factory `(gen_cfg, model, tokenizer, model_cfg) -> backend` registered with
`register_backend(name, factory)` (see grpo/generation/base.py for the protocol). Importing this
package is light: a backend's heavy modules (torch, openai) load when its factory runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from grpo.errors import UserError
from grpo.generation.base import (
    GenerationBackend,
    GenRequest,
    GenResult,
    Sampling,
    TokenBackend,
)

BackendFactory = Callable[[Any, Any, Any, Any], GenerationBackend]

# the API key sent to endpoints that need none (the openai client refuses an empty key)
DUMMY_API_KEY = "EMPTY"


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """A field of a DictConfig / dataclass / dict; Hydra's `???` (missing) reads as None."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        if key not in cfg or OmegaConf.is_missing(cfg, key):
            return default
        value = cfg[key]
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    value = getattr(cfg, key, default)
    return default if value == "???" else value


def _hf_factory(gen_cfg: Any, model: Any, tokenizer: Any, model_cfg: Any) -> GenerationBackend:
    if model is None:
        if model_cfg is None:
            raise ValueError("make_backend(backend=hf) needs the policy model or model_cfg to load it")
        from grpo.models import load_policy

        model, loaded_tokenizer = load_policy(model_cfg)
        tokenizer = tokenizer or loaded_tokenizer
    if tokenizer is None:
        if model_cfg is None:
            raise ValueError("make_backend(backend=hf) needs the tokenizer or model_cfg to load it")
        from grpo.models import load_tokenizer

        tokenizer = load_tokenizer(model_cfg)
    from grpo.generation.hf import HFBackend

    return HFBackend(model, tokenizer, batch_size=_get(gen_cfg, "batch_size"), model_cfg=model_cfg)


def _openai_factory(gen_cfg: Any, model: Any, tokenizer: Any, model_cfg: Any) -> GenerationBackend:
    from grpo.generation.openai_endpoint import OpenAIBackend

    template_kwargs: dict[str, Any] = {}
    if model_cfg is not None:
        from grpo.models import chat_template_kwargs

        template_kwargs = chat_template_kwargs(model_cfg)
    return OpenAIBackend(
        base_url=str(_get(gen_cfg, "base_url")),
        model=str(_get(gen_cfg, "model")),
        api_key=api_key(gen_cfg),
        max_concurrency=int(_get(gen_cfg, "max_concurrency", 32)),
        timeout_s=float(_get(gen_cfg, "timeout_s", 120.0)),
        max_retries=int(_get(gen_cfg, "max_retries", 3)),
        chat_template_kwargs=template_kwargs,
        extra_body=dict(_get(gen_cfg, "extra") or {}),
    )


def _vllm_colocate_factory(gen_cfg: Any, model: Any, tokenizer: Any, model_cfg: Any) -> GenerationBackend:
    from grpo.generation.vllm import make_colocate_backend

    return make_colocate_backend(gen_cfg, model, tokenizer, model_cfg)


def _vllm_server_factory(gen_cfg: Any, model: Any, tokenizer: Any, model_cfg: Any) -> GenerationBackend:
    from grpo.generation.vllm import make_server_backend

    return make_server_backend(gen_cfg, model, tokenizer, model_cfg)


# backend name -> factory (each imports its heavy modules only when it runs)
BACKENDS: dict[str, BackendFactory] = {
    "hf": _hf_factory,
    "openai": _openai_factory,
    "vllm_colocate": _vllm_colocate_factory,
    "vllm_server": _vllm_server_factory,
}

# vLLM backends (GPU only, grpo/generation/vllm.py): light to import, vllm loads when one is built
from grpo.generation.vllm import make_colocate_backend, make_server_backend  # noqa: E402

BACKENDS.update(vllm_colocate=make_colocate_backend, vllm_server=make_server_backend)


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make `generation.backend=name` build its backend with `factory`."""
    BACKENDS[name] = factory


def api_key(gen_cfg: Any) -> str:
    """The endpoint's API key, read from the environment variable NAMED by generation.api_key_var."""
    var = _get(gen_cfg, "api_key_var")
    if not var:
        return DUMMY_API_KEY
    value = os.environ.get(str(var))
    if not value:
        raise UserError(
            f"generation.api_key_var={var}: the environment variable {var} is not set; "
            f"export {var}=<your key>, or set generation.api_key_var=null for an endpoint without auth"
        )
    return value


def check_generation_config(gen_cfg: Any) -> None:
    """Reject generation settings that cannot work: one line naming the field and the fix.
    Light (no heavy import); make_backend runs it, and so can the config check."""
    name = _get(gen_cfg, "backend")
    if name not in BACKENDS:
        raise UserError(
            f"generation.backend={name!r} is not available; choose one of: {', '.join(sorted(BACKENDS))}"
        )
    per_turn = _get(gen_cfg, "max_tokens_per_turn", 128)
    if isinstance(per_turn, bool) or not isinstance(per_turn, int) or per_turn < 1:
        raise UserError(f"generation.max_tokens_per_turn={per_turn} must be an integer >= 1 (e.g. 128)")
    batch_size = _get(gen_cfg, "batch_size")
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise UserError(
            f"generation.batch_size={batch_size} must be >= 1 (conversations per generate call) "
            f"or null (all active conversations at once)"
        )
    if name != "openai":
        return
    for key in ("base_url", "model"):
        if not _get(gen_cfg, key):
            example = "http://127.0.0.1:8000/v1" if key == "base_url" else "<served model name>"
            raise UserError(
                f"generation.{key} is required for generation=openai: set generation.{key}={example}"
            )
    base_url = str(_get(gen_cfg, "base_url"))
    if not base_url.startswith(("http://", "https://")):
        raise UserError(
            f"generation.base_url={base_url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1"
        )
    concurrency = _get(gen_cfg, "max_concurrency", 32)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise UserError(f"generation.max_concurrency={concurrency} must be an integer >= 1")
    timeout = _get(gen_cfg, "timeout_s", 120.0)
    if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise UserError(f"generation.timeout_s={timeout} must be a number of seconds > 0")
    retries = _get(gen_cfg, "max_retries", 3)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise UserError(f"generation.max_retries={retries} must be an integer >= 0")
    api_key(gen_cfg)


def make_backend(
    gen_cfg: Any, model: Any = None, tokenizer: Any = None, model_cfg: Any = None
) -> GenerationBackend:
    """The generation backend `gen_cfg` (the `generation` config group) asks for.

    hf uses `model` / `tokenizer` when given (the policy being trained), else loads them from
    `model_cfg`; openai ignores them (model_cfg's chat_template_kwargs are sent along)."""
    check_generation_config(gen_cfg)
    return BACKENDS[_get(gen_cfg, "backend")](gen_cfg, model, tokenizer, model_cfg)


__all__ = [
    "BACKENDS",
    "GenRequest",
    "GenResult",
    "GenerationBackend",
    "Sampling",
    "TokenBackend",
    "api_key",
    "check_generation_config",
    "make_backend",
    "register_backend",
]
