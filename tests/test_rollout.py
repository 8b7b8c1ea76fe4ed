"""The batched multi-turn rollout engine over the hf backend, on the real tiny model.

The tiny model here has untied embeddings: with tied ones a random model's greedy output is the
same token repeated, which would make the greedy comparisons below trivially true.
"""

from __future__ import annotations

import pytest
import torch
from helpers.env_mask_check import mask_spans
from helpers.fake_envs import PingEnv

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.generation import GenRequest, Sampling, make_backend
from grpo.generation.hf import HFBackend, _GrowingLayer, _SampleAndRecord, growing_cache
from grpo.models import load_policy, load_tokenizer
from grpo.rollout import TurnTokenizer, run_rollouts

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


@pytest.fixture(scope="module")
def cfg():
    return load_settings(["+env=alphabet_sort", "model.architecture.tie_word_embeddings=false"])


@pytest.fixture(scope="module")
def policy(cfg):
    return load_policy(cfg.model)


@pytest.fixture(scope="module")
def env(cfg):
    return build_env(cfg.env, cfg.language)


@pytest.fixture(scope="module")
def rows(env):
    rows = env.rows("eval", 6)
    assert {r.info["num_turns"] for r in rows} >= {1, 3}, "the test needs single- and multi-turn rows"
    return rows


def hf(policy, cfg, **kwargs) -> HFBackend:
    model, tokenizer = policy
    return HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs, **kwargs)


class Spy:
    """Wraps a backend and records every generate() call (a test spy on the backend boundary)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[list[GenRequest]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        return self.inner.generate(requests, sampling)


def model_emitted_specials(rollout, tokenizer) -> bool:
    """True if the model wrote a special token other than a final EOS (decoded text drops those)."""
    special = set(tokenizer.all_special_ids)
    for mask, ids in mask_spans(rollout):
        body = ids[:-1] if ids and ids[-1] == tokenizer.eos_token_id else ids
        if mask == 1 and special.intersection(body):
            return True
    return False


def test_one_batched_generate_call_per_turn_in_row_major_order(policy, cfg, env, rows):
    spy = Spy(hf(policy, cfg))
    rollouts = run_rollouts(
        env, rows, spy, rollouts_per_row=3, sampling=Sampling(max_tokens_per_turn=12, seed=0)
    )

    assert [(r.row.id, r.rollout_index) for r in rollouts] == [(row.id, k) for row in rows for k in range(3)]
    # the env decides the turns (alphabet_sort goes on whatever the model writes): all are taken
    assert [r.num_turns for r in rollouts] == [row.info["num_turns"] for row in rows for _ in range(3)]
    max_turns = max(row.info["num_turns"] for row in rows)
    assert len(spy.calls) == max_turns
    for turn, call in enumerate(spy.calls):
        active = [r for r in rollouts if r.num_turns > turn]
        assert len(call) == len(active) == 3 * sum(row.info["num_turns"] > turn for row in rows)
        for request, rollout in zip(call, active, strict=True):
            # what the model was given is exactly a prefix of the final ids: nothing re-tokenised
            full = rollout.prompt_ids + rollout.completion_ids
            assert request.prompt_ids == full[: len(request.prompt_ids)]
            assert request.max_new_tokens == 12
    eos = set(spy.eos_token_ids)
    for r in rollouts:
        assert len(r.completion_ids) == len(r.env_mask) == len(r.logprobs)
        # no completion budget: only turns cut at their own 12-token cap make a rollout truncated
        cut = sum(1 for mask, ids in mask_spans(r) if mask == 1 and ids[-1] not in eos)
        assert r.cut_turns == cut and r.truncated == (cut > 0)


def test_env_mask_covers_exactly_the_environment_tokens(policy, cfg, env, rows):
    _, tokenizer = policy
    row = next(r for r in rows if r.info["num_turns"] == 3)
    (rollout,) = run_rollouts(env, [row], hf(policy, cfg), sampling=Sampling(max_tokens_per_turn=16, seed=3))
    spans = mask_spans(rollout)
    assert [mask for mask, _ in spans] == [1, 0, 1, 0, 1]
    assistant = [m["content"] for m in rollout.completion if m["role"] == "assistant"]
    follow_ups = [m["content"] for m in rollout.completion if m["role"] == "user"]
    assert follow_ups == row.info["follow_ups"]
    for k, (mask, ids) in enumerate(spans):
        if mask == 1:
            assert tokenizer.decode(ids, skip_special_tokens=True) == assistant[k // 2]
            continue
        # an env span closes the model's turn (the "\n" after its own <|im_end|>, or the whole
        # close if it was cut off) and renders the user turn plus the next generation prompt
        model_ids = spans[k - 1][1]
        close = "\n" if model_ids[-1] == tokenizer.eos_token_id else IM_END + "\n"
        expected = f"{close}{IM_START}user\n{follow_ups[k // 2]}{IM_END}\n{IM_START}assistant\n"
        assert tokenizer.decode(ids, skip_special_tokens=False) == expected
    for lp, mask in zip(rollout.logprobs, rollout.env_mask, strict=True):
        assert (lp == 0.0) if mask == 0 else (lp < 0.0)


def test_ids_decode_to_the_template_rendering_of_the_conversation(policy, cfg, env, rows):
    _, tokenizer = policy
    rollouts = run_rollouts(
        env, rows, hf(policy, cfg), rollouts_per_row=2, sampling=Sampling(max_tokens_per_turn=16, seed=5)
    )
    checked = 0
    for r in rollouts:
        if model_emitted_specials(r, tokenizer):
            continue
        text = tokenizer.decode(r.prompt_ids + r.completion_ids, skip_special_tokens=False)
        # the template closes the last assistant turn after the model's final token
        tail = "\n" if r.completion_ids[-1] == tokenizer.eos_token_id else IM_END + "\n"
        assert text + tail == tokenizer.apply_chat_template(r.messages, tokenize=False)
        prompt_text = tokenizer.apply_chat_template(r.row.prompt, add_generation_prompt=True, tokenize=False)
        assert r.prompt_ids == tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        checked += r.num_turns > 1
    assert checked >= 3


def test_logprobs_are_those_of_the_sampling_distribution(policy, cfg, env, rows):
    model, _ = policy
    temperature = 0.7
    row = next(r for r in rows if r.info["num_turns"] >= 2)
    (rollout,) = run_rollouts(
        env,
        [row],
        hf(policy, cfg),
        sampling=Sampling(temperature=temperature, max_tokens_per_turn=10, seed=1),
    )
    ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    start = len(rollout.prompt_ids)
    # the logits at position p predict token p + 1
    predicted = torch.log_softmax(logits[start - 1 : -1] / temperature, dim=-1)
    expected = predicted.gather(1, ids[0, start:, None]).squeeze(1)
    mask = torch.tensor(rollout.env_mask, dtype=torch.bool)
    got = torch.tensor(rollout.logprobs)
    assert mask.sum() >= 20 and (~mask).sum() > 0
    assert torch.allclose(got[mask], expected[mask], atol=1e-4)
    assert torch.all(got[~mask] == 0.0)


def test_sampler_draws_each_row_from_its_own_distribution():
    """_SampleAndRecord's draw (one uniform number per row against the cumulative probabilities):
    token frequencies match each row's softmax, tokens without probability (cut by top-p, the
    first and the last id among them) are never drawn, generate()'s argmax sees exactly the drawn
    token, and the recorded log-prob is the drawn token's."""
    a = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.25, 0.05, 0.0])
    b = torch.tensor([0.0, 0.0, 0.6, 0.0, 0.0, 0.1, 0.3])
    n = 6000
    probs = torch.stack([a, b]).repeat(n // 2, 1)  # rows alternate between the two
    picker = _SampleAndRecord(greedy=False)
    torch.manual_seed(0)
    out = picker(torch.zeros((n, 1), dtype=torch.long), probs.log())
    assert torch.isfinite(out).sum(dim=-1).eq(1).all()
    chosen = out.argmax(dim=-1)
    for parity, p in ((0, a), (1, b)):
        freq = torch.bincount(chosen[parity::2], minlength=7).double() / (n // 2)
        assert freq[p == 0].sum() == 0
        sigma = (p.double() * (1 - p.double()) / (n // 2)).sqrt()
        assert ((freq - p.double()).abs() <= 4 * sigma + 1e-12).all(), (freq, p)
    recorded = picker.finish(chosen[:, None])
    assert torch.allclose(recorded[:, 0], probs.log().gather(1, chosen[:, None]).squeeze(1))


@pytest.mark.parametrize(("u", "expected"), [(0.0, [1, 2]), (1 - 2**-53, [5, 6])])
def test_sampler_extreme_draws_stay_on_tokens_with_probability(monkeypatch, u, expected):
    """The smallest and the largest uniform numbers still land on a token with probability,
    also when zero-probability ids sit at both ends of the vocabulary."""
    a = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.25, 0.05, 0.0])
    b = torch.tensor([0.0, 0.0, 0.6, 0.0, 0.0, 0.1, 0.3])
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.full(shape, u, **kw))
    out = _SampleAndRecord(greedy=False)(torch.zeros((2, 1), dtype=torch.long), torch.stack([a, b]).log())
    assert out.argmax(dim=-1).tolist() == expected


@pytest.mark.parametrize("broken", [float("nan"), float("inf"), float("-inf")])
def test_sampler_refuses_scores_a_diverged_model_gives(broken):
    """NaN or infinite scores (diverged weights) are a one-line error naming the cause, not a
    token drawn from garbage; an all -inf row (nothing left to draw) too."""
    scores = torch.zeros((3, 5))
    scores[1] = broken
    with pytest.raises(UserError, match="NaN or infinite in 1 of 3 rows.*diverged"):
        _SampleAndRecord(greedy=False)(torch.zeros((3, 1), dtype=torch.long), scores)


def test_greedy_picker_keeps_the_scores_and_records_the_argmax():
    scores = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0]])
    picker = _SampleAndRecord(greedy=True)
    assert torch.equal(picker(torch.zeros((2, 1), dtype=torch.long), scores), scores)
    expected = torch.log_softmax(scores, dim=-1)[[0, 1], [1, 0]]
    assert torch.allclose(picker.finish(torch.tensor([[1], [0]]))[:, 0], expected)


def test_growing_cache_decodes_as_generates_own_cache(policy):
    """The preallocated-room cache layer against transformers' DynamicLayer (concatenation): the
    same greedy tokens and the same keys and values over 300 new tokens of a left-padded batch,
    which outgrows the first room and moves into a larger one."""
    from transformers import GenerationConfig

    model, _ = policy
    model.eval()
    prompts = [[5, 9, 14, 200, 31], [7, 8, 9, 10, 11, 12, 13, 14, 15], [40, 41]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    config = GenerationConfig(
        max_new_tokens=300, min_new_tokens=300, do_sample=False, pad_token_id=0, return_dict_in_generate=True
    )
    cache = growing_cache(model)
    assert cache is not None and all(isinstance(layer, _GrowingLayer) for layer in cache.layers)
    with torch.no_grad():
        ours = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, cache=cache)
        theirs = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert len(set(ours.sequences[0, width:].tolist())) > 5, "greedy output should vary"
    for mine, reference in zip(ours.cache.layers, theirs.cache.layers, strict=True):
        assert mine._room[0].shape[-2] > width + 256  # it grew once at least
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_completion_budget_caps_turns_and_ends_truncated(policy, cfg):
    ping = PingEnv(turns=3)
    rows = ping.rows("eval", 4)
    backend = hf(policy, cfg)
    # env turns are ~10 tokens: turn 1 takes 16, the env ~10, turn 2 only what is left
    spy = Spy(backend)
    rollouts = run_rollouts(
        ping,
        rows,
        spy,
        rollouts_per_row=2,
        sampling=Sampling(max_tokens_per_turn=16, seed=0),
        max_completion_tokens=40,
    )
    for r in rollouts:
        spans = mask_spans(r)
        assert len(r.completion_ids) <= 40
        assert len(spans[0][1]) <= 16
    cut = [r for r in rollouts if len(r.completion_ids) == 40]
    assert cut, "some rollout must use the whole budget"
    for r in cut:
        assert r.truncated
        (mask, last), before = mask_spans(r)[-1], len(r.completion_ids) - len(mask_spans(r)[-1][1])
        assert mask == 1 and len(last) == 40 - before < 16  # the budget, not the per-turn cap, cut it
    # the second call asked each episode for exactly what its budget allowed
    for request, r in zip(spy.calls[1], [r for r in rollouts if r.num_turns > 1], strict=True):
        used = len(request.prompt_ids) - len(r.prompt_ids)
        assert request.max_new_tokens == min(16, 40 - used)

    # a budget too small for the env turn: the episode ends after turn 1, env message not appended
    short = run_rollouts(
        ping, rows, backend, sampling=Sampling(max_tokens_per_turn=16, seed=0), max_completion_tokens=20
    )
    full_first_turns = [r for r in short if len(mask_spans(r)[0][1]) == 16]
    assert full_first_turns
    for r in full_first_turns:
        assert r.truncated and r.num_turns == 1
        assert [m["role"] for m in r.completion] == ["assistant"]
        assert r.env_mask == [1] * 16

    # no budget: every episode plays all its turns; a turn cut at its own 8-token cap (no EOS at its
    # end) is counted, and makes the rollout truncated although the episode went on
    free = run_rollouts(ping, rows[:2], backend, sampling=Sampling(max_tokens_per_turn=8, seed=0))
    eos = set(backend.eos_token_ids)
    for r in free:
        model_turns = [ids for mask, ids in mask_spans(r) if mask == 1]
        cut = sum(1 for ids in model_turns if ids[-1] not in eos)
        assert r.num_turns == 3 and len(model_turns) == 3
        assert all(len(ids) <= 8 for ids in model_turns)
        assert r.cut_turns == cut and r.truncated == (cut > 0)
    assert any(r.cut_turns for r in free), "a random model should run some turn to its cap"


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone(policy, cfg, env, rows):
    backend = hf(policy, cfg)
    sampling = Sampling(temperature=1.0, max_tokens_per_turn=12, seed=7)
    rng_before = torch.random.get_rng_state()
    first = run_rollouts(env, rows[:3], backend, rollouts_per_row=2, sampling=sampling)
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    again = run_rollouts(env, rows[:3], backend, rollouts_per_row=2, sampling=sampling)
    other = run_rollouts(
        env, rows[:3], backend, rollouts_per_row=2, sampling=Sampling(max_tokens_per_turn=12, seed=8)
    )
    assert [r.completion for r in first] == [r.completion for r in again]
    assert [r.completion_ids for r in first] == [r.completion_ids for r in again]
    assert [r.logprobs for r in first] == [r.logprobs for r in again]
    assert [r.completion_ids for r in first] != [r.completion_ids for r in other]
    # the rollouts of one row are different samples
    assert first[0].completion_ids != first[1].completion_ids


def test_batched_equals_one_conversation_at_a_time_under_greedy(policy, cfg, env, rows):
    sampling = Sampling(temperature=0.0, max_tokens_per_turn=20)
    batched_spy, sequential_spy = Spy(hf(policy, cfg)), Spy(hf(policy, cfg, batch_size=1))
    batched = run_rollouts(env, rows, batched_spy, sampling=sampling, max_completion_tokens=600)
    sequential = run_rollouts(env, rows, sequential_spy, sampling=sampling, max_completion_tokens=600)
    texts = {r.completion[0]["content"] for r in batched}
    assert len(texts) == len(rows), "greedy outputs should differ between prompts"
    for a, b in zip(batched, sequential, strict=True):
        assert a.completion_ids == b.completion_ids
        assert a.env_mask == b.env_mask
        assert a.completion == b.completion
        assert a.truncated == b.truncated
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0) < 1e-4


@pytest.mark.parametrize("max_turns", [1, 3])
def test_kv_cache_reuse_gives_the_same_greedy_rollouts(policy, cfg, max_turns):
    """A conversation's KV cache kept between its turns (the default) against encoding the whole
    conversation every turn: token for token the same episodes, rows of different lengths in one
    batch, some ending before others; only later turns reuse anything."""
    env = build_env({**cfg.env, "min_turns": 1, "max_turns": max_turns}, cfg.language)
    rows = env.rows("eval", 6)
    sampling = Sampling(temperature=0.0, max_tokens_per_turn=20)
    fresh, reusing = hf(policy, cfg, reuse_kv_cache=False), hf(policy, cfg)
    plain = run_rollouts(env, rows, fresh, rollouts_per_row=2, sampling=sampling, max_completion_tokens=400)
    reused = run_rollouts(
        env, rows, reusing, rollouts_per_row=2, sampling=sampling, max_completion_tokens=400
    )
    assert len({r.completion[0]["content"] for r in plain}) == len(rows), "greedy outputs should differ"
    for a, b in zip(plain, reused, strict=True):
        assert a.completion_ids == b.completion_ids and a.env_mask == b.env_mask
        assert a.completion == b.completion and a.truncated == b.truncated
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0) < 1e-4
    turns = {r.num_turns for r in plain}
    assert fresh.reused_tokens == 0
    if max_turns == 1:
        assert turns == {1} and reusing.reused_tokens == 0
    else:
        assert max(turns) == 3 and len(turns) > 1  # episodes end at different turns
        # every later turn of every episode continued its cache: at least its first request's tokens
        later = sum(r.num_turns - 1 for r in plain)
        assert reusing.reused_tokens >= later * min(len(r.prompt_ids) for r in plain)
    assert reusing._turn_cache is None  # dropped when the episodes are over


@pytest.mark.parametrize("max_turns", [1, 3])
def test_static_cache_gives_the_same_greedy_rollouts_as_todays_path(
    policy, cfg, max_turns, capsys, monkeypatch
):
    """generation.static_cache (a StaticCache per call, the batch padded to a power of two: the
    GPU default, CUDA graphs there) against today's dynamic cache with KV reuse: token for token
    the same greedy episodes, 12 conversations (padded to 16) of different lengths, some ending
    before others; the choice is said in one line."""
    import grpo.generation.hf as hf_module

    monkeypatch.setattr(hf_module, "_said_static", set())  # the line is said once per process
    env = build_env({**cfg.env, "min_turns": 1, "max_turns": max_turns}, cfg.language)
    rows = env.rows("eval", 6)
    sampling = Sampling(temperature=0.0, max_tokens_per_turn=20)
    dynamic, static = hf(policy, cfg), hf(policy, cfg, static_cache=True)
    today = run_rollouts(env, rows, dynamic, rollouts_per_row=2, sampling=sampling, max_completion_tokens=400)
    padded = run_rollouts(env, rows, static, rollouts_per_row=2, sampling=sampling, max_completion_tokens=400)
    assert len({r.completion[0]["content"] for r in today}) == len(rows), "greedy outputs should differ"
    for a, b in zip(today, padded, strict=True):
        assert a.completion_ids == b.completion_ids and a.env_mask == b.env_mask
        assert a.completion == b.completion and a.truncated == b.truncated
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0) < 1e-4
    assert static.reused_tokens == 0 and static._turn_cache is None  # every turn encodes its conversation
    assert "a static KV cache (no CUDA graphs on CPU)" in capsys.readouterr().err
    # null (the default) is the dynamic cache on CPU
    assert not hf(policy, cfg)._static() and hf(policy, cfg, static_cache=None).static_cache is None


def test_kv_cache_is_kept_only_for_one_call_per_turn(policy, cfg, env, rows):
    """Chunked calls (generation.batch_size) encode whole conversations: nothing is reused."""
    chunked = hf(policy, cfg, batch_size=2)
    run_rollouts(env, rows, chunked, sampling=Sampling(temperature=0.0, max_tokens_per_turn=16))
    assert chunked.reused_tokens == 0 and chunked._turn_cache is None


QWEN3_LIKE_TEMPLATE = (
    # Qwen3 non-thinking style: the generation prompt pre-fills an empty think block, and an
    # assistant turn keeps that block only while it is the latest one: adding a turn REWRITES it.
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and loop.index0 > ns.last_user -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
)


def test_template_that_rewrites_history_keeps_the_ids_the_model_saw(policy, cfg):
    model, _ = policy
    tokenizer = load_tokenizer(cfg.model)
    tokenizer.chat_template = QWEN3_LIKE_TEMPLATE
    spy = Spy(HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs))
    ping = PingEnv(turns=2)
    row = ping.rows("eval", 1)[0]
    (r,) = run_rollouts(ping, [row], spy, sampling=Sampling(max_tokens_per_turn=12, seed=2))

    think = "<think>\n\n</think>\n\n"
    turn1, turn2 = (c[0].prompt_ids for c in spy.calls)
    spans = mask_spans(r)
    assert [m for m, _ in spans] == [1, 0, 1]
    # turn 2 sees exactly turn 1's input, the model's own tokens, then the env turn
    assert turn2 == turn1 + spans[0][1] + spans[1][1]
    close = "\n" if spans[0][1][-1] == tokenizer.eos_token_id else IM_END + "\n"
    assert tokenizer.decode(spans[1][1], skip_special_tokens=False) == (
        f"{close}{IM_START}user\nping 1{IM_END}\n{IM_START}assistant\n{think}"
    )
    seen = tokenizer.decode(r.prompt_ids + r.completion_ids, skip_special_tokens=False)
    rerendered = tokenizer.apply_chat_template(r.messages, tokenize=False)
    # the template drops turn 1's think block on re-render; the ids keep it, as the model saw it
    assert seen.count(think) == 2 and rerendered.count(think) == 1


def test_hf_backend_rows_stop_at_their_own_limits_and_train_mode_is_restored(policy, cfg, env, rows):
    model, tokenizer = policy
    backend = hf(policy, cfg)
    prompts = [
        tokenizer.apply_chat_template(row.prompt, add_generation_prompt=True, tokenize=False)
        for row in rows[:3]
    ]
    ids = [backend.encode(p) for p in prompts]
    limits = [3, 11, 6]
    greedy = Sampling(temperature=0.0)
    model.train()
    try:
        together = backend.generate(
            [GenRequest(n, prompt_ids=p) for n, p in zip(limits, ids, strict=True)], greedy
        )
        assert model.training
    finally:
        model.eval()
    alone = [
        backend.generate([GenRequest(n, prompt_ids=p)], greedy)[0] for n, p in zip(limits, ids, strict=True)
    ]
    assert not model.training
    for n, a, b in zip(limits, together, alone, strict=True):
        assert len(a.token_ids) == n or a.finished
        assert a.token_ids == b.token_ids and a.text == b.text and a.num_tokens == len(a.token_ids)
        assert len(a.logprobs) == len(a.token_ids)


def test_make_backend_and_bad_generation_settings(policy, cfg):
    model, tokenizer = policy
    backend = make_backend(
        load_settings(["+env=alphabet_sort", "generation.batch_size=4"]).generation,
        model,
        tokenizer,
        cfg.model,
    )
    assert isinstance(backend, HFBackend) and backend.batch_size == 4 and backend.model is model

    def rule_error(*overrides: str) -> str:
        with pytest.raises(UserError) as info:
            check(load_settings(["+env=alphabet_sort", *overrides]))
        return str(info.value)

    assert rule_error("generation.backend=nope") == (
        "generation.backend='nope' is not available; choose one of: hf, openai, vllm_colocate, vllm_server"
    )
    assert "generation.batch_size=0" in rule_error("generation.batch_size=0")
    assert "generation.max_tokens_per_turn=0" in rule_error("generation.max_tokens_per_turn=0")
    assert "eval.temperature" in rule_error("eval.temperature=-1")
    assert "eval.top_p" in rule_error("eval.top_p=0")
    assert "trainer.temperature" in rule_error("trainer.temperature=0")


def test_template_that_cannot_render_a_turn_incrementally_is_a_user_error(policy, cfg):
    model, _ = policy
    tokenizer = load_tokenizer(cfg.model)
    # every rendering starts with the message count: no conversation is a prefix of a longer one
    tokenizer.chat_template = "{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}"
    turns = TurnTokenizer(HFBackend(model, tokenizer, chat_template_kwargs=cfg.model.chat_template_kwargs))
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(UserError, match="cannot render an environment turn incrementally"):
        turns.env_text(history, [{"role": "user", "content": "c"}])
