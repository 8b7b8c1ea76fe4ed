"""The policy's log-probabilities in GRPO training go through TRL's fused LM head, in chunks of
tokens and vocabulary: the same log-probabilities, loss and gradients as the plain path (the
model's full logits, a log-softmax over the vocabulary), and never a [batch, length, vocabulary]
tensor, on the tiny and small models, full fine-tuning and LoRA, and at Qwen3's 151,936-token
vocabulary. What the trainer computes is taken from the GRPOTrainer grpo builds: its own
`_get_per_token_logps_and_entropies` (the loss, the old and reference log-probabilities and the
importance-sampling forward all go through it) and its `compute_loss`."""

from __future__ import annotations

import pytest
import torch
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from torch.utils._python_dispatch import TorchDispatchMode

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.train.trainer import build_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS, PROMPT, COMPLETION = 4, 12, 20


class FullVocabularyTensors(TorchDispatchMode):
    """Records every tensor an operation makes whose last dimension is the vocabulary and whose
    other dimensions cover every completion position of the micro-batch at once (the LM head's
    [hidden, vocabulary] weight and its views are not logits)."""

    def __init__(self, vocab: int, positions: int, hidden: int):
        super().__init__()
        self.vocab, self.positions, self.hidden, self.seen = vocab, positions, hidden, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == self.vocab:
                if tuple(t.shape[:-1]) != (self.hidden,) and t.numel() >= self.positions * self.vocab:
                    self.seen.append(tuple(t.shape))
        return out


def trainer_for(model: str, lora: bool, tmp_path):
    cfg = load_settings(
        [
            "+env=char_target",
            f"model={model}",
            *([f"model.lora.enabled={str(lora).lower()}"]),
            *(["+model.architecture.vocab_size=151936"] if model == "tiny" and not lora else []),
            "trainer.num_generations=4",
            "trainer.per_device_batch_completions=4",
            "trainer.beta=0",
            "trainer.temperature=0.7",
            "optimizer.lr=1e-3",
            *TRAIN_ON_CUT_COMPLETIONS,
        ]
    )
    return build_trainer(cfg, build_env(cfg.env, cfg.language), tmp_path).trainer


def batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, min(vocab, 2000), (ROWS, PROMPT + COMPLETION), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding of a shorter prompt
    mask[2, -5:] = 0  # a completion that ended early (padding after it)
    return ids, mask


def plain_logps(model, ids, mask, temperature):
    """The unchunked reference: the model's own logits over the whole vocabulary, log-softmax."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, PROMPT - 1 : -1].float() / temperature
    logps = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, PROMPT:, None]).squeeze(-1)
    return logps * mask[:, PROMPT:]  # TRL's fused head gives 0 where the label is padding


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_same_gradients(got: dict, expected: dict) -> None:
    """Equal within float32 rounding of sums over the vocabulary: every entry within 1e-5 of the
    largest entry of its parameter's gradient (an elementwise relative bound fails on entries
    that are ~0 on both paths)."""
    assert got.keys() == expected.keys() and got
    for name, grad in got.items():
        # (a LoRA A matrix has no gradient while its B is still 0: both paths give zeros)
        scale = float(expected[name].abs().max())
        assert float((grad - expected[name]).abs().max()) <= 1e-5 * scale, name
    assert any(float(g.abs().max()) > 0 for g in expected.values())


@pytest.mark.parametrize(
    "model, lora",
    [("tiny", False), ("tiny", True), ("small", False), ("small", True)],
    ids=["tiny-qwen-vocab", "tiny-lora", "small", "small-lora"],
)
def test_chunked_logprobs_loss_and_gradients_equal_the_full_vocabulary_path(model, lora, tmp_path):
    trainer = trainer_for(model, lora, tmp_path)
    policy = trainer.model
    policy.train()
    vocab = policy.get_output_embeddings().weight.shape[0]
    if model == "tiny" and not lora:
        assert vocab == 151936  # Qwen3's vocabulary: a full [4, 20, V] tensor would be 48 MB here
    ids, mask = batch(vocab)
    temperature = trainer.temperature
    weights = torch.randn((ROWS, COMPLETION), generator=torch.Generator().manual_seed(1))

    # the trainer's path, watched for full-vocabulary tensors (forward and backward)
    torch.manual_seed(0)  # the same LoRA dropout masks on both paths
    with FullVocabularyTensors(vocab, ROWS * COMPLETION, policy.config.hidden_size) as watch:
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(
            policy, ids, mask, COMPLETION, compute_entropy=True
        )
        (logps * weights).sum().backward()
    chunked_grads = grads(policy)
    policy.zero_grad(set_to_none=True)
    assert watch.seen == []

    torch.manual_seed(0)
    with FullVocabularyTensors(vocab, ROWS * COMPLETION, policy.config.hidden_size) as plain_watch:
        reference = plain_logps(policy, ids, mask, temperature)
        (reference * weights).sum().backward()
    plain_grads = grads(policy)
    policy.zero_grad(set_to_none=True)
    assert plain_watch.seen, "the probe must see the plain path's [batch, length, vocabulary] logits"

    torch.testing.assert_close(logps, reference, rtol=1e-5, atol=1e-5)
    assert entropy.shape == logps.shape and bool((entropy[mask[:, PROMPT:] == 1] > 0).all())
    assert_same_gradients(chunked_grads, plain_grads)
    if lora:
        assert all("lora_" in name for name in chunked_grads)


def test_grpo_loss_through_the_fused_head_equals_the_loss_on_full_logits(tmp_path):
    """TRL's GRPO loss (its compute_loss, clipped ratio against old log-probabilities) computed by
    the trainer equals the same objective on the plain path's log-probabilities, with the same
    gradients."""
    trainer = trainer_for("small", False, tmp_path)
    policy = trainer.model
    policy.train()
    vocab = policy.get_output_embeddings().weight.shape[0]
    ids, mask = batch(vocab, seed=3)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        old = plain_logps(policy, ids, mask, trainer.temperature) + 0.3 * torch.randn(
            ROWS, COMPLETION, generator=g
        )
    advantages = torch.randn(ROWS, generator=g)
    inputs = {
        "prompt_ids": ids[:, :PROMPT],
        "prompt_mask": mask[:, :PROMPT],
        "completion_ids": ids[:, PROMPT:],
        "completion_mask": mask[:, PROMPT:],
        "advantages": advantages,
        "old_per_token_logps": old,
    }
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets before a step
    loss = trainer.compute_loss(policy, inputs)
    loss.backward()
    fused_grads = grads(policy)
    policy.zero_grad(set_to_none=True)

    # the objective written out on the full-vocabulary log-probabilities (loss_type grpo)
    logps = plain_logps(policy, ids, mask, trainer.temperature)
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
    adv = advantages[:, None]
    per_token = -torch.min(ratio * adv, clipped * adv)
    m = mask[:, PROMPT:]
    expected = ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    expected.backward()
    plain = grads(policy)

    assert trainer.loss_type == "grpo" and trainer.beta == 0
    assert abs(float(loss) - float(expected)) < 1e-5 and abs(float(expected)) > 1e-3
    assert_same_gradients(fused_grads, plain)
