"""Each phase of a run, done for real on fake tensors, and its peak (grpo/memory/tracker.py).

A `Phase` is one stretch of a run whose memory peaks once: the GRPO micro-step, generation, the
reward model's scoring, the SFT step, the reward model's training step. Each function here builds
what the phase has on the device (inside an active FakeTensorMode), runs the phase's work the way
the run does it, and returns the tracker's bytes by category at the phase's peak, with the parts
the tracker cannot see added by name (a reference model's weights: their parameters' bytes).

What is the run's own code, not a copy of it: the policy's LoRA (grpo's peft config), TRL's fused
LM head (`trl.trainer.utils.add_fused_lm_head`, the log-probabilities in chunks of tokens and
vocabulary, never a [batch, length, vocabulary] tensor) called as GRPOTrainer calls it,
transformers' activation checkpointing as its Trainer enables it, the optimizer class the Trainer
makes from the run's arguments, grpo's hf KV cache (`grpo.generation.hf.growing_cache`). The GRPO
loss's arithmetic after the log-probabilities (ratio, clip, KL, the masked mean) is TRL's formula
on [micro-batch, completion] tensors: a few MB beside the model's activations.

On a GPU, TRL folds each logits tile into running statistics with Triton kernels that write in
place; the CPU fallback does the same with torch operations and temporaries of a tile's size.
Planning for a GPU (`kind="cuda"`), the folds are replaced by in-place stand-ins for the length of
the measurement, so the plan counts the tiles and not the CPU fallback's temporaries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grpo.memory.models import fake_causal_lm, fake_sequence_classifier, parameter_bytes
from grpo.memory.tracker import measure

# TRL's GRPOTrainer adds its fused head with these per-token outputs to the policy (the reference
# model gets log-probabilities only)
POLICY_HEAD_OUTPUTS = ("log_probs", "entropy")


@dataclass
class Phase:
    """One phase's peak: bytes by part, and what the plan adds to it or says about it."""

    name: str
    parts: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def add(self, part: str, size: int) -> None:
        if size:
            self.parts[part] = self.parts.get(part, 0) + int(size)


@dataclass(frozen=True)
class StepShape:
    """The tensors of one micro-step: `rows` sequences of `prompt` + `completion` tokens."""

    rows: int
    prompt: int
    completion: int

    @property
    def tokens(self) -> int:
        return self.rows * (self.prompt + self.completion)


@contextlib.contextmanager
def fake_tensors() -> Iterator[Any]:
    """A FakeTensorMode for the models and the work of a phase (no storage behind any tensor)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


@contextlib.contextmanager
def head_kernels(kind: str) -> Iterator[None]:
    """TRL's fused LM head as fake tensors can run it, for the length of a measurement.

    The run projects only the labelled positions (grpo's switch: grpo/trl_adapter/devices.py), a
    boolean gather whose size depends on the labels' values, which fake tensors do not have; the
    plan projects every position instead (TRL's other path, the same tiles): a micro-batch's
    prompt rows more in the head's input and gradient ([prompt tokens, hidden], a few MB). Planning
    for a GPU, the tile folds are done in place as TRL's Triton kernels do them (see the module
    docstring)."""
    from grpo.trl_adapter.internals import fused_head_switch, set_fused_head_switch

    switch = fused_head_switch()
    if switch is not None:
        set_fused_head_switch(lambda device: False)
    import trl.kernels.chunked_logprob as kernels

    saved = (kernels._forward_tile, kernels._backward_tile, kernels._addmm_fp32)
    if kind == "cuda":

        def fold_in_place(tile: Any, *args: Any, **kwargs: Any) -> None:
            return None  # Triton updates the running statistics / the tile itself: no new storage

        def addmm_in_place(acc: Any, a: Any, b: Any) -> None:
            return None  # cuBLAS accumulates into `acc` in fp32 (out_dtype): no fp32 copies

        kernels._forward_tile, kernels._backward_tile = fold_in_place, fold_in_place
        kernels._addmm_fp32 = addmm_in_place
    try:
        yield
    finally:
        kernels._forward_tile, kernels._backward_tile, kernels._addmm_fp32 = saved
        if switch is not None:
            set_fused_head_switch(switch)


def make_optimizer(model: Any, optimizer_kwargs: dict[str, Any]) -> Any:
    """The optimizer the transformers Trainer makes for these grpo_config_kwargs (optim, lr,
    betas, weight decay), over the model's trainable parameters; its states are created by one
    step on zero gradients, as after a run's first step."""
    import torch
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none", **optimizer_kwargs)
    optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = optimizer_cls(trainable, **kwargs)
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def enable_checkpointing(model: Any, kwargs: dict[str, Any] | None) -> None:
    """Activation checkpointing as transformers' Trainer turns it on (trainer.py: every_n_layers
    and offload come out of the kwargs, the rest go to torch.utils.checkpoint)."""
    options = dict(kwargs or {})
    every_n_layers = options.pop("every_n_layers", 1)
    offload = options.pop("offload", False)
    model.activation_checkpointing_enable(
        activation_checkpointing_kwargs=options or None, every_n_layers=every_n_layers, offload=offload
    )


def policy_for_training(
    config: Any, dtype: Any, peft_config: Any, checkpointing: dict[str, Any] | None, temperature: float
) -> Any:
    """The policy as GRPOTrainer trains it: peft-wrapped under LoRA, TRL's fused head on the base
    model, activation checkpointing when `checkpointing` is not None (its kwargs), train mode."""
    from trl.trainer.utils import add_fused_lm_head

    model = fake_causal_lm(config, dtype, peft_config)
    base = model.get_base_model() if peft_config is not None else model
    add_fused_lm_head(base, temperature=temperature, outputs=POLICY_HEAD_OUTPUTS)
    if checkpointing is not None:
        enable_checkpointing(model, checkpointing)
        if peft_config is not None:
            model.enable_input_require_grads()  # GRPOTrainer does the same for PEFT + checkpointing
    return model.train()


def grpo_micro_step(
    model: Any,
    optimizer: Any,
    shape: StepShape,
    *,
    beta: float,
    epsilon: float,
    accumulation: int,
    autocast_dtype: Any = None,
) -> None:
    """One micro-step of GRPOTrainer: the policy's per-token log-probabilities of the completion
    through TRL's fused head (labels -100 on the prompt, as `_get_per_token_logps_and_entropies`),
    the clipped surrogate with the KL term to precomputed reference log-probabilities, backward,
    and the optimizer's step (its last micro-step)."""
    import torch

    ids = torch.zeros((shape.rows, shape.prompt + shape.completion), dtype=torch.long)
    attention = torch.ones_like(ids)
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, : shape.prompt] = -100
    autocast = (
        torch.autocast("cpu", dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with autocast:
        out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    logps = out.log_probs[:, -shape.completion :]
    mask = attention[:, -shape.completion :]
    advantages = torch.zeros((shape.rows, 1))
    ratio = torch.exp(logps - logps.detach())
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    if beta:
        reference = torch.zeros_like(logps)
        per_token = per_token + beta * (torch.exp(reference - logps) - (reference - logps) - 1)
    loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def train_phase(
    config: Any,
    dtype: Any,
    *,
    peft_config: Any,
    checkpointing: dict[str, Any] | None,
    optimizer_kwargs: dict[str, Any],
    shape: StepShape,
    accumulation: int,
    beta: float,
    epsilon: float,
    temperature: float,
    autocast_dtype: Any,
    kind: str,
    resident: dict[str, int],
) -> Phase:
    """The peak of a GRPO micro-step with the gradients of the earlier micro-steps of the step
    accumulated (when there are several) and the optimizer's states alive; `resident`: parts
    kept on the device throughout (a reference model, reward models, vLLM's share)."""
    import torch

    with fake_tensors(), head_kernels(kind):
        model = policy_for_training(config, dtype, peft_config, checkpointing, temperature)
        optimizer = make_optimizer(model, optimizer_kwargs)
        if accumulation > 1:
            for p in model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        parts = measure(
            lambda: grpo_micro_step(
                model,
                optimizer,
                shape,
                beta=beta,
                epsilon=epsilon,
                accumulation=accumulation,
                autocast_dtype=autocast_dtype,
            ),
            [model, optimizer],
        )
    phase = Phase("train", {})
    for part, size in parts.items():
        phase.add("policy weights" if part == "weights" else part, size)
    for part, size in resident.items():
        phase.add(part, size)
    return phase


def saved_activations(
    config: Any,
    dtype: Any,
    *,
    peft_config: Any,
    checkpointing: dict[str, Any] | None,
    shape: StepShape,
    temperature: float,
    autocast_dtype: Any,
    kind: str,
) -> int:
    """What a micro-batch's forward keeps for its backward: the tracker's activations alive when
    the forward returns (its transient buffers gone), with or without checkpointing; the plan's
    comparison of the two settings, at a third of a whole step's cost."""
    import torch

    with fake_tensors(), head_kernels(kind):
        model = policy_for_training(config, dtype, peft_config, checkpointing, temperature)
        ids = torch.zeros((shape.rows, shape.prompt + shape.completion), dtype=torch.long)
        labels = ids.clone()
        labels[:, : shape.prompt] = -100
        kept: list[Any] = []

        def forward() -> None:
            autocast = (
                torch.autocast("cpu", dtype=autocast_dtype)
                if autocast_dtype is not None
                else contextlib.nullcontext()
            )
            with autocast:
                kept.append(
                    model(
                        input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True
                    )
                )

        parts = measure(forward, [model], at="current")
    return parts.get("activations", 0)


def logits_chunk(
    hidden_size: int, vocab_size: int, dtype: Any, tokens: int, kind: str, head_trains: bool = True
) -> int:
    """The peak of TRL's chunked log-prob head alone, forward and backward, on `tokens` positions:
    what the [tokens, vocabulary] logits cost when they go through the head in tiles
    (`head_trains`: the head's weight gets a gradient, not under LoRA)."""
    import torch
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    with fake_tensors(), head_kernels(kind):
        hidden = torch.zeros((tokens, hidden_size), dtype=dtype, requires_grad=True)
        weight = torch.zeros((vocab_size, hidden_size), dtype=dtype, requires_grad=head_trains)
        targets = torch.zeros((tokens,), dtype=torch.long)

        def run() -> None:
            logps, entropy, *_ = ChunkedLogProbFunction.apply(
                hidden,
                weight,
                None,
                targets,
                1.0,
                _CHUNKED_LOGPROB_CHUNK_SIZE,
                None,
                1.0,
                POLICY_HEAD_OUTPUTS,
            )
            (logps.sum() + entropy.sum()).backward()

        parts = measure(run)
    # the inputs and their gradients are the step's, not the head's
    inputs = (2 * hidden.numel() + (2 if head_trains else 1) * weight.numel()) * hidden.element_size()
    return max(0, sum(parts.values()) - inputs)


def generation_phase(
    name: str,
    config: Any,
    dtype: Any,
    *,
    conversations: int,
    prompt: int,
    length: int,
    resident: dict[str, int],
    static: bool = False,
) -> Phase:
    """The peak of hf generation: `conversations` at once, prefilled with `prompt` tokens and
    decoded to `length` tokens in the hf backend's KV cache (grpo/generation/hf.py).

    The dynamic cache's layers grow into spare room (a quarter of the length, at least 256
    positions): it is filled in one chunk per growth, each ending where a token-by-token decode
    would grow it, so its final room is what a decode leaves. The static cache (`static`: the
    GPU default) is preallocated at its first update to the call's bucket (the batch padded to a
    power of two, the length rounded up to a multiple of 256 positions): a prefill and one decode
    step show it whole. `resident`: the policy's optimizer states and what else stays on the
    device."""
    import torch

    from grpo.generation.hf import STATIC_CACHE_STEP, growing_cache

    rows = 1 << max(0, conversations - 1).bit_length() if static else conversations
    with fake_tensors():
        model = fake_causal_lm(config, dtype).eval()
        if static:
            from transformers import StaticCache

            bucket = -(-length // STATIC_CACHE_STEP) * STATIC_CACHE_STEP
            cache = StaticCache(config=model.config, max_cache_len=bucket)
        else:
            cache = growing_cache(model)

        def room() -> int:
            layer = cache.layers[0] if cache is not None else None
            buffer = getattr(layer, "_room", None)
            return int(buffer[0].shape[-2]) if buffer is not None else length

        def run() -> None:
            done = 0
            with torch.no_grad():
                while done < length:
                    if static:  # the prefill, then one decode step: the cache is whole from the start
                        step = min(length, prompt) if done == 0 else 1
                    else:
                        # the prefill, then each chunk ends one token past the cache's room: the update
                        # that grows it sees the end a token-by-token decode would (end = room + 1)
                        step = min(length, prompt) if done == 0 else min(room() + 1 - done, length - done)
                    model(
                        input_ids=torch.zeros((rows, step), dtype=torch.long),
                        attention_mask=torch.ones((rows, done + step), dtype=torch.long),
                        past_key_values=cache,
                        use_cache=True,
                        logits_to_keep=1,
                        **({"cache_position": torch.arange(done, done + step)} if static else {}),
                    )
                    done += step
                    if static and done > prompt:
                        break

        parts = measure(run, [model])
        kv = 0
        for layer in getattr(cache, "layers", []) or []:
            buffers = getattr(layer, "_room", None) or (
                getattr(layer, "keys", None),
                getattr(layer, "values", None),
            )
            for buffer in buffers:
                if buffer is not None and hasattr(buffer, "numel"):
                    kv += buffer.numel() * buffer.element_size()
    phase = Phase(name, {})
    phase.add("policy weights", parts.pop("weights", 0))
    transient = sum(parts.values())
    phase.add("KV cache", min(kv, transient))
    phase.add("temporaries", max(0, transient - kv))
    for part, size in resident.items():
        phase.add(part, size)
    return phase


def scoring_phase(
    configs: list[tuple[Any, Any]], *, rows: int, length: int, resident: dict[str, int]
) -> Phase:
    """The peak of the learned reward models' scoring: every member's weights on the device, one
    member scoring `rows` sequences of `length` tokens at a time (no gradient)."""
    import torch

    with fake_tensors():
        models = [fake_sequence_classifier(config, dtype).eval() for config, dtype in configs]
        weights = sum(parameter_bytes(m) for m in models[1:])

        def run() -> None:
            with torch.no_grad():
                models[0](
                    input_ids=torch.zeros((rows, length), dtype=torch.long),
                    attention_mask=torch.ones((rows, length), dtype=torch.long),
                )

        parts = measure(run, [models[0]])
    phase = Phase("reward model scoring", {})
    phase.add("reward model", parts.pop("weights", 0) + weights)
    phase.add("temporaries", sum(parts.values()))
    for part, size in resident.items():
        phase.add(part, size)
    return phase


def supervised_phase(
    name: str,
    model: Any,
    optimizer_kwargs: dict[str, Any],
    *,
    rows: int,
    length: int,
    accumulation: int,
    pairs: bool = False,
) -> Phase:
    """The peak of one micro-step of a supervised stage on `model` (built inside an active
    FakeTensorMode): SFT (a causal LM with TRL's fused head, the loss on every token) or the
    reward model (`pairs`: chosen and rejected sequences, the Bradley-Terry loss)."""
    import torch

    optimizer = make_optimizer(model, optimizer_kwargs)
    if accumulation > 1:
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    model.train()

    def run() -> None:
        ids = torch.zeros((rows * (2 if pairs else 1), length), dtype=torch.long)
        attention = torch.ones_like(ids)
        if pairs:
            scores = model(input_ids=ids, attention_mask=attention).logits.squeeze(-1)
            chosen, rejected = scores[:rows], scores[rows:]
            loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
        else:
            loss = model(input_ids=ids, attention_mask=attention, labels=ids, fused_lm_head=True).loss
        (loss / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    parts = measure(run, [model, optimizer])
    phase = Phase(name, {})
    for part, size in parts.items():
        phase.add(("reward model" if pairs else "policy weights") if part == "weights" else part, size)
    return phase
