"""The vLLM backends. On CPU: the backend's own logic (one call per turn, per-conversation budgets,
EOS, log-probs of the sampled tokens) against a stand-in for the vLLM server's HTTP client, an
external boundary. On a GPU with vLLM: real training through vllm_colocate (marked gpu)."""

from __future__ import annotations

import importlib.util
import math

import pytest

from grpo.compose import load_settings
from grpo.config import GENERATION_BACKENDS, GenerationConfig
from grpo.envs import build_env
from grpo.generation import GenRequest, Sampling, make_backend
from grpo.generation.vllm import VLLMBackend, _sampled_logprobs, server_base_url
from grpo.models import load_tokenizer
from grpo.rollout import run_rollouts


class ServerClient:
    """Answers like trl's VLLMClient.generate: every prompt gets `reply` (token ids), with the
    sampled token's log-prob listed after a more likely candidate."""

    def __init__(self, reply: list[int]):
        self.reply = reply
        self.calls: list[dict] = []

    def generate(self, prompts, n, max_tokens, generation_kwargs, **sampling):
        self.calls.append(
            {"prompts": prompts, "n": n, "max_tokens": max_tokens, **generation_kwargs, **sampling}
        )
        ids = [list(self.reply[:max_tokens]) for _ in prompts]
        return {
            "prompt_ids": prompts,
            "completion_ids": ids,
            "logprobs": [[[-0.01, -0.1 * (i + 1)] for i, _ in enumerate(seq)] for seq in ids],
            "logprob_token_ids": [[[99999, tok] for tok in seq] for seq in ids],
        }


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(load_settings(["+env=alphabet_sort"]).model)


def test_server_backend_budgets_eos_and_logprobs(tokenizer):
    eos = tokenizer.eos_token_id
    words = tokenizer("abc def", add_special_tokens=False)["input_ids"]
    client = ServerClient([*words, eos, *words])
    backend = VLLMBackend(tokenizer, client=client, eos_token_ids=[eos])
    requests = [
        GenRequest(max_new_tokens=1, prompt_ids=[5, 6]),
        GenRequest(max_new_tokens=50, prompt_ids=[7]),
    ]
    short, full = backend.generate(requests, Sampling(temperature=0.7, top_p=0.9))

    (call,) = client.calls  # one call for all conversations
    assert call["prompts"] == [[5, 6], [7]] and call["n"] == 1 and call["max_tokens"] == 50
    assert (call["temperature"], call["top_p"], call["top_k"], call["logprobs"]) == (0.7, 0.9, 0, 0)
    assert call["stop_token_ids"] == [eos]
    # cut at its own budget, not finished
    assert short.token_ids == words[:1] and not short.finished
    # stopped on EOS (kept, as the model's own token), nothing after it
    assert full.token_ids == [*words, eos] and full.finished
    assert full.text == "abc def"
    # the log-prob of the token actually sampled, not of the most likely candidate
    assert full.logprobs == pytest.approx([-0.1 * (i + 1) for i in range(len(words) + 1)])


def test_sampled_logprobs_are_nan_when_missing():
    assert _sampled_logprobs([[3, 4]], None, None)[0] == [pytest.approx(math.nan, nan_ok=True)] * 2
    assert _sampled_logprobs([[3]], [[[None, -1.0]]], [[[3, 5]]]) == [[pytest.approx(math.nan, nan_ok=True)]]
    assert _sampled_logprobs([[5]], [[[-0.5, -1.0]]], [[[3, 5]]]) == [[-1.0]]


def test_multi_turn_rollouts_make_one_server_call_per_turn(tokenizer):
    cfg = load_settings(["+env=alphabet_sort", "env.min_turns=3"])
    env = build_env(cfg.env, cfg.language)
    reply = tokenizer("<alphabetical_sorted>\nA\n</alphabetical_sorted>", add_special_tokens=False)[
        "input_ids"
    ]
    client = ServerClient([*reply, tokenizer.eos_token_id])
    backend = VLLMBackend(
        tokenizer,
        client=client,
        chat_template_kwargs=cfg.model.chat_template_kwargs,
        eos_token_ids=[tokenizer.eos_token_id],
    )
    rollouts = run_rollouts(
        env,
        env.rows("train", 2),
        backend,
        rollouts_per_row=3,
        sampling=Sampling(),
        max_completion_tokens=2048,
    )
    assert len(client.calls) == 3 and all(len(c["prompts"]) == 6 for c in client.calls)
    for r in rollouts:
        assert r.num_turns == 3 and not r.truncated
        assert sum(r.env_mask) == 3 * (len(reply) + 1)
        assert len(r.logprobs) == len(r.completion_ids) == len(r.env_mask)


def test_server_url_and_factory_registration():
    assert server_base_url(GenerationConfig(base_url="http://gpu1:8000/v1/")) == "http://gpu1:8000"
    assert server_base_url(GenerationConfig(base_url=None)) is None
    from grpo.generation import BACKENDS

    # every backend the schema allows has a factory
    assert set(BACKENDS) == set(GENERATION_BACKENDS)


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or not __import__("torch").cuda.is_available(),
    reason="needs a CUDA GPU and vLLM",
)
def test_vllm_colocate_trains_and_evaluates(tmp_path):
    from grpo.train.trainer import train

    cfg = load_settings(
        [
            "+env=alphabet_sort",
            "generation=vllm_colocate",
            "generation.gpu_memory_utilization=0.2",
            "trainer.max_steps=2",
            "trainer.beta=0",
            "trainer.max_completion_length=512",
            "generation.max_tokens_per_turn=32",
        ]
    )
    env = build_env(cfg.env, cfg.language)
    result = train(cfg, env, tmp_path)
    assert result.global_step == 2
    assert "sampling/importance_sampling_ratio/mean" in result.metrics
    backend = make_backend(cfg.generation, result.model, result.tokenizer, cfg.model)  # the trainer's engine
    rollouts = run_rollouts(env, env.rows("eval", 2), backend, rollouts_per_row=2, sampling=Sampling(seed=0))
    assert len(rollouts) == 4


def test_the_weights_copy_made_for_vllm_is_removed_when_the_process_exits():
    """A model with no folder of its own (random weights, a model trained in memory) is saved to a
    temporary folder for vLLM to load; a real process makes one, sees it, and exits: it is gone
    (a real model's copy is its whole weights: left behind, they filled /tmp)."""
    import subprocess
    import sys
    from pathlib import Path

    from helpers.grpo_process import process_env

    script = (
        "from grpo.compose import load_settings\n"
        "from grpo.generation.vllm import weights_dir\n"
        "from pathlib import Path\n"
        "out = Path(weights_dir(None, None, load_settings(['+env=alphabet_sort']).model))\n"
        "assert (out / 'config.json').is_file() and (out / 'tokenizer_config.json').is_file(), list(out.iterdir())\n"
        "print(out)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=process_env(None), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = Path(done.stdout.strip().splitlines()[-1])
    assert out.name.startswith("grpo-vllm-weights-")
    assert not out.exists()
