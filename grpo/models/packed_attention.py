"""Attention for padding-free batches on any device: each packed sequence attends only to itself.

A padding-free batch (TRL's `padding_free=True` collator) is one row holding every conversation of
the micro-batch back to back, with position ids restarting at 0 at each conversation and the
boundaries given as `cu_seq_lens_q` (cumulative lengths). The linear layers then run on real tokens
only, with no padding. What keeps the conversations apart is the attention: FlashAttention's varlen
kernels do it on GPUs, but transformers' `sdpa` on a CPU builds one dense block-diagonal mask over
the whole row, so its attention costs (sum of lengths)^2 instead of sum(length^2) and the step is
slower than the padded one (measured: 2.7 s vs 1.0 s per step on the alphabet-sort SFT recipe).

`packed_sdpa` (registered as PACKED_ATTENTION with transformers' AttentionInterface and
AttentionMaskInterface) runs causal SDPA once per conversation: every conversation's queries see
exactly its own keys, as in a padded batch with its padding masked out, so the per-token losses are
those of the padded batch (tests/test_sft_packing.py). The attention alone runs on a padded
batch (one SDPA call), the linear layers on the real tokens. Batches that are not padding-free (an attention mask, no boundaries, a sliding
window) take transformers' own `sdpa` path unchanged, so a model set to this implementation still
generates and scores as before.

    with packed_attention(model):   # the SFT stage, for the length of training
        trainer.train()

torch / transformers are imported inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

PACKED_ATTENTION = "grpo_packed_sdpa"


def _boundaries(kwargs: dict[str, Any], length: int) -> list[int] | None:
    """The start of every packed sequence and the end of the last one, or None when the batch
    carries no boundaries (a plain batch)."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is not None:
        return [int(x) for x in cu.tolist()]
    position_ids = kwargs.get("position_ids")
    if position_ids is None or position_ids.shape[0] != 1:
        return None
    starts = (position_ids[0] == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        return None
    return [*starts, length]


def packed_sdpa(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """An AttentionInterface function: (batch, heads, tokens, head_dim) in, (batch, tokens, heads,
    head_dim) out, as transformers' sdpa_attention_forward."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    length = query.shape[2]
    bounds = None
    if attention_mask is None and query.shape[0] == 1 and key.shape[2] == length:
        if kwargs.get("sliding_window") is None:
            bounds = _boundaries(kwargs, length)
    if bounds is None or len(bounds) <= 2:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    starts = torch.tensor(bounds[:-1], device=query.device)
    lengths = torch.tensor(bounds[1:], device=query.device) - starts
    width = int(lengths.max())
    # conversation i as row i of a right-padded batch; a padding slot reads token 0. Exact under
    # causal attention: a real query sees only earlier keys of its own row, all real; padding
    # queries are dropped below, so nothing flows back into the slots they read
    offsets = torch.arange(width, device=query.device)
    real = offsets[None, :] < lengths[:, None]
    index = torch.where(real, starts[:, None] + offsets[None, :], 0).reshape(-1)
    rows = len(bounds) - 1
    q, k, v = (_rows(t, index, rows, width) for t in (query, key, value))
    result, _ = sdpa_attention_forward(
        module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True
    )
    # (rows, width, heads, head_dim) -> the real tokens, in their order in the packed row
    return result.reshape(rows * width, *result.shape[2:])[real.reshape(-1)].unsqueeze(0), None


def _rows(t: Any, index: Any, rows: int, width: int) -> Any:
    """A (1, heads, tokens, head_dim) tensor as a (rows, heads, width, head_dim) batch: the tokens
    at `index`, row by row."""
    return t[0].index_select(1, index).view(t.shape[1], rows, width, t.shape[3]).transpose(0, 1)


def packed_mask(*args: Any, **kwargs: Any) -> Any:
    """An AttentionMaskInterface function: no mask for a padding-free batch (packed_sdpa keeps the
    sequences apart itself, instead of a dense (tokens x tokens) mask); sdpa's mask otherwise."""
    from transformers.masking_utils import sdpa_mask

    if kwargs.get("attention_mask") is None:
        return None
    return sdpa_mask(*args, **kwargs)


def register() -> None:
    """Make PACKED_ATTENTION a name transformers knows (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_sdpa)
    AttentionMaskInterface.register(PACKED_ATTENTION, packed_mask)


@contextlib.contextmanager
def packed_attention(model: Any) -> Iterator[None]:
    """Run `model` with PACKED_ATTENTION inside the block, then restore its own implementation."""
    register()
    before = model.config._attn_implementation
    model.set_attn_implementation(PACKED_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
