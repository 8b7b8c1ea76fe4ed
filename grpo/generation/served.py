"""The token-level backend over grpo's policy server in another process: a training run's generator.

    backend = ServedBackend("http://127.0.0.1:8123", tokenizer, eos_token_ids=..., timeout_s=300)

One `generate` call per turn sends every conversation of the turn in ONE request to the server's
/grpo/v1/generate_batch, which generates them in one backend call (grpo/serve/batcher.py), as the
hf backend does in-process: the server keeps a conversation's KV cache to its next turn (each
conversation is a session), and returns the sampled ids with their log-probabilities under the
sampling distribution (what the trainer's importance-sampling correction reads). Rendering and
tokenising stay here, with the trainer's tokenizer, so ids are exact whichever side generates.

A verifiers v1 environment's own training client calls the same server's /inference/v1/generate
(`server_url`, `served_model`).

Failures are `GeneratorError` with one line: the server unreachable (refused, reset, no answer
within `timeout_s`), an HTTP error, or weights it could not load. Light: the standard library only.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any

from grpo.generation.base import ChatTokenizerSide, GenRequest, GenResult, Sampling


class GeneratorError(RuntimeError):
    """The generator apart from the trainer failed: unreachable, too slow, or it refused a request."""


# the environment variable holding the key of a policy server's weights route (a run sets it for the
# generator it starts and sends it with every push), and the header it travels in
WEIGHTS_KEY_VAR = "GRPO_WEIGHTS_KEY"
WEIGHTS_KEY_HEADER = "X-Grpo-Weights-Key"


def call_server(
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    timeout_s: float,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """GET (no body) or POST a JSON body to `url + path` (with `headers`); the JSON answer ({} for
    an empty one), or GeneratorError."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        url.rstrip("/") + path, data=data, method="GET" if data is None else "POST"
    )
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            text = reply.read().decode("utf-8")
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        raise GeneratorError(
            f"the generator at {url} answered {path} with something other than JSON"
        ) from None
    except urllib.error.HTTPError as ex:
        try:
            message = json.loads(ex.read().decode("utf-8"))["error"]["message"]
        except Exception:  # noqa: BLE001 - not the server's JSON error
            message = ex.reason
        raise GeneratorError(
            f"the generator at {url} answered {path} with HTTP {ex.code}: {message}"
        ) from None
    except TimeoutError:
        raise GeneratorError(f"the generator at {url} did not answer {path} within {timeout_s:g} s") from None
    except (urllib.error.URLError, ConnectionError, OSError) as ex:
        reason = getattr(ex, "reason", ex)
        raise GeneratorError(f"the generator at {url} is unreachable ({reason})") from None


class ServedBackend(ChatTokenizerSide):
    """Generate on grpo's policy server at `url` (see the module docstring)."""

    token_level = True

    def __init__(
        self,
        url: str,
        tokenizer: Any,
        *,
        eos_token_ids: Sequence[int],
        chat_template_kwargs: dict[str, Any] | None = None,
        timeout_s: float = 300.0,
        api_key: str | None = None,
        model_name: str = "grpo-policy",
    ):
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        self.timeout_s = float(timeout_s)
        self.api_key = api_key
        self.model_name = model_name
        # names this backend's conversations apart on a server other clients may use too
        self._sessions = uuid.uuid4().hex[:12]
        # the weights version of each answer since the last `take_versions()`
        self._versions: list[int] = []

    @property
    def server_url(self) -> str:
        """The server's root URL (a v1 environment's training client calls /inference/v1/generate)."""
        return self.url

    @property
    def served_model(self) -> str:
        return self.model_name

    def take_versions(self) -> list[int]:
        """The weights versions the server generated with since the last call."""
        versions, self._versions = self._versions, []
        return versions

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling) -> list[GenResult]:
        if not requests:
            return []
        body = {
            "requests": [self._request(r) for r in requests],
            "sampling_params": {"temperature": float(sampling.temperature), "top_p": float(sampling.top_p)},
        }
        answer = call_server(
            self.url, "/grpo/v1/generate_batch", body, timeout_s=self.timeout_s, api_key=self.api_key
        )
        if answer.get("weights_error"):
            raise GeneratorError(
                f"the generator at {self.url} kept its old weights: {answer['weights_error']}"
            )
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(requests):
            raise GeneratorError(
                f"the generator at {self.url} answered {len(results or [])} of {len(requests)} requests"
            )
        self._versions.append(int(answer.get("weights_version", 0)))
        return [
            GenResult(
                text=self.decode(r["token_ids"], skip_special_tokens=True),
                token_ids=list(r["token_ids"]),
                logprobs=[float(x) for x in r["logprobs"]],
                finished=bool(r["finished"]),
                num_tokens=len(r["token_ids"]),
            )
            for r in results
        ]

    def _request(self, r: GenRequest) -> dict[str, Any]:
        if not r.prompt_ids:
            raise ValueError("the served backend needs non-empty prompt_ids in every request")
        out: dict[str, Any] = {"token_ids": list(r.prompt_ids), "max_tokens": int(r.max_new_tokens)}
        if r.seed is not None:
            out["seed"] = int(r.seed)
        if r.stop_token_ids:
            out["stop_token_ids"] = sorted(r.stop_token_ids)
        if r.conversation is not None:
            out["session"] = f"{self._sessions}:{r.conversation}"
        return out
