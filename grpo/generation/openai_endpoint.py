"""The OpenAI-compatible endpoint backend: text-level, for evaluation.

Each turn, every active conversation is sent to /v1/chat/completions at once (asyncio, at most
`max_concurrency` requests in flight): that is the endpoint's "one batched call". The server
applies the chat template, so this backend sees text only: rollouts it produces have empty
completion_ids / env_mask / logprobs, and cannot be used for training.

Retries (connection errors, timeouts, HTTP 408/409/429/5xx, with exponential backoff and jitter,
honouring Retry-After) are the openai client's own, `max_retries` times. A request that still
fails ends the evaluation with one line naming the setting to check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import openai

from grpo.errors import UserError
from grpo.generation.base import GenRequest, GenResult, Sampling

T = TypeVar("T")


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server (vLLM, transformers serve, a hosted API)."""

    token_level = False

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        chat_template_kwargs: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        api_key_var: str | None = None,
    ):
        self.base_url = base_url
        self.model = model
        self._api_key = api_key
        # the NAME of the variable holding the key (clients that read the key themselves: v1 envs)
        self.api_key_var = api_key_var
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        # server-side sampling extras (top_k, min_p, ...) and the template kwargs vLLM / transformers
        # serve accept; a hosted API may reject unknown fields, so nothing is sent unless configured
        self.extra_body = dict(extra_body or {})
        if chat_template_kwargs:
            self.extra_body.setdefault("chat_template_kwargs", dict(chat_template_kwargs))

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(base_url={self.base_url!r}, model={self.model!r})"

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        if not requests:
            return []
        for r in requests:
            if r.messages is None:
                raise ValueError("the openai backend needs messages in every request")
        return _run_sync(self._generate_all(requests, sampling))

    async def _generate_all(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        # A client per call: its connection pool belongs to this call's event loop.
        async with openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        ) as client:
            tasks = [asyncio.ensure_future(self._one(client, semaphore, r, sampling)) for r in requests]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                # one request failed for good: stop the others instead of letting them retry on
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def _one(
        self,
        client: openai.AsyncOpenAI,
        semaphore: asyncio.Semaphore,
        request: GenRequest,
        sampling: Sampling,
    ) -> GenResult:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if request.seed is not None:
            params["seed"] = request.seed
        if self.extra_body:
            params["extra_body"] = self.extra_body
        async with semaphore:
            try:
                response = await client.chat.completions.create(**params)
            except openai.OpenAIError as exc:
                raise self._user_error(exc) from exc
        if not response.choices:
            raise UserError(
                f"generation.base_url={self.base_url}: the endpoint returned no choices for a chat request"
            )
        choice = response.choices[0]
        text = choice.message.content if choice.message is not None else None
        usage = getattr(response, "usage", None)
        return GenResult(
            text=text if isinstance(text, str) else "",
            finished=choice.finish_reason != "length",
            num_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        )

    def _user_error(self, exc: openai.OpenAIError) -> UserError:
        """One line naming the setting to check for a request that failed after its retries."""
        detail = " ".join(str(exc).split())[:200]
        tries = f"after {self.max_retries} retries" if self.max_retries else "(no retries)"
        if isinstance(exc, openai.APITimeoutError):
            return UserError(
                f"generation.timeout_s={self.timeout_s}: {self.base_url} did not answer in time {tries}; "
                f"raise generation.timeout_s or check the server"
            )
        if isinstance(exc, openai.APIConnectionError):
            return UserError(
                f"generation.base_url={self.base_url}: cannot connect {tries} ({detail}); "
                f"start the server or fix the URL"
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            return UserError(
                f"generation.api_key_var: {self.base_url} rejected the API key (HTTP {exc.status_code}); "
                f"export the right key in the variable generation.api_key_var names"
            )
        if isinstance(exc, openai.NotFoundError):
            return UserError(
                f"generation.model={self.model!r}: {self.base_url} answered 404 ({detail}); "
                f"check the served model name and that base_url ends in /v1"
            )
        if isinstance(exc, openai.APIStatusError):
            return UserError(f"generation.base_url={self.base_url}: HTTP {exc.status_code} {tries}: {detail}")
        return UserError(f"generation.base_url={self.base_url}: request failed: {detail}")


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, even when this thread already runs
    an event loop (a notebook): then it runs on a short-lived worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
