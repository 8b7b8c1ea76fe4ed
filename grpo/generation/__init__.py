"""Generation backends for the rollout engine, chosen by `generation.backend`.

    backend = make_backend(settings.generation, model, tokenizer, settings.model)

- hf: transformers `generate()` on the policy, token-level (ids, env mask, logprobs).
- openai: any OpenAI-compatible /v1/chat/completions endpoint, text-level, evaluation only.
- vllm_colocate / vllm_server: vLLM (GPU), token-level (grpo/generation/vllm.py).

See grpo/generation/base.py for the protocol a backend implements. Importing this package is
light: a backend's heavy modules (torch, openai, vllm) load when its factory runs. Settings
arrive checked (grpo/cli/checks.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from grpo.config import GenerationConfig, ModelConfig
from grpo.errors import UserError
from grpo.generation.base import (
    GenerationBackend,
    GenRequest,
    GenResult,
    Sampling,
    TokenBackend,
)

BackendFactory = Callable[[GenerationConfig, Any, Any, ModelConfig], GenerationBackend]

# the API key sent to endpoints that need none (the openai client refuses an empty key)
DUMMY_API_KEY = "EMPTY"


def _hf(gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig) -> GenerationBackend:
    from grpo.models import load_policy, load_tokenizer

    if model is None:
        model, loaded_tokenizer = load_policy(model_cfg)
        tokenizer = tokenizer or loaded_tokenizer
    if tokenizer is None:
        tokenizer = load_tokenizer(model_cfg)
    from grpo.generation.hf import HFBackend

    return HFBackend(
        model,
        tokenizer,
        batch_size=gen_cfg.batch_size,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        reuse_kv_cache=gen_cfg.reuse_kv_cache,
        static_cache=gen_cfg.static_cache,
    )


def _openai(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> GenerationBackend:
    from grpo.generation.openai_endpoint import OpenAIBackend

    return OpenAIBackend(
        base_url=str(gen_cfg.base_url),
        model=str(gen_cfg.model),
        api_key=api_key(gen_cfg),
        max_concurrency=gen_cfg.max_concurrency,
        timeout_s=gen_cfg.timeout_s,
        max_retries=gen_cfg.max_retries,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        extra_body=gen_cfg.extra,
        api_key_var=gen_cfg.api_key_var,
    )


def _vllm_colocate(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> GenerationBackend:
    from grpo.generation.vllm import make_colocate_backend

    return make_colocate_backend(gen_cfg, model, tokenizer, model_cfg)


def _vllm_server(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> GenerationBackend:
    from grpo.generation.vllm import make_server_backend

    return make_server_backend(gen_cfg, model, tokenizer, model_cfg)


# backend name (grpo.config.GENERATION_BACKENDS) -> factory
BACKENDS: dict[str, BackendFactory] = {
    "hf": _hf,
    "openai": _openai,
    "vllm_colocate": _vllm_colocate,
    "vllm_server": _vllm_server,
}


def api_key(gen_cfg: GenerationConfig) -> str:
    """The endpoint's API key, read from the environment variable NAMED by generation.api_key_var."""
    var = gen_cfg.api_key_var
    if not var:
        return DUMMY_API_KEY
    value = os.environ.get(var)
    if not value:  # checked at start-up; the variable may have been unset since
        raise UserError(f"generation.api_key_var={var}: the environment variable {var} is not set")
    return value


def make_backend(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> GenerationBackend:
    """The generation backend `gen_cfg` asks for. hf uses `model` / `tokenizer` when given (the
    policy being trained), else loads them from `model_cfg`; openai ignores them (model_cfg's
    chat_template_kwargs are sent along)."""
    return BACKENDS[gen_cfg.backend](gen_cfg, model, tokenizer, model_cfg)


__all__ = [
    "BACKENDS",
    "GenRequest",
    "GenResult",
    "GenerationBackend",
    "Sampling",
    "TokenBackend",
    "api_key",
    "make_backend",
]
