"""The OpenAI-compatible endpoint backend against real HTTP servers on 127.0.0.1.

- `transformers serve` serving the tiny model saved to a temp dir (offline): the real thing.
- A small scripted server (http.server) for what a model server cannot be asked to do on cue:
  count requests in flight, fail with a 500 once, hang past the timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers.fake_envs import PingEnv

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.generation import Sampling, make_backend
from grpo.generation.openai_endpoint import OpenAIBackend
from grpo.rollout import run_rollouts

KEY_VAR = "GRPO_TEST_ENDPOINT_KEY"


# ---- a scripted OpenAI-compatible server --------------------------------------------------------


def completion_payload(body: dict[str, Any], text: str, tokens: int, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
    }


def echo(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Replies 'got: <last message>'; reports min(7, max_tokens) tokens, cut ('length') below 7."""
    last = body["messages"][-1]["content"]
    tokens = min(7, int(body["max_tokens"]))
    return 200, completion_payload(body, f"got: {last}", tokens, "stop" if tokens == 7 else "length")


class ScriptedServer:
    """A real threaded HTTP server; `behaviour(body, request_number)` returns (status, json) or None
    to hang until the server stops."""

    def __init__(
        self,
        behaviour: Callable[[dict[str, Any], int], tuple[int, dict[str, Any]] | None],
        delay: float = 0.0,
    ):
        self.behaviour = behaviour
        self.delay = delay
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    number = len(server.bodies)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.delay:
                        time.sleep(server.delay)
                    answer = server.behaviour(body, number)
                    if answer is None:
                        server.stopping.wait(30)
                        return
                    status, payload = answer
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def endpoint_backend(url: str, **overrides: Any):
    settings = {"max_concurrency": 32, "timeout_s": 10, "max_retries": 0, **overrides}
    cfg = load_settings(
        ["+env=alphabet_sort", "generation=openai", f"generation.base_url={url}", "generation.model=scripted"]
        + [f"generation.{k}={v}" for k, v in settings.items()]
    )
    return make_backend(cfg.generation, None, None, cfg.model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- tests against the scripted server ------------------------------------------------------------


def test_every_conversation_of_a_turn_is_sent_at_once(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "sk-test-123")
    env = PingEnv(turns=2)
    rows = env.rows("eval", 3)
    with ScriptedServer(lambda body, n: echo(body), delay=0.3) as server:
        backend = endpoint_backend(server.url, api_key_var=KEY_VAR)
        rollouts = run_rollouts(
            env,
            rows,
            backend,
            rollouts_per_row=2,
            sampling=Sampling(temperature=0.5, max_tokens_per_turn=9, seed=4),
        )
    assert server.max_in_flight == 6  # all six conversations of a turn in flight together
    assert len(server.bodies) == 12
    assert all(h["authorization"] == "Bearer sk-test-123" for h in server.headers)
    for body in server.bodies:
        assert body["model"] == "scripted" and body["max_tokens"] == 9
        assert body["temperature"] == 0.5 and body["top_p"] == 1.0
    # one seed per conversation and turn: the rollouts of one row are different samples
    assert len({b["seed"] for b in server.bodies}) == 12

    assert [(r.row.id, r.rollout_index) for r in rollouts] == [(row.id, k) for row in rows for k in range(2)]
    for r in rollouts:
        hello = r.row.prompt[0]["content"]
        assert r.completion == [
            {"role": "assistant", "content": f"got: {hello}"},
            {"role": "user", "content": "ping 1"},
            {"role": "assistant", "content": "got: ping 1"},
        ]
        # text-level: no token ids
        assert r.prompt_ids == r.completion_ids == r.env_mask == r.logprobs == []
        assert not r.truncated
    # turn 2 sends the whole conversation so far
    second_turn = [b for b in server.bodies if len(b["messages"]) == 3]
    assert len(second_turn) == 6
    assert all(b["messages"][1]["role"] == "assistant" for b in second_turn)


def test_max_concurrency_bounds_requests_in_flight():
    env = PingEnv(turns=1)
    with ScriptedServer(lambda body, n: echo(body), delay=0.2) as server:
        backend = endpoint_backend(server.url, max_concurrency=2)
        rollouts = run_rollouts(env, env.rows("eval", 6), backend, sampling=Sampling(max_tokens_per_turn=8))
    assert server.max_in_flight == 2
    assert len(rollouts) == len(server.bodies) == 6


def test_budget_counts_the_tokens_the_endpoint_reports():
    env = PingEnv(turns=3)
    with ScriptedServer(lambda body, n: echo(body)) as server:
        backend = endpoint_backend(server.url)
        (r,) = run_rollouts(
            env,
            env.rows("eval", 1),
            backend,
            sampling=Sampling(max_tokens_per_turn=8),
            max_completion_tokens=10,
        )
    # turn 1: 8 allowed, 7 used; turn 2: the 3 left, all used without finishing -> truncated
    assert [b["max_tokens"] for b in server.bodies] == [8, 3]
    assert r.truncated and r.num_turns == 2


def test_server_error_is_retried_with_backoff():
    def flaky(body: dict[str, Any], number: int):
        if number == 1:
            return 500, {"error": {"message": "temporarily broken", "type": "server_error"}}
        return echo(body)

    env = PingEnv(turns=1)
    with ScriptedServer(flaky) as server:
        backend = endpoint_backend(server.url, max_retries=2)
        (r,) = run_rollouts(env, env.rows("eval", 1), backend, sampling=Sampling(max_tokens_per_turn=8))
    assert len(server.bodies) == 2 and server.bodies[0] == server.bodies[1]
    assert r.completion == [{"role": "assistant", "content": "got: hello 0"}]


def test_server_error_after_the_retries_is_one_line():
    env = PingEnv(turns=1)
    with ScriptedServer(lambda body, n: (503, {"error": {"message": "overloaded"}})) as server:
        backend = endpoint_backend(server.url, max_retries=1)
        with pytest.raises(UserError, match=r"HTTP 503 after 1 retries") as info:
            run_rollouts(env, env.rows("eval", 1), backend, sampling=Sampling())
    assert len(server.bodies) == 2 and "\n" not in str(info.value)


def test_a_hanging_server_times_out_with_a_user_error():
    env = PingEnv(turns=1)
    with ScriptedServer(lambda body, n: None) as server:
        backend = endpoint_backend(server.url, timeout_s=0.5, max_retries=1)
        start = time.monotonic()
        with pytest.raises(
            UserError, match=r"generation.timeout_s=0.5: .* did not answer in time after 1 retries"
        ):
            run_rollouts(env, env.rows("eval", 2), backend, sampling=Sampling())
        assert time.monotonic() - start < 8
    assert len(server.bodies) >= 3  # both conversations were sent, and retried


def test_unreachable_endpoint_names_base_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = endpoint_backend(url)
    with pytest.raises(UserError, match=r"generation.base_url=http://127.0.0.1:\d+/v1: cannot connect"):
        run_rollouts(PingEnv(turns=1), PingEnv(turns=1).rows("eval", 1), backend, sampling=Sampling())


def test_bad_endpoint_settings_are_one_line_user_errors(monkeypatch):
    monkeypatch.delenv(KEY_VAR, raising=False)
    base = ["+env=alphabet_sort", "generation=openai", "generation.base_url=http://127.0.0.1:9/v1"]
    base = [*base, "stages=[eval]"]
    with pytest.raises(
        UserError, match=f"generation.api_key_var={KEY_VAR}: the environment variable {KEY_VAR} is not set"
    ):
        check(load_settings([*base, "generation.model=m", f"generation.api_key_var={KEY_VAR}"]))
    with pytest.raises(UserError, match="generation.model is required for generation=openai"):
        check(load_settings(base))
    with pytest.raises(UserError, match="generation.base_url='localhost:8000' must be an http"):
        check(load_settings([*base, "generation.model=m", "generation.base_url=localhost:8000"]))
    with pytest.raises(UserError, match="generation.max_concurrency=0"):
        check(load_settings([*base, "generation.model=m", "generation.max_concurrency=0"]))
    # a key that is set is used, and never shown
    monkeypatch.setenv(KEY_VAR, "sk-secret")
    settings = load_settings([*base, "generation.model=m", f"generation.api_key_var={KEY_VAR}"])
    check(settings)
    backend = make_backend(settings.generation, None, None, settings.model)
    assert isinstance(backend, OpenAIBackend) and "sk-secret" not in repr(backend)


# ---- the real thing: transformers serve on the tiny model ----------------------------------------

# transformers serve parses Qwen-architecture replies with a Qwen response template that only
# closes the content at <|im_end|>, which a random model rarely writes; the served tokenizer
# declares a plain one (content up to <|im_end|> or the end), so the reply text comes through.
PLAIN_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {"content": {"close_pattern": r"<\|im_end\|>", "content": "text"}},
}


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory):
    """(base_url, model dir, model config) of `transformers serve` running the tiny model."""
    from transformers import AutoTokenizer

    from grpo.models import save_pretrained_tiny

    # untied embeddings: a random tied model's greedy output is one token repeated
    cfg = load_settings(["+env=alphabet_sort", "model.architecture.tie_word_embeddings=false"])
    model_dir = save_pretrained_tiny(cfg.model, tmp_path_factory.mktemp("served") / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.response_template = PLAIN_RESPONSE_TEMPLATE
    tokenizer.save_pretrained(str(model_dir))

    port = free_port()
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    # one intra-op thread: a tiny model gains nothing from more, and a busy machine loses a lot
    server_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=server_env
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("transformers serve did not come up within 180 s")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", str(model_dir), cfg
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_transformers_serve_endpoint_matches_the_local_model(served_tiny):
    import torch

    from grpo.generation.hf import HFBackend
    from grpo.models import load_policy

    url, model_dir, cfg = served_tiny
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("eval", 3)
    greedy = Sampling(temperature=0.0, max_tokens_per_turn=16)
    endpoint = load_settings(
        [
            "+env=alphabet_sort",
            "generation=openai",
            f"generation.base_url={url}",
            f"generation.model={model_dir}",
        ]
    )
    backend = make_backend(endpoint.generation, None, None, endpoint.model)
    served = run_rollouts(env, rows, backend, sampling=greedy)
    model, tokenizer = load_policy(cfg.model)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = run_rollouts(
            env,
            rows,
            HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs),
            sampling=greedy,
        )
    finally:
        torch.set_num_threads(threads)

    specials = tokenizer.all_special_tokens
    for s, loc in zip(served, local, strict=True):
        # every turn taken; a turn the server stopped at max_tokens (finish_reason "length") is cut
        assert s.num_turns == s.row.info["num_turns"] and s.truncated == (s.cut_turns > 0)
        assert [m["role"] for m in s.completion] == [m["role"] for m in loc.completion]
        assert s.completion_ids == [] and s.logprobs == []
        # turn 1 is the same prompt on the same weights: the same greedy text (the server strips
        # surrounding whitespace and keeps special tokens the local decode drops)
        served_text = s.completion[0]["content"]
        for token in specials:
            served_text = served_text.replace(token, "")
        assert served_text.strip() == loc.completion[0]["content"].strip()
        assert len(loc.completion[0]["content"].strip()) > 5
