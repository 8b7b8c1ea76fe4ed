"""vLLM generation backends (GPU only), built on TRL's own vLLM integration.

Two modes, as in TRL:
- vllm_colocate: a vLLM engine inside the training process, sharing its GPU. During training it is
  the engine TRL's GRPOTrainer creates (grpo/trl_adapter/internals.py: `vllm_engine`), whose
  weights TRL syncs from the policy before every generation step.
- vllm_server: a vLLM server on another GPU, started beforehand (docs/scaling.md):
      VLLM_SERVER_DEV_MODE=1 CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen3-0.6B --port 8000 \\
          --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1
  (`trl vllm-serve --model ... --port 8000` runs the same command). TRL's client pushes the
  policy's weights to it over NCCL before every generation step.

Either way the backend is token-level: the rollout engine sends the exact token ids of every
conversation and gets back the sampled ids with their log-probabilities under the sampling
distribution (processed logprobs), which TRL uses for its importance-sampling correction. All the
active conversations of a turn go to vLLM in ONE call.

Outside training (an evaluation before any training step), the factories build their own engine:
a colocated `vllm.LLM` on the model's weights, or a client of the server. After training, an
evaluation in the same process reuses the trainer's engine (registered by grpo/train/trainer.py with
`use_trainer_engine`), whose weights are the trained ones.

Importing this module is light: vllm and trl load when a backend is built.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.config import GenerationConfig, ModelConfig
from grpo.generation.base import ChatTokenizerSide, GenRequest, GenResult, Sampling
from grpo.trl_adapter.internals import VllmEngine, vllm_logprobs, vllm_server_client

# the engine of the last GRPOTrainer built with vLLM in this process (see use_trainer_engine)
_TRAINER_ENGINE: dict[str, Any] = {}
# the context lengths whose cut turns were said (VLLMBackend._say_context)
_SAID_CONTEXT: set[int | None] = set()


class VLLMBackend(ChatTokenizerSide):
    """Token-level backend over a colocated `vllm.LLM` (`llm`) or a TRL `VLLMClient` (`client`)."""

    token_level = True

    def __init__(
        self,
        tokenizer: Any,
        *,
        llm: Any = None,
        client: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        eos_token_ids: Sequence[int] = (),
    ):
        if (llm is None) == (client is None):
            raise ValueError("VLLMBackend needs exactly one of llm (colocate) or client (server)")
        self.tokenizer = tokenizer
        self.llm = llm
        self.client = client
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        ids = set(int(i) for i in eos_token_ids)
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        if not ids:
            raise ValueError("the vLLM backend needs at least one EOS token id")
        self.eos_token_ids = frozenset(ids)
        self._max_model_len: int | None | bool = False  # False: not asked yet

    @property
    def server_url(self) -> str | None:
        """The vLLM server's root URL (it serves /inference/v1/generate itself: a verifiers v1
        environment's training client calls it directly); None when colocated."""
        return None if self.client is None else str(self.client.base_url)

    @property
    def served_model(self) -> str | None:
        """The model id the vLLM server answers to (None when colocated)."""
        return None if self.client is None else getattr(self.client, "model", None)

    # ---- generation ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        if not requests:
            return []
        for r in requests:
            if not r.prompt_ids:
                raise ValueError("the vLLM backend needs non-empty prompt_ids in every request")
        # vLLM refuses a request past the model's context (the hf engine runs on past it): a turn
        # gets at most the room its conversation has left, and none at all is an empty, cut turn
        caps = [self._room(r) for r in requests]
        sent = [i for i, cap in enumerate(caps) if cap > 0]
        if len(sent) < len(requests) or any(caps[i] < requests[i].max_new_tokens for i in sent):
            self._say_context()
        ids: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        if sent:
            chosen = [dataclasses.replace(requests[i], max_new_tokens=caps[i]) for i in sent]
            if self.llm is not None:
                got = self._generate_colocate(chosen, sampling)
            else:
                got = self._generate_server(chosen, sampling)
            for i, tokens, lps in zip(sent, *got, strict=True):
                ids[i], logprobs[i] = tokens, lps
        return [
            self._result(tokens, lps, min(r.max_new_tokens, cap) if cap > 0 else 0)
            for tokens, lps, r, cap in zip(ids, logprobs, requests, caps, strict=True)
        ]

    # ---- the model's context ------------------------------------------------------------------
    @property
    def max_model_len(self) -> int | None:
        """The engine's context length (vLLM's max_model_len): the colocated engine's own, a
        server's from its /server_info route (None when it does not say: no cap)."""
        if self._max_model_len is False:
            value = None
            try:
                if self.llm is not None:
                    value = int(self.llm.llm_engine.model_config.max_model_len)
                else:
                    value = int(self.client.get_server_info()["model_config"]["max_model_len"])
            except Exception:  # noqa: BLE001 - a server without its development routes: no cap
                value = None
            self._max_model_len = value
        return self._max_model_len

    def _room(self, r: GenRequest) -> int:
        limit = self.max_model_len
        if limit is None:
            return int(r.max_new_tokens)
        return min(int(r.max_new_tokens), limit - len(r.prompt_ids or ()))

    def _say_context(self) -> None:
        if self.max_model_len not in _SAID_CONTEXT:  # once per process and context length
            _SAID_CONTEXT.add(self.max_model_len)
            print(
                f"[generation] note: conversations reached the model's context ({self.max_model_len} tokens, "
                "vLLM's max_model_len): their turns are cut there (counted as cut, the episode truncated)",
                file=sys.stderr,
                flush=True,
            )

    def _sampling_kwargs(self, sampling: Sampling) -> dict[str, Any]:
        return {
            "n": 1,
            # vLLM treats temperature 0 as greedy, like our Sampling
            "temperature": float(sampling.temperature),
            "top_p": float(sampling.top_p),
            # no top-k / min-p / penalties: the distribution must be exactly the configured one,
            # the one TRL recomputes log-probs under
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "logprobs": 0,
        }

    def _generate_colocate(
        self, requests: Sequence[GenRequest], sampling: Sampling
    ) -> tuple[list[list[int]], list[list[float]]]:
        from vllm import SamplingParams

        base = self._sampling_kwargs(sampling)
        # one SamplingParams per conversation: each has its own remaining token budget and seed
        params = [
            SamplingParams(
                **base,
                max_tokens=int(r.max_new_tokens),
                stop_token_ids=sorted(self.eos_token_ids),
                seed=r.seed,
            )
            for r in requests
        ]
        prompts = [{"prompt_token_ids": list(r.prompt_ids or ())} for r in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        ids = [list(out.outputs[0].token_ids) for out in outputs]
        logprobs, logprob_ids = vllm_logprobs(outputs)
        return ids, _sampled_logprobs(ids, logprobs, logprob_ids)

    def _generate_server(
        self, requests: Sequence[GenRequest], sampling: Sampling
    ) -> tuple[list[list[int]], list[list[float]]]:
        kwargs = self._sampling_kwargs(sampling)
        kwargs.pop("n")
        extra: dict[str, Any] = {"stop_token_ids": sorted(self.eos_token_ids)}
        if sampling.seed is not None:
            extra["seed"] = int(sampling.seed)
        # The server takes one max_tokens per call: ask for the largest budget and cut each
        # conversation at its own (sampling is left to right, so the first k tokens of a longer
        # sample are distributed exactly like a sample capped at k). It refuses a prompt whose
        # length plus max_tokens passes the model's context: conversations with less room than
        # the largest budget go in calls of their own, one per room.
        ids: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        largest = max(int(r.max_new_tokens) for r in requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(
                largest if self.max_model_len is None else min(largest, self._room(r)), []
            ).append(i)
        for max_tokens, members in groups.items():
            out = self.client.generate(
                prompts=[list(requests[i].prompt_ids or ()) for i in members],
                n=1,
                max_tokens=max_tokens,
                generation_kwargs=extra,
                **kwargs,
            )
            got = [list(seq) for seq in out["completion_ids"]]
            lps = _sampled_logprobs(got, out.get("logprobs"), out.get("logprob_token_ids"))
            for i, tokens, lp in zip(members, got, lps, strict=True):
                ids[i], logprobs[i] = tokens, lp
        return ids, logprobs

    def _result(self, ids: list[int], logprobs: list[float], limit: int) -> GenResult:
        ids, logprobs = ids[:limit], logprobs[:limit]
        finished = False
        for pos, tok in enumerate(ids):
            if tok in self.eos_token_ids:
                ids, logprobs, finished = ids[: pos + 1], logprobs[: pos + 1], True
                break
        return GenResult(
            text=self.decode(ids, skip_special_tokens=True),
            token_ids=ids,
            logprobs=logprobs,
            finished=finished,
            num_tokens=len(ids),
        )


def _sampled_logprobs(
    ids: list[list[int]], logprobs: list[Any] | None, logprob_ids: list[Any] | None
) -> list[list[float]]:
    """Per sequence, the log-prob of each sampled token (NaN where vLLM has none): vLLM returns
    (sequence, position, k) candidates and always includes the sampled token among them."""
    out: list[list[float]] = []
    for s, seq in enumerate(ids):
        row: list[float] = []
        for p, tok in enumerate(seq):
            value = math.nan
            if logprobs is not None and logprob_ids is not None:
                for lp, cand in zip(logprobs[s][p], logprob_ids[s][p], strict=False):
                    if cand == tok:
                        value = math.nan if lp is None else float(lp)
                        break
            row.append(value)
        out.append(row)
    return out


# ---- backends for the trainer and for evaluation ------------------------------------------------


def trainer_backend(
    engine: VllmEngine, tokenizer: Any, model_cfg: ModelConfig, eos_token_ids: Sequence[int]
) -> VLLMBackend:
    """The backend over a GRPOTrainer's vLLM engine (grpo/trl_adapter/internals.py: `vllm_engine`).
    TRL syncs the policy's weights into it before each generation step, so rollouts sample the
    current policy."""
    if engine.mode == "colocate":
        return VLLMBackend(
            tokenizer,
            llm=engine.llm,
            chat_template_kwargs=model_cfg.chat_template_kwargs,
            eos_token_ids=eos_token_ids,
        )
    # TRL keeps its client (and the weight-sync channel) on the main process only; other
    # processes generate through a client of their own (generation needs no weight channel).
    client = engine.client
    if client is None:
        client = vllm_server_client(engine.base_url, engine.host, engine.port, engine.timeout)
    return VLLMBackend(
        tokenizer,
        client=client,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        eos_token_ids=eos_token_ids,
    )


def thread_backend(
    engine: VllmEngine, tokenizer: Any, model_cfg: ModelConfig, eos_token_ids: Sequence[int]
) -> VLLMBackend:
    """A backend over a GRPOTrainer's vLLM server with a client of its own, for a thread that
    generates while the trainer trains (generation ahead of training: the trainer's client keeps
    the weight-sync channel)."""
    if engine.mode != "server":
        raise ValueError("generation ahead of training needs a vLLM server, not a colocated engine")
    client = vllm_server_client(engine.base_url, engine.host, engine.port, engine.timeout)
    return VLLMBackend(
        tokenizer,
        client=client,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        eos_token_ids=eos_token_ids,
    )


def use_trainer_engine(engine: VllmEngine, eos_token_ids: Sequence[int]) -> None:
    """Make later evaluations in this process generate with a trainer's engine (trained weights)."""
    _TRAINER_ENGINE.update(engine=engine, eos=tuple(eos_token_ids))


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [configured] if isinstance(configured, int) else list(configured or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return ids


def _tokenizer(tokenizer: Any, model_cfg: ModelConfig) -> Any:
    if tokenizer is not None:
        return tokenizer
    from grpo.models import load_tokenizer

    return load_tokenizer(model_cfg)


def _trainer_engine(mode: str, tokenizer: Any, model_cfg: ModelConfig) -> VLLMBackend | None:
    engine = _TRAINER_ENGINE.get("engine")
    if engine is None or engine.mode != mode:
        return None
    return trainer_backend(engine, _tokenizer(tokenizer, model_cfg), model_cfg, _TRAINER_ENGINE["eos"])


def weights_dir(model: Any, tokenizer: Any, model_cfg: ModelConfig) -> str:
    """A path vLLM can load the policy from: the pretrained path, or (random weights / a model
    in memory) a temporary copy saved from the model, removed when this process exits (a real
    model's copy is the size of its weights: 1.2 GB for Qwen3-0.6B in bf16)."""
    if model is None and model_cfg.source == "pretrained" and model_cfg.path:
        return model_cfg.path
    if model is None:
        from grpo.models import load_policy

        model, tokenizer = load_policy(model_cfg, device=None)  # only saved again: no GPU memory
    out = Path(tempfile.mkdtemp(prefix="grpo-vllm-weights-"))
    # at exit, not once the engine is built: vLLM may read the folder again (config, tokenizer)
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    model.save_pretrained(out)
    _tokenizer(tokenizer, model_cfg).save_pretrained(out)
    return str(out)


def make_colocate_backend(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> VLLMBackend:
    """generation=vllm_colocate outside a trainer: the trainer's engine after training, else an
    engine of our own on the model's weights."""
    reused = _trainer_engine("colocate", tokenizer, model_cfg)
    if reused is not None:
        return reused
    tokenizer = _tokenizer(tokenizer, model_cfg)
    path = weights_dir(model, tokenizer, model_cfg)
    # the model's own dtype when it is loaded ("auto" would let vLLM halve a float32 model)
    dtype = str(model.dtype).removeprefix("torch.") if model is not None else model_cfg.dtype
    llm = colocated_llm(path, gen_cfg, model_cfg, dtype=dtype, conversations=int(gen_cfg.batch_size or 64))
    return VLLMBackend(
        tokenizer,
        llm=llm,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        eos_token_ids=_eos_ids(model, tokenizer),
    )


def colocated_llm(
    path: str, gen_cfg: GenerationConfig, model_cfg: ModelConfig, *, dtype: str, conversations: int
) -> Any:
    """A vLLM engine in this process on the model at `path`, in `dtype`. On vLLM's CPU build it
    runs inside this process as TRL's colocated engine does (external_launcher, a world of one),
    with its KV cache sized for `conversations` and said in one line (grpo/generation/vllm_cpu.py)."""
    from vllm import LLM

    return LLM(
        **_cpu_engine(path, gen_cfg, model_cfg, conversations),
        model=path,
        gpu_memory_utilization=gen_cfg.gpu_memory_utilization,
        max_model_len=gen_cfg.extra.get("max_model_length"),
        tensor_parallel_size=int(gen_cfg.extra.get("tensor_parallel_size", 1)),
        dtype=dtype,
        trust_remote_code=model_cfg.trust_remote_code,
        # the returned log-probs are those of the distribution actually sampled from
        logprobs_mode="processed_logprobs",
        seed=model_cfg.seed,
    )


def _cpu_engine(
    path: str, gen_cfg: GenerationConfig, model_cfg: ModelConfig, conversations: int
) -> dict[str, Any]:
    """The CPU build's engine settings (see colocated_llm); {} on the CUDA build. Prompts are
    never split across engine steps (chunked prefill, vLLM's default): vLLM 0.29's CPU build then
    rewinds a seeded request's random generator, which its CPU generators cannot do (`RuntimeError:
    CPU Generator does not use offset` once a batch's prompts pass 4096 tokens; grpo seeds every
    request). A step then takes whole prompts: at least the model's context."""
    from grpo.generation.generator import free_port
    from grpo.generation.vllm_cpu import context_length, cpu_engine_env, vllm_build

    if vllm_build() != "cpu":
        return {}
    env, line = cpu_engine_env(gen_cfg, model_cfg, conversations)
    os.environ.update(env)
    print(line, file=sys.stderr, flush=True)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    kwargs: dict[str, Any] = {
        "distributed_executor_backend": "external_launcher",
        "enable_chunked_prefill": False,
    }
    context = gen_cfg.extra.get("max_model_length") or context_length(path, model_cfg)
    if context:
        kwargs["max_num_batched_tokens"] = max(4096, int(context))
    return kwargs


def make_server_backend(
    gen_cfg: GenerationConfig, model: Any, tokenizer: Any, model_cfg: ModelConfig
) -> VLLMBackend:
    """generation=vllm_server outside a trainer: a client of the running server (whose weights
    are the last ones a trainer pushed, or the served checkpoint)."""
    reused = _trainer_engine("server", tokenizer, model_cfg)
    if reused is not None:
        return reused
    tokenizer = _tokenizer(tokenizer, model_cfg)
    client = vllm_server_client(server_base_url(gen_cfg), gen_cfg.host, gen_cfg.port, gen_cfg.timeout_s)
    return VLLMBackend(
        tokenizer,
        client=client,
        chat_template_kwargs=model_cfg.chat_template_kwargs,
        eos_token_ids=_eos_ids(model, tokenizer),
    )


def server_base_url(gen_cfg: GenerationConfig) -> str | None:
    """generation.base_url without an OpenAI-style /v1 suffix (TRL's client adds its own paths)."""
    if not gen_cfg.base_url:
        return None
    url = gen_cfg.base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url
