"""The HTTP side of the policy server: a threaded stdlib server (one thread per connection, the
generation on the batcher's single worker), started and stopped by its owner.

Security: it listens on 127.0.0.1 unless told otherwise; listening anywhere else requires an API
key (clients send `Authorization: Bearer <key>`), and every request is bounded (ServeLimits).
A bad request gets a 4xx JSON error {"error": {"message", "type", "code"}}; the server keeps
serving. A failure inside generation is a 500 with its message.

As a training run's generator (grpo/generation/generator.py) it also answers
/grpo/v1/generate_batch (one turn of many conversations in one backend call), takes new weights
on /grpo/v1/weights (a safetensors file, loaded between backend calls) and tells what it serves on
/grpo/v1/info (the model, the weights version, and the identity of its weights: architecture,
tokenizer, checksum).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grpo.errors import UserError
from grpo.generation.served import WEIGHTS_KEY_HEADER, WEIGHTS_KEY_VAR
from grpo.serve.batcher import Batcher
from grpo.serve.protocol import (
    BadRequest,
    ServeLimits,
    batch_jobs,
    batch_response,
    chat_job,
    chat_response,
    complete_text,
    cut_at_stop,
    generate_job,
    generate_response,
    parse_json,
)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class PolicyServer:
    """Serve a token-level backend (hf: `render`, `encode`, `decode`, `generate`) over HTTP.

    `port=0` takes a free port (see `.url` once started). `api_key`: required from clients when
    set; None is refused for a host that is not loopback. `expected_requests`: () -> the number of
    requests its owner expects outstanding at once (the batcher waits for that many, up to 250 ms).
    Use as a context manager, or `start()` / `stop()`."""

    def __init__(
        self,
        backend: Any,
        *,
        model_name: str = "grpo-policy",
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        limits: ServeLimits | None = None,
        request_timeout_s: float | None = 600.0,
        expected_requests: Any = None,
        weights_key: str | None = None,
    ):
        if not getattr(backend, "token_level", False):
            raise UserError("the policy server needs a token-level generation backend (generation=hf)")
        if not is_loopback(host) and not api_key:
            raise UserError(
                f"serve.host={host}: listening beyond loopback needs an API key "
                "(serve.api_key_var=NAME of an environment variable holding it)"
            )
        self.backend = backend
        self.model_name = model_name
        self.host, self.port = host, int(port)
        self.api_key = api_key
        # the key a trainer sends with new weights (X-Grpo-Weights-Key): only a server started by a
        # training run (or for runs, with their key) has one; without it /grpo/v1/weights is refused
        self.weights_key = weights_key or None
        self.limits = limits or ServeLimits()
        self.request_timeout_s = request_timeout_s
        # () -> how many requests its owner expects outstanding (the batcher waits for them)
        self.expected_requests = expected_requests
        tokenizer = getattr(backend, "tokenizer", None)
        self.vocab_size = (
            int(len(tokenizer)) if tokenizer is not None else int(backend.model.config.vocab_size)
        )
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.batcher: Batcher | None = None
        # model tokens generated and requests answered (benchmarks read them)
        self.completion_tokens = 0
        self.requests = 0
        # `python -m grpo.serve` as a training run's generator: the trainer's pid (it stops with it)
        self.parent_pid: int | None = None
        self._count_lock = threading.Lock()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the policy server is not started")
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self._httpd.server_address[1]}"

    def start(self) -> PolicyServer:
        self.batcher = Batcher(
            self.backend,
            max_batch=self.limits.max_batch,
            window_ms=self.limits.batch_window_ms,
            max_pending=self.limits.max_pending,
            expected=self.expected_requests,
        )
        handler = type("Handler", (_Handler,), {"policy": self})
        try:
            self._httpd = _HTTPServer((self.host, self.port), handler)
        except OSError as ex:
            self.batcher.close()
            raise UserError(
                f"the policy server cannot listen on {self.host}:{self.port} ({ex.strerror or ex})"
            ) from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="grpo-serve-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self.batcher is not None:
            self.batcher.close()
            self.batcher = None

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- what the routes do -------------------------------------------------------------------
    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.backend.encode(self.backend.render(messages, add_generation_prompt=True))

    def generate(self, data: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        job = generate_job(data, self.limits, self.vocab_size)
        job.session = session[:200] if session else None
        self._submit(job)
        return generate_response(job, data.get("request_id") or uuid.uuid4().hex)

    def chat(self, data: dict[str, Any]) -> dict[str, Any]:
        job = chat_job(data, self.limits, self.encode_chat)
        self._submit(job)
        text = complete_text(self.backend.decode(job.result.token_ids, skip_special_tokens=True))
        finished = bool(job.result.finished)
        if job.stop_strings:
            text, hit = cut_at_stop(text, job.stop_strings)
            finished = finished or hit
        return chat_response(
            job, text, finished, self.model_name, "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        )

    def generate_batch(self, data: dict[str, Any]) -> dict[str, Any]:
        jobs = batch_jobs(data, self.limits, self.vocab_size)
        assert self.batcher is not None
        self.batcher.submit_many(jobs, self.request_timeout_s)
        failed = next((j.error for j in jobs if j.error is not None), None)
        if failed is not None:
            raise failed
        with self._count_lock:
            self.completion_tokens += sum(len(j.result.token_ids) for j in jobs)
            self.requests += len(jobs)
        out = batch_response(jobs)
        if self.batcher.weights_error:
            out["weights_error"] = self.batcher.weights_error
        return out

    def offer_weights(self, data: dict[str, Any]) -> dict[str, Any]:
        """New weights from the trainer: checked against the model's names and shapes now (a 400
        when they do not fit), loaded by the batcher before its next generation."""
        path, version = data.get("path"), data.get("version")
        if not isinstance(path, str) or not path.endswith(".safetensors") or not os.path.isfile(path):
            raise BadRequest(400, "path: expected an existing .safetensors file on this machine")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise BadRequest(400, "version: expected an integer >= 0")
        model = getattr(self.backend, "model", None)
        if model is None:
            raise BadRequest(400, "this server's backend takes no weights")
        from safetensors import safe_open

        try:
            with safe_open(path, framework="pt") as f:
                shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        except Exception as ex:  # noqa: BLE001 - a damaged or foreign file
            raise BadRequest(400, f"path: not a readable safetensors file ({ex})") from None
        own = {name: tuple(t.shape) for name, t in model.state_dict().items()}
        if shapes != own:
            differ = sorted(set(shapes) ^ set(own)) or sorted(n for n in own if shapes[n] != own[n])
            raise BadRequest(400, f"the weights do not fit the served model (first difference: {differ[0]})")
        from grpo.models.weights import load_weights

        assert self.batcher is not None
        accepted = self.batcher.offer_weights(lambda: load_weights(model, path), version)
        return {"accepted_version": accepted}

    def info(self) -> dict[str, Any]:
        """What this server serves: the model id, the weights version and their identity
        (computed on the batcher's thread, between generations)."""
        from grpo.models.weights import weights_identity

        assert self.batcher is not None
        identity = self.batcher.call(
            lambda: weights_identity(self.backend.model, self.backend.tokenizer), self.request_timeout_s
        )
        return {
            "model": self.model_name,
            "pid": os.getpid(),
            "weights_version": self.batcher.weights_version,
            "weights_error": self.batcher.weights_error,
            **identity,
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "owned_by": "grpo",
                    "max_model_len": self.limits.max_prompt_tokens + self.limits.max_tokens,
                }
            ],
        }

    def _submit(self, job: Any) -> None:
        assert self.batcher is not None
        self.batcher.submit(job, self.request_timeout_s)
        with self._count_lock:
            self.completion_tokens += len(job.result.token_ids)
            self.requests += 1

    def authorized(self, header: str | None) -> bool:
        if not self.api_key:
            return True
        scheme, _, token = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), self.api_key)


class _HTTPServer(ThreadingHTTPServer):
    # the listen backlog: the stdlib's 5 drops the connections of a burst of concurrent episodes,
    # which the client's TCP then retries only after a second
    request_queue_size = 1024
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    policy: PolicyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return  # one line per request would drown the run's own output

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's handler names
        self._answer(lambda: self._route_get())

    def do_POST(self) -> None:  # noqa: N802
        self._answer(lambda: self._route_post())

    def _route_get(self) -> dict[str, Any]:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            return {"status": "ok"}
        self._check_key()
        if path in ("/v1/models", "/models"):
            return self.policy.models()
        if path == "/grpo/v1/info":
            return self.policy.info()
        raise BadRequest(404, f"no route GET {path}")

    def _route_post(self) -> dict[str, Any]:
        path = self.path.split("?", 1)[0].rstrip("/")
        self._check_key()
        length = self.headers.get("Content-Length")
        try:
            size = int(length) if length is not None else -1
        except ValueError:
            size = -1
        if size < 0:
            raise BadRequest(411, "a Content-Length header is required")
        if size > self.policy.limits.max_body_bytes:
            raise BadRequest(
                413,
                f"the body has {size} bytes; this server takes at most {self.policy.limits.max_body_bytes}",
            )
        data = parse_json(self.rfile.read(size))
        if path == "/inference/v1/generate":
            return self.policy.generate(data, self.headers.get("X-Session-ID"))
        if path in ("/v1/chat/completions", "/chat/completions"):
            return self.policy.chat(data)
        if path == "/grpo/v1/generate_batch":
            return self.policy.generate_batch(data)
        if path == "/grpo/v1/weights":
            self._check_weights_key()
            self._status = 202
            return self.policy.offer_weights(data)
        raise BadRequest(404, f"no route POST {path}")

    def _check_weights_key(self) -> None:
        """Only the training run that owns this server swaps its weights (see PolicyServer)."""
        expected = self.policy.weights_key
        if expected is None:
            raise BadRequest(
                403,
                f"this server takes no weights: it was not started by a training run (a run's generator is "
                f"started with {WEIGHTS_KEY_VAR} set, the trainer sends the same key)",
            )
        sent = self.headers.get(WEIGHTS_KEY_HEADER) or ""
        if not hmac.compare_digest(sent, expected):
            raise BadRequest(
                403,
                f"wrong or missing {WEIGHTS_KEY_HEADER}: only the run that owns this server sends weights",
            )

    def _check_key(self) -> None:
        if not self.policy.authorized(self.headers.get("Authorization")):
            raise BadRequest(401, "missing or wrong API key (send Authorization: Bearer <key>)")

    def _answer(self, route: Any) -> None:
        self._status = 200  # a route may set another success status (202: accepted)
        try:
            body = route()
            status = self._status
        except BadRequest as ex:
            status, body = ex.status, _error(ex.status, ex.message)
            if ex.status in (411, 413):
                self.close_connection = True  # the unread body would be taken for the next request
        except Exception as ex:  # noqa: BLE001 - a failed generation answers 500; the server lives on
            print(f"grpo.serve: request failed: {ex}", file=sys.stderr)
            status, body = 500, _error(500, str(ex) or type(ex).__name__)
        payload = json.dumps(body).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}
