"""The policy server's wire formats: request bodies checked against the bounds into `Job`s, and
the response bodies. No HTTP, no torch: the server (grpo/serve/server.py) calls these.

/inference/v1/generate (vLLM's tokens-in/tokens-out contract, as verifiers' training client and
the `renderers` package speak it):
    in:  {"model": str, "token_ids": [int, ...], "sampling_params": {"max_tokens", "temperature",
          "top_p", "seed", "stop_token_ids", "logprobs", ...}}
    out: {"request_id": str, "prompt_token_ids": [...], "choices": [{"index": 0, "token_ids": [...],
          "logprobs": {"content": [{"token": "token_id:<id>", "logprob": float}, ...]},
          "finish_reason": "stop" | "length"}], "usage": {...}}
  The returned ids end with the stop token when the model stopped on one (vLLM does the same);
  logprobs are under the distribution the token was drawn from (temperature / top-p applied).

/v1/chat/completions (OpenAI): messages in, the assistant's text out; tools, n > 1 and streaming
are refused with a 400. `stop` strings cut the text (the tokens generated past them are dropped).

/grpo/v1/generate_batch (a training run's generator: one turn of many conversations, generated
together as grpo's rollout engine does in-process):
    in:  {"requests": [{"token_ids": [...], "max_tokens": int, "seed": int?, "stop_token_ids": [...]?,
          "session": str?}, ...], "sampling_params": {"temperature", "top_p"}}
    out: {"results": [{"token_ids": [...], "logprobs": [...], "finished": bool}, ...],
          "weights_version": int (the oldest weights any of them was generated with)}
/grpo/v1/weights: {"path": a safetensors file the server can read, "version": int} -> 202
{"accepted_version"}: the server loads it before its next generation (grpo/serve/batcher.py).

Sampling keys this server does not implement (top_k, min_p, penalties, ...) are refused with a 400
when set to a value that would change the distribution, so a client never gets a silently
different sampler; neutral values (top_k -1 / 0, min_p 0, penalties 0 or 1) pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.generation.base import Sampling


class BadRequest(Exception):  # noqa: N818 - an HTTP answer, not a program error
    """A request the server refuses: `status` (4xx) and a one-line message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for: a bad or hostile request gets a 4xx, not an out-of-memory."""

    # prompt tokens of one request, at most (chat: after the chat template)
    max_prompt_tokens: int = 4096
    # new tokens of one request, at most (also the default when a request names none)
    max_tokens: int = 1024
    # requests generated together in one backend call, at most
    max_batch: int = 32
    # requests waiting for the worker, at most (more: 429)
    max_pending: int = 256
    # request body bytes, at most (more: 413)
    max_body_bytes: int = 8 * 1024 * 1024
    # ms the worker waits for more requests after the first one before it generates
    batch_window_ms: float = 5.0


@dataclass
class Job:
    """One request, checked: what the worker generates for it."""

    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    stop_token_ids: frozenset[int] = frozenset()
    # chat only: texts that end the reply (cut after generation)
    stop_strings: tuple[str, ...] = ()
    # the client's conversation (its X-Session-ID header): the hf backend keeps a conversation's KV
    # cache from one request to its next, so a turn encodes only the tokens added since
    session: str | None = None
    # filled by the worker
    result: Any = None
    error: BaseException | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> tuple[float, float]:
        """Jobs with the same key share one backend call (each keeps its own seed)."""
        return (self.sampling.temperature, self.sampling.top_p)


# sampling keys accepted and ignored when they have these neutral values (anything else: 400)
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "top_k": lambda v: v in (None, -1, 0),
    "min_p": lambda v: v in (None, 0, 0.0),
    "repetition_penalty": lambda v: v in (None, 1, 1.0),
    "presence_penalty": lambda v: v in (None, 0, 0.0),
    "frequency_penalty": lambda v: v in (None, 0, 0.0),
    "n": lambda v: v in (None, 1),
    "best_of": lambda v: v in (None, 1),
    "stream": lambda v: v in (None, False),
    "logit_bias": lambda v: not v,
    "tools": lambda v: not v,
    "tool_choice": lambda v: v in (None, "none", "auto"),
}
# keys that never change what is sampled (bookkeeping, output shape)
_IGNORED = frozenset(
    {
        "model",
        "logprobs",
        "prompt_logprobs",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "detokenize",
        "user",
        "metadata",
        "store",
        "top_logprobs",
        "chat_template_kwargs",
        "reasoning_effort",
        "request_id",
        "priority",
        "cache_salt",
        "return_token_ids",
        "routed_experts_prompt_start",
        "parallel_tool_calls",
        "stream_options",
        "max_completion_tokens",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "stop_token_ids",
        "messages",
        "token_ids",
        "sampling_params",
        "ignore_eos",
        "min_tokens",
    }
)


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as ex:
        raise BadRequest(400, f"the body is not valid JSON ({ex})") from None
    if not isinstance(data, dict):
        raise BadRequest(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def _number(params: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not (low <= float(value) <= high):
        raise BadRequest(400, f"{key}: expected a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _int(params: Mapping[str, Any], key: str, default: int | None, low: int, high: int) -> int | None:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
        raise BadRequest(400, f"{key}: expected an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _token_ids(value: Any, key: str, vocab_size: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(400, f"{key}: expected a list of integer token ids")
    bad = [t for t in value if not 0 <= t < vocab_size]
    if bad:
        raise BadRequest(
            400, f"{key}: unknown token id {bad[0]} (the vocabulary has ids 0..{vocab_size - 1})"
        )
    return list(value)


def _check_unsupported(params: Mapping[str, Any], where: str) -> None:
    for key, value in params.items():
        neutral = _NEUTRAL.get(key)
        if neutral is not None:
            if not neutral(value):
                raise BadRequest(400, f"{where}{key}={value!r} is not supported by this server")
        elif key not in _IGNORED and not key.startswith("x_"):
            # unknown keys would be silently ignored by a lenient server; say so instead
            raise BadRequest(400, f"{where}{key}: unknown sampling parameter")


def _sampling(params: Mapping[str, Any], limits: ServeLimits, where: str) -> tuple[int, Sampling]:
    _check_unsupported(params, where)
    max_tokens = _int(params, "max_tokens", None, 1, limits.max_tokens)
    if max_tokens is None:
        max_tokens = _int(params, "max_completion_tokens", limits.max_tokens, 1, limits.max_tokens)
    temperature = _number(params, "temperature", 1.0, 0.0, 100.0)
    top_p = _number(params, "top_p", 1.0, 1e-6, 1.0)
    seed = _int(params, "seed", None, -(2**63), 2**63 - 1)
    if seed is not None:
        seed %= 2**63  # torch seeds are non-negative
    return int(max_tokens or limits.max_tokens), Sampling(
        temperature=temperature, top_p=top_p, max_tokens_per_turn=int(max_tokens or 1), seed=seed
    )


def _check_prompt(ids: Sequence[int], limits: ServeLimits) -> None:
    if not ids:
        raise BadRequest(400, "the prompt is empty")
    if len(ids) > limits.max_prompt_tokens:
        raise BadRequest(
            400, f"the prompt has {len(ids)} tokens; this server takes at most {limits.max_prompt_tokens}"
        )


def generate_job(data: Mapping[str, Any], limits: ServeLimits, vocab_size: int) -> Job:
    """A /inference/v1/generate body as a Job (a 400 for anything wrong or over the bounds)."""
    for key in data:
        if key not in ("model", "token_ids", "sampling_params", "request_id", "priority", "cache_salt"):
            if key in ("features", "content_parts"):
                raise BadRequest(400, f"{key}: multimodal input is not supported by this server")
            raise BadRequest(400, f"{key}: unknown field")
    ids = _token_ids(data.get("token_ids"), "token_ids", vocab_size)
    _check_prompt(ids, limits)
    params = data.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest(400, "sampling_params: expected an object")
    max_tokens, sampling = _sampling(params, limits, "sampling_params.")
    stops = params.get("stop_token_ids") or []
    stop_ids = frozenset(_token_ids(stops, "sampling_params.stop_token_ids", vocab_size))
    if params.get("stop"):
        raise BadRequest(400, "sampling_params.stop: stop strings are not supported here; use stop_token_ids")
    return Job(ids, max_tokens, sampling, stop_ids)


def chat_job(
    data: Mapping[str, Any], limits: ServeLimits, encode_chat: Callable[[list[dict]], list[int]]
) -> Job:
    """A /v1/chat/completions body as a Job; `encode_chat(messages)` renders the chat template."""
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "messages: expected a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
            raise BadRequest(
                400, f"messages[{i}]: expected {{'role': system|user|assistant, 'content': ...}}"
            )
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise BadRequest(400, f"messages[{i}].content: only text parts are supported")
        elif content is not None and not isinstance(content, str):
            raise BadRequest(400, f"messages[{i}].content: expected text")
    params = {k: v for k, v in data.items() if k != "messages"}
    max_tokens, sampling = _sampling(params, limits, "")
    stop = params.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(400, "stop: expected a string or a list of non-empty strings")
    plain = [
        {
            "role": "system" if m["role"] == "developer" else m["role"],
            "content": m.get("content")
            if not isinstance(m.get("content"), list)
            else "".join(p.get("text", "") for p in m["content"]),
        }
        for m in messages
    ]
    ids = encode_chat(plain)
    _check_prompt(ids, limits)
    return Job(ids, max_tokens, sampling, frozenset(), stops)


def generate_response(job: Job, request_id: str) -> dict[str, Any]:
    result = job.result
    return {
        "request_id": request_id,
        "prompt_token_ids": job.prompt_ids,
        "choices": [
            {
                "index": 0,
                "token_ids": list(result.token_ids),
                "logprobs": {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": float(lp)}
                        for t, lp in zip(result.token_ids, result.logprobs, strict=True)
                    ]
                },
                "finish_reason": "stop" if result.finished else "length",
            }
        ],
        "usage": _usage(job),
    }


def chat_response(
    job: Job, text: str, finished: bool, model: str, request_id: str, created: int
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop" if finished else "length",
            }
        ],
        "usage": _usage(job),
    }


def complete_text(text: str) -> str:
    """A reply's text without U+FFFD: a byte-level tokenizer decodes bytes that are not complete
    UTF-8 (a character whose bytes a token limit cut, or invalid bytes a weak model wrote) as the
    replacement character; the server drops them instead of returning it."""
    return text.replace("\ufffd", "")


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _usage(job: Job) -> dict[str, int]:
    n = len(job.result.token_ids)
    return {
        "prompt_tokens": len(job.prompt_ids),
        "completion_tokens": n,
        "total_tokens": len(job.prompt_ids) + n,
    }


def batch_jobs(data: Mapping[str, Any], limits: ServeLimits, vocab_size: int) -> list[Job]:
    """A /grpo/v1/generate_batch body as Jobs (a 400 for anything wrong or over the bounds)."""
    for key in data:
        if key not in ("requests", "sampling_params"):
            raise BadRequest(400, f"{key}: unknown field")
    requests = data.get("requests")
    if not isinstance(requests, list) or not requests:
        raise BadRequest(400, "requests: expected a non-empty list")
    if len(requests) > limits.max_pending:
        raise BadRequest(
            400, f"requests: {len(requests)} at once; this server takes at most {limits.max_pending}"
        )
    shared = data.get("sampling_params") or {}
    if not isinstance(shared, dict) or set(shared) - {"temperature", "top_p"}:
        raise BadRequest(400, "sampling_params: expected an object with temperature and top_p only")
    jobs = []
    for i, request in enumerate(requests):
        if not isinstance(request, dict):
            raise BadRequest(400, f"requests[{i}]: expected an object")
        unknown = set(request) - {"token_ids", "max_tokens", "seed", "stop_token_ids", "session"}
        if unknown:
            raise BadRequest(400, f"requests[{i}].{sorted(unknown)[0]}: unknown field")
        params = {
            **shared,
            **{k: request[k] for k in ("max_tokens", "seed", "stop_token_ids") if k in request},
        }
        job = generate_job(
            {"token_ids": request.get("token_ids"), "sampling_params": params}, limits, vocab_size
        )
        session = request.get("session")
        if session is not None and not isinstance(session, str):
            raise BadRequest(400, f"requests[{i}].session: expected a string")
        job.session = session[:200] if session else None
        jobs.append(job)
    return jobs


def batch_response(jobs: Sequence[Job]) -> dict[str, Any]:
    return {
        "results": [
            {
                "token_ids": list(job.result.token_ids),
                "logprobs": [float(x) for x in job.result.logprobs],
                "finished": bool(job.result.finished),
            }
            for job in jobs
        ],
        "weights_version": min(int(job.extra.get("weights_version", 0)) for job in jobs),
    }
