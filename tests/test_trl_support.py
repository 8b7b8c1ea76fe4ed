"""TRL's fused log-prob head scores only labelled positions on CPU (grpo/trl_support.py): the SFT
loss, its token metrics and the gradients are those of the full projection, and both trainers turn
the switch on."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.models import load_policy
from grpo.sft.data import env_demonstrations
from grpo.sft.train import build_sft_trainer, prepare_examples
from grpo.trl_support import score_labelled_positions_on_cpu

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CPU = torch.device("cpu")


@pytest.fixture
def full_head():
    """TRL's own switch for the duration of a test (the patch is process-wide and idempotent)."""
    saved = trl_utils._use_triton
    while getattr(trl_utils._use_triton, "_grpo_compact_on_cpu", False):
        trl_utils._use_triton = trl_utils._use_triton.__wrapped__
    yield trl_utils._use_triton
    trl_utils._use_triton = saved


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model(**batch, fused_lm_head=True)
    mask = batch["labels"][:, 1:] != -100
    loss = -out.log_probs.sum() / mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, loss.item(), grads


def test_compact_scoring_equals_the_full_projection(tmp_path, full_head):
    settings = load_settings(["+env=alphabet_sort", "sft.num_examples=8", "sft.max_steps=1"])
    env = build_env(settings.env, settings.language)
    model, tokenizer = load_policy(settings.model)
    examples = prepare_examples(settings, env, env_demonstrations(env, 8), model, tokenizer)
    assert not full_head(CPU)  # TRL alone projects every position on CPU
    trainer = build_sft_trainer(settings, model, tokenizer, examples, tmp_path / "ck")
    assert trl_utils._use_triton(CPU)  # building the SFT trainer turned the compact path on
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(examples))])
    labelled = (batch["labels"][:, 1:] != -100).float().mean().item()
    assert 0.05 < labelled < 0.6  # prompts and padding are most of the positions

    compact_out, compact_loss, compact_grads = _loss_and_grads(model, batch)
    trl_utils._use_triton = full_head
    full_out, full_loss, full_grads = _loss_and_grads(model, batch)

    assert compact_loss == pytest.approx(full_loss, rel=1e-5)
    assert torch.allclose(compact_out.log_probs, full_out.log_probs, atol=1e-5)
    assert torch.equal(compact_out.label_mask, full_out.label_mask)
    assert compact_grads.keys() == full_grads.keys() and len(full_grads) > 10
    for name, grad in full_grads.items():
        assert torch.allclose(compact_grads[name], grad, atol=1e-6, rtol=1e-4), name


def test_the_switch_is_idempotent(full_head):
    assert score_labelled_positions_on_cpu() and score_labelled_positions_on_cpu()
    assert trl_utils._use_triton.__wrapped__ is full_head  # wrapped once, not twice
    assert trl_utils._use_triton(CPU) and trl_utils._use_triton(torch.device("meta")) == full_head(
        torch.device("meta")
    )


def test_speed_and_eta_count_only_the_steps_this_process_ran():
    from grpo.trl_support import clock, speed_and_eta

    # resumed at step 2, 5 steps run here in 10 s, 10 of 17 left
    assert speed_and_eta(10.0, 5, 7, 17) == "2.00 s/step, eta 0:00:20"
    assert speed_and_eta(10.0, 0, 7, 17) == ""
    assert clock(3725.4) == "1:02:05" and clock(float("nan")) == "?"
