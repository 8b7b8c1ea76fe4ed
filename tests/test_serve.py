"""grpo's policy server (grpo/serve/) on the tiny model, over real HTTP: concurrent requests are
batched and give the same tokens as one-at-a-time generation under greedy decoding, with finite
logprobs in vLLM's "token_id:<id>" form; bad requests get a 4xx with a message and the server keeps
serving; an API key is required when one is set, and listening beyond loopback without one is
refused."""

from __future__ import annotations

import json
import math
import threading

import httpx
import pytest

from grpo.compose import load_settings
from grpo.errors import UserError
from grpo.generation import make_backend
from grpo.serve import PolicyServer, ServeLimits

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def backend():
    settings = load_settings(["+env=alphabet_sort", "model=tiny"])
    return make_backend(settings.generation, None, None, settings.model)


@pytest.fixture(scope="module")
def server(backend):
    limits = ServeLimits(max_prompt_tokens=64, max_tokens=32, max_batch=8, batch_window_ms=50)
    with PolicyServer(backend, limits=limits) as srv:
        yield srv


def prompts(backend, n):
    texts = ["hej", "sortera namnen", "hello there friend", "zz", "Привет", "名前"][:n]
    return [backend.encode(backend.render([{"role": "user", "content": t}], True)) for t in texts]


def generate(url, ids, max_tokens, **params):
    body = {"model": "grpo-policy", "token_ids": ids, "sampling_params": {"max_tokens": max_tokens, **params}}
    return httpx.post(url + "/inference/v1/generate", json=body, timeout=120)


def test_concurrent_requests_are_batched_and_match_one_at_a_time_greedy(server, backend):
    rows = prompts(backend, 6)
    limits = [3, 7, 5, 7, 2, 6]  # each request's own max tokens
    before = server.batcher.calls
    alone = [generate(server.url, ids, n, temperature=0).json() for ids, n in zip(rows, limits, strict=True)]
    assert server.batcher.calls - before == 6

    together: list = [None] * 6
    gate = threading.Barrier(6)

    def call(i):
        gate.wait()
        together[i] = generate(server.url, rows[i], limits[i], temperature=0).json()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    before = server.batcher.calls
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.batcher.calls - before < 6  # at least two requests shared a generate call
    for i, (a, b) in enumerate(zip(alone, together, strict=True)):
        ca, cb = a["choices"][0], b["choices"][0]
        assert ca["token_ids"] == cb["token_ids"], i
        assert 1 <= len(cb["token_ids"]) <= limits[i]
        assert b["prompt_token_ids"] == rows[i]
        content = cb["logprobs"]["content"]
        assert [c["token"] for c in content] == [f"token_id:{t}" for t in cb["token_ids"]]
        assert all(math.isfinite(c["logprob"]) and c["logprob"] <= 0 for c in content)
        assert cb["finish_reason"] in ("stop", "length")


def test_stop_token_ids_end_a_request_and_are_kept(server, backend):
    ids = prompts(backend, 1)[0]
    free = generate(server.url, ids, 6, temperature=0).json()["choices"][0]["token_ids"]
    stop = free[min(2, len(free) - 1)]
    cut = generate(server.url, ids, 6, temperature=0, stop_token_ids=[stop]).json()["choices"][0]
    assert cut["token_ids"] == free[: free.index(stop) + 1]
    assert cut["finish_reason"] == "stop"


def test_seeded_sampled_requests_get_their_own_tokens_in_a_batch(server, backend):
    rows = prompts(backend, 4)
    alone = [generate(server.url, ids, 6, temperature=1.0, seed=100 + i).json() for i, ids in enumerate(rows)]
    together: list = [None] * 4
    gate = threading.Barrier(4)

    def call(i):
        gate.wait()
        together[i] = generate(server.url, rows[i], 6, temperature=1.0, seed=100 + i).json()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    before = server.batcher.calls
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.batcher.calls - before < 4
    assert [a["choices"][0]["token_ids"] for a in alone] == [b["choices"][0]["token_ids"] for b in together]
    other = generate(server.url, rows[0], 6, temperature=1.0, seed=999).json()["choices"][0]["token_ids"]
    assert other != alone[0]["choices"][0]["token_ids"]  # the seed decides the draw


def test_seeded_sampling_repeats(server, backend):
    ids = prompts(backend, 1)[0]
    a = generate(server.url, ids, 8, temperature=1.0, seed=7).json()["choices"][0]["token_ids"]
    b = generate(server.url, ids, 8, temperature=1.0, seed=7).json()["choices"][0]["token_ids"]
    assert a == b


def test_chat_completions(server):
    body = {
        "model": "grpo-policy",
        "messages": [{"role": "user", "content": "hej"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert 1 <= reply["usage"]["completion_tokens"] <= 4
    models = httpx.get(server.url + "/v1/models").json()["data"]
    assert models[0]["id"] == "grpo-policy" and models[0]["max_model_len"] == 64 + 32


def test_a_reply_cut_mid_character_never_carries_a_replacement_character(server, backend):
    """A byte-level tokenizer cut inside a character decodes the incomplete bytes as U+FFFD; the
    chat route drops them. The tiny model's replies (random tokens, many of them lone bytes of
    multi-byte characters) decoded as they are carry U+FFFD; the same requests through the chat
    route never do."""
    from grpo.serve.protocol import complete_text

    ids = backend.tokenizer("名前", add_special_tokens=False).input_ids
    cut = next(i for i in range(1, len(ids)) if "\ufffd" in backend.decode(ids[:i]))
    assert complete_text(backend.decode(ids[:cut])) == backend.decode(ids[:cut]).replace("\ufffd", "")
    assert (
        "\ufffd" not in complete_text(backend.decode(ids[:cut]))
        and complete_text(backend.decode(ids)) == "名前"
    )
    raw_replacements = 0
    for seed in range(8):
        message = [{"role": "user", "content": f"Sort: Bo, Al ({seed})"}]
        params = {"max_tokens": 24, "temperature": 1.0, "seed": seed}
        tokens = generate(server.url, backend.encode(backend.render(message, True)), **params).json()
        raw_replacements += "\ufffd" in backend.decode(tokens["choices"][0]["token_ids"])
        body = {"model": "grpo-policy", "messages": message, **params}
        reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
        assert "\ufffd" not in reply["choices"][0]["message"]["content"]
    assert raw_replacements > 0  # the case is exercised: the plain decode did carry U+FFFD


def test_only_the_run_that_owns_a_server_swaps_its_weights(backend, tmp_path, monkeypatch):
    """A server a user started (no GRPO_WEIGHTS_KEY) refuses /grpo/v1/weights with 403, whatever
    is sent; one started with a key (a run's generator) takes that key only."""
    from grpo.generation.served import WEIGHTS_KEY_HEADER

    body = {"path": str(tmp_path / "w.safetensors"), "version": 1}
    with PolicyServer(backend) as plain:
        refused = httpx.post(plain.url + "/grpo/v1/weights", json=body, headers={WEIGHTS_KEY_HEADER: "x"})
        assert (
            refused.status_code == 403
            and "not started by a training run" in refused.json()["error"]["message"]
        )
    with PolicyServer(backend, weights_key="the-runs-key") as owned:
        wrong = httpx.post(owned.url + "/grpo/v1/weights", json=body, headers={WEIGHTS_KEY_HEADER: "guess"})
        assert wrong.status_code == 403
        missing = httpx.post(owned.url + "/grpo/v1/weights", json=body)
        assert missing.status_code == 403
        # the right key gets past the gate to the file check (this path does not exist)
        right = httpx.post(
            owned.url + "/grpo/v1/weights", json=body, headers={WEIGHTS_KEY_HEADER: "the-runs-key"}
        )
        assert right.status_code == 400 and "path" in right.json()["error"]["message"]


@pytest.mark.parametrize(
    "path,body,status,words",
    [
        ("/inference/v1/generate", b"{not json", 400, "not valid JSON"),
        ("/inference/v1/generate", b"[1, 2]", 400, "JSON object"),
        (
            "/inference/v1/generate",
            json.dumps({"token_ids": [5, 10**7]}).encode(),
            400,
            "unknown token id 10000000",
        ),
        ("/inference/v1/generate", json.dumps({"token_ids": [-1]}).encode(), 400, "unknown token id -1"),
        ("/inference/v1/generate", json.dumps({"token_ids": [5] * 65}).encode(), 400, "at most 64"),
        ("/inference/v1/generate", json.dumps({"token_ids": []}).encode(), 400, "empty"),
        (
            "/inference/v1/generate",
            json.dumps({"token_ids": [5], "sampling_params": {"max_tokens": 33}}).encode(),
            400,
            "max_tokens",
        ),
        (
            "/inference/v1/generate",
            json.dumps({"token_ids": [5], "sampling_params": {"temperature": "hot"}}).encode(),
            400,
            "temperature",
        ),
        (
            "/inference/v1/generate",
            json.dumps({"token_ids": [5], "sampling_params": {"top_k": 5}}).encode(),
            400,
            "top_k=5 is not supported",
        ),
        (
            "/inference/v1/generate",
            json.dumps({"token_ids": [5], "sampling_params": {"n": 4}}).encode(),
            400,
            "n=4",
        ),
        ("/v1/chat/completions", json.dumps({"messages": "hi"}).encode(), 400, "messages"),
        (
            "/v1/chat/completions",
            json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode(),
            400,
            "at most 64",
        ),
        (
            "/v1/chat/completions",
            json.dumps(
                {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}
            ).encode(),
            400,
            "tools",
        ),
        ("/nowhere", b"{}", 404, "no route"),
    ],
)
def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(server, backend, path, body, status, words):
    reply = httpx.post(
        server.url + path, content=body, headers={"Content-Type": "application/json"}, timeout=60
    )
    assert reply.status_code == status
    assert words in reply.json()["error"]["message"]
    ok = generate(server.url, prompts(backend, 1)[0], 2, temperature=0)
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) >= 1


def test_an_oversized_body_gets_413(server):
    reply = httpx.post(
        server.url + "/inference/v1/generate", content=b" " * (8 * 1024 * 1024 + 1), timeout=60
    )
    assert reply.status_code == 413


def test_api_key_is_required_when_set(backend):
    with PolicyServer(backend, api_key="s3cret", limits=ServeLimits(max_tokens=4)) as srv:
        ids = prompts(backend, 1)[0]
        body = {"token_ids": ids, "sampling_params": {"max_tokens": 2, "temperature": 0}}
        assert httpx.post(srv.url + "/inference/v1/generate", json=body).status_code == 401
        wrong = httpx.post(
            srv.url + "/inference/v1/generate", json=body, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401 and "API key" in wrong.json()["error"]["message"]
        assert httpx.get(srv.url + "/v1/models").status_code == 401
        right = httpx.post(
            srv.url + "/inference/v1/generate", json=body, headers={"Authorization": "Bearer s3cret"}
        )
        assert right.status_code == 200
        assert httpx.get(srv.url + "/health").status_code == 200


def test_listening_beyond_loopback_needs_a_key(backend):
    with pytest.raises(UserError, match="needs an API key"):
        PolicyServer(backend, host="0.0.0.0")


def test_the_serve_command_answers_and_stops_on_ctrl_c(tmp_path):
    import os
    import re
    import signal
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo.serve", "model=tiny", "serve.port=0", "serve.model_name=mine"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        body = {"model": "mine", "messages": [{"role": "user", "content": "hej"}], "max_tokens": 3}
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()
        assert reply["model"] == "mine" and reply["usage"]["completion_tokens"] <= 3
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped after 1 request (" in out


def test_the_serve_command_refuses_bad_settings_in_one_line(tmp_path):
    import subprocess
    import sys

    bad = subprocess.run(
        [sys.executable, "-m", "grpo.serve", "model=tiny", "serve.host=0.0.0.0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: serve.host=0.0.0.0: listening beyond loopback needs an API key "
        "(serve.api_key_var=NAME of an environment variable holding it)"
    ]


def test_a_conversation_continues_its_kv_cache_past_a_retokenised_history(backend):
    """The hf backend keeps a conversation's cache between requests (the server passes the
    client's X-Session-ID): a prompt that extends the cached tokens reuses all of them, one that
    re-tokenised part of the history reuses the shared prefix, and the tokens are those of a
    fresh generation (greedy)."""
    from grpo.generation.base import GenRequest, Sampling
    from grpo.generation.hf import HFBackend

    kept = HFBackend(backend.model, backend.tokenizer)
    fresh = HFBackend(backend.model, backend.tokenizer, reuse_kv_cache=False)
    greedy = Sampling(temperature=0)
    rows = prompts(backend, 3)
    first = kept.generate(
        [GenRequest(6, prompt_ids=p, conversation=("s", i)) for i, p in enumerate(rows)], greedy
    )
    assert all(len(r.token_ids) >= 3 for r in first)
    following = [
        rows[0] + first[0].token_ids + [5, 6],  # extends what it was given and generated
        rows[1] + [first[1].token_ids[0], 7, 8, 9],  # a different token after the first generated one
        rows[2] + first[2].token_ids[:2] + [10],  # drops part of what it generated
    ]
    before = kept.reused_tokens
    again = kept.generate(
        [GenRequest(5, prompt_ids=p, conversation=("s", i)) for i, p in enumerate(following)], greedy
    )
    shared = [len(rows[0]) + len(first[0].token_ids) - 1, len(rows[1]) + 1, len(rows[2]) + 2]
    assert kept.reused_tokens - before == sum(shared)
    reference = fresh.generate([GenRequest(5, prompt_ids=p) for p in following], greedy)
    assert [r.token_ids for r in again] == [r.token_ids for r in reference]
