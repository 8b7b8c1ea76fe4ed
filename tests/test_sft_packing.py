"""Padding-free SFT batches (sft.padding_free, the default) train exactly what padded ones do.

A padding-free micro-batch is its conversations back to back in one row; the attention of
grpo/models/packed_attention.py keeps them apart. Here one batch of demonstrations of different
lengths, languages and turn counts (alphabet-sort under language=mix with 1-3 turns, and a JSONL
conversation with system and user turns) goes through the SFT stage's own trainer both ways: the
per-token losses, the labelled tokens and the weight gradients are the padded batch's.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.models import load_policy
from grpo.models.packed_attention import PACKED_ATTENTION, packed_attention
from grpo.sft.data import env_demonstrations, load_conversations
from grpo.sft.train import _attention_for, build_sft_trainer, prepare_examples

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONVERSATION = {
    "messages": [
        {"role": "system", "content": "Sort the names."},
        {"role": "user", "content": "Östen, Åsa, Zelda"},
        {"role": "assistant", "content": "Zelda, Åsa, Östen"},
        {"role": "user", "content": "And now: Ärla, Bo"},
        {"role": "assistant", "content": "Bo, Ärla"},
    ],
    "language": "sv",
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """The stage's trainers (padded and padding-free) on one batch of 9 demonstrations."""
    tmp = tmp_path_factory.mktemp("packing")
    settings = load_settings(
        ["+env=alphabet_sort", "stages=[sft]", "language=mix", "env.min_turns=1", "env.max_turns=3"]
    )
    env = build_env(settings.env, settings.language)
    path = tmp / "c.jsonl"
    path.write_text(json.dumps(CONVERSATION, ensure_ascii=False) + "\n")
    demos = [*env_demonstrations(env, 8), *load_conversations(path)]
    model, tokenizer = load_policy(settings.model)
    examples = prepare_examples(settings, env, demos, model, tokenizer)
    padded = dataclasses.replace(settings, sft=dataclasses.replace(settings.sft, padding_free=False))
    trainers = {
        "padded": build_sft_trainer(padded, model, tokenizer, examples, tmp / "padded"),
        "packed": build_sft_trainer(settings, model, tokenizer, examples, tmp / "packed"),
    }
    inputs = {
        name: t.data_collator([t.train_dataset[i] for i in range(len(examples))])
        for name, t in trainers.items()
    }
    return settings, model, demos, examples, inputs


def token_losses(model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy of every labelled token (in order) and the labelled token ids."""
    model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
    logits = model(**model_inputs).logits.float()
    labels = inputs["labels"]
    shifted = labels[:, 1:]
    keep = shifted != -100
    losses = torch.nn.functional.cross_entropy(logits[:, :-1][keep], shifted[keep], reduction="none")
    return losses, shifted[keep]


def test_the_batch_covers_lengths_languages_and_turn_counts(batch):
    _, _, demos, examples, inputs = batch
    assert len({len(e.input_ids) for e in examples}) >= 5
    assert len({d.language for d in demos}) >= 3
    assert {len(d.answers) for d in demos} >= {1, 2, 3}
    # padded: one row per conversation; padding-free: one row, positions restarting per conversation
    assert inputs["padded"]["input_ids"].shape[0] == len(examples)
    packed = inputs["packed"]
    assert packed["input_ids"].shape == (1, sum(len(e.input_ids) for e in examples))
    assert "attention_mask" not in packed
    assert int((packed["position_ids"][0] == 0).sum()) == len(examples)


def test_packed_and_padded_batches_give_the_same_per_token_losses_and_labels(batch):
    _, model, demos, examples, inputs = batch
    model.eval()
    with torch.no_grad():
        padded, padded_tokens = token_losses(model, inputs["padded"])
        with packed_attention(model):
            packed, packed_tokens = token_losses(model, inputs["packed"])
    # the same tokens are trained, in the same order: the assistant turns (+ their stop token)
    assert torch.equal(packed_tokens, padded_tokens)
    wanted = [t for e in examples for t, bit in zip(e.input_ids, e.assistant_mask, strict=True) if bit]
    assert packed_tokens.tolist() == wanted
    assert torch.allclose(packed, padded, atol=1e-5, rtol=1e-5)
    # the same row with its boundaries taken away (one sequence, same positions) gives other
    # losses: what keeps the conversations apart is the attention, and the test sees it
    packed_inputs = inputs["packed"]
    total = packed_inputs["input_ids"].shape[1]
    one = torch.tensor([0, total], dtype=torch.int32)
    with torch.no_grad(), packed_attention(model):
        leaked, _ = token_losses(model, {**packed_inputs, "cu_seq_lens_q": one, "cu_seq_lens_k": one})
    assert not torch.allclose(leaked, padded, atol=1e-3)


def test_packed_and_padded_batches_give_the_same_gradients(batch):
    _, model, _, _, inputs = batch
    model.train()

    def gradients(name: str) -> dict[str, torch.Tensor]:
        model.zero_grad()
        losses, _ = token_losses(model, inputs[name])
        losses.mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    padded = gradients("padded")
    with packed_attention(model):
        packed = gradients("packed")
    model.zero_grad()
    assert padded.keys() == packed.keys() and len(padded) > 10
    for name, grad in padded.items():
        assert torch.allclose(packed[name], grad, atol=1e-5, rtol=1e-4), name


def test_the_stage_swaps_the_attention_only_while_it_trains(batch):
    settings, model, *_ = batch
    before = model.config._attn_implementation
    assert before != PACKED_ATTENTION
    with _attention_for(settings, model):
        assert model.config._attn_implementation == PACKED_ATTENTION
    assert model.config._attn_implementation == before
    padded = dataclasses.replace(settings, sft=dataclasses.replace(settings.sft, padding_free=False))
    with _attention_for(padded, model):
        assert model.config._attn_implementation == before


def test_a_model_under_packed_attention_still_generates_as_before(batch):
    """Padded batches (generation, scoring) take transformers' own sdpa path unchanged."""
    _, model, _, examples, _ = batch
    model.eval()
    prompts = [e.input_ids[:20] for e in examples[:3]]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    plain = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    with packed_attention(model):
        swapped = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    assert torch.equal(plain, swapped)
