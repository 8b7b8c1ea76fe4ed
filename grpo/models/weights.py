"""A policy's weights as a generator apart from the trainer needs them: under plain names, saved
and loaded as one safetensors file, and fingerprinted.

- `plain_state_dict(model)`: the weights of a plain causal LM (a LoRA policy's adapter merged into
  its base weights, under the base model's names), detached copies on the CPU;
- `save_weights(model, path)` / `load_weights(model, path)`: one safetensors file, written
  atomically (a reader never sees half of it), loaded strictly (every name and shape must match);
- `save_policy_copy(model, tokenizer, folder)`: a loadable pretrained folder (config, weights,
  tokenizer) of the policy as it is now, which `python -m grpo.serve model.path=<folder>` serves;
- `weights_identity(model, tokenizer)`: what tells two policies apart: the architecture (names,
  shapes, dtypes), the tokenizer (its vocabulary and special tokens) and a checksum of the weights.

torch, safetensors and peft load inside the functions.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# a peft model's parameter names -> the base model's: the wrapper's prefix and the LoRA layer's
# own wrapper go, the adapter's matrices are merged in and left out
_PEFT_PREFIX = "base_model.model."


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_adapter")


def _plain_name(name: str) -> str | None:
    """The base model's name of a peft state-dict entry (None for an adapter-only entry)."""
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    if ".lora_" in name or ".original_module." in name:
        return None
    return name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


def plain_state_dict(model: Any) -> dict[str, Any]:
    """The policy's weights as a plain model's state dict (CPU copies; a LoRA adapter merged in,
    then unmerged again so the trainer's model is left as it was)."""
    import torch

    with torch.no_grad():
        if not _is_peft(model):
            return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        model.merge_adapter()
        try:
            out = {}
            for name, value in model.state_dict().items():
                plain = _plain_name(name)
                if plain is not None:
                    out[plain] = value.detach().to("cpu", copy=True)
            return out
        finally:
            model.unmerge_adapter()


def state_checksum(state: dict[str, Any]) -> str:
    """A checksum of a state dict (sum and sum of squares in float64, in name order): equal
    weights give equal text."""
    import torch

    total = squares = 0.0
    with torch.no_grad():
        for name in sorted(state):
            value = state[name].double()
            total += float(value.sum())
            squares += float((value * value).sum())
    return f"{total:.17g}/{squares:.17g}"


def save_weights(model: Any, path: str | os.PathLike[str]) -> Path:
    """The policy's plain weights as one safetensors file at `path`, written next to it and
    renamed into place."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    save_file({k: v.contiguous() for k, v in plain_state_dict(model).items()}, str(part))
    os.replace(part, path)
    return path


def load_weights(model: Any, path: str | os.PathLike[str]) -> None:
    """Load a `save_weights` file into a plain model, strictly: ValueError naming the first name
    or shape that differs (the model keeps its weights then)."""
    import torch
    from safetensors.torch import load_file

    state = load_file(str(path))
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    if missing or extra:
        what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which this model does not"
        raise ValueError(f"the weights file {path} does not fit this model: it {what}")
    for name, value in state.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise ValueError(
                f"the weights file {path} does not fit this model: {name} is {tuple(value.shape)}, "
                f"here {tuple(own[name].shape)}"
            )
    with torch.no_grad():
        for name, value in state.items():
            own[name].copy_(value)


def save_policy_copy(model: Any, tokenizer: Any, folder: str | os.PathLike[str]) -> Path:
    """A pretrained folder of the policy as it is now (a LoRA adapter merged in): its config, its
    plain weights and its tokenizer, loadable by `model.source=pretrained model.path=<folder>`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    base = model.get_base_model() if _is_peft(model) else model
    base.config.save_pretrained(str(folder))
    save_weights(model, folder / "model.safetensors")
    tokenizer.save_pretrained(str(folder))
    return folder


def weights_identity(model: Any, tokenizer: Any) -> dict[str, str]:
    """{"architecture", "tokenizer", "checksum"} of a policy: the first two tell another model
    apart, the checksum other weights of the same model."""
    # a plain model's own tensors (no copy); a LoRA policy's merged copies
    state = plain_state_dict(model) if _is_peft(model) else model.state_dict()
    shapes = [(name, list(value.shape), str(value.dtype)) for name, value in sorted(state.items())]
    return {
        "architecture": _digest(shapes),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "checksum": state_checksum(state),
    }


def planned_identity(model_cfg: Any) -> dict[str, str]:
    """{"architecture", "tokenizer"} of the policy `model_cfg` loads, without its weights: the
    model is built on the meta device from its config (model.architecture, or the checkpoint's
    config.json), in model.dtype; a LoRA adapter changes neither (a generator serves the merged
    weights). What a generator at generation.base_url is checked against before anything loads."""
    import torch

    from grpo.models.loading import load_tokenizer, model_config

    config, dtype = model_config(model_cfg)
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    shapes = [
        (name, list(value.shape), str(value.dtype)) for name, value in sorted(model.state_dict().items())
    ]
    return {"architecture": _digest(shapes), "tokenizer": tokenizer_fingerprint(load_tokenizer(model_cfg))}


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A digest of what maps text to ids: the vocabulary (added tokens included) and the special
    tokens' ids."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = {k: getattr(tokenizer, k, None) for k in ("eos_token_id", "pad_token_id", "bos_token_id")}
    return _digest([vocab, special])


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()[:16]
