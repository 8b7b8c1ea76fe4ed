"""The run's models as the plan builds them: configs read without weights, models made of fake tensors.

`policy_config` reads the policy's architecture the way the run will load it: `model.architecture`
(source=random, grpo's own Qwen3 builder and tokenizer) or the checkpoint's config.json
(source=pretrained: a local dir, the hub cache, or the hub; no weights are read). The models are
then built with transformers' `from_config` inside an active FakeTensorMode, so their parameters
have shapes and dtypes and no storage. `reward_model_configs` does the same for the learned reward
models a GRPO run scores with, and `backbone_config` for the one a reward_model stage trains.

A config that cannot be read (a hub id offline, a folder without config.json) is a `PlanSkipped`:
the plan says why in one line and the run goes on without it.
"""

from __future__ import annotations

from typing import Any

from grpo.config import GrpoConfig, ModelConfig, RewardModelBackboneConfig
from grpo.errors import UserError
from grpo.models.loading import config_dtype


class PlanSkipped(Exception):
    """The plan cannot be made for this run (its one line says why)."""


def with_random_weights(settings: GrpoConfig, preset: str) -> GrpoConfig:
    """`settings` with the policy's weights those of a random-weights model preset (conf/model/
    <preset>.yaml: qwen3_0_6b_random, qwen3_4b_random), every other setting kept: a recipe's memory
    plan or GPU check for an architecture whose checkpoint is not here (the same memory, no hub)."""
    import dataclasses

    from grpo.compose import load_settings

    random = load_settings(["+env=alphabet_sort", f"model={preset}"]).model
    model = dataclasses.replace(
        settings.model, source="random", path=None, tokenizer=None, architecture=random.architecture
    )
    return dataclasses.replace(settings, model=model)


def policy_config(model: ModelConfig) -> tuple[Any, Any]:
    """(transformers config, torch dtype) of the policy, read without its weights (grpo's loader:
    grpo/models/loading.py); PlanSkipped when its config.json cannot be read here."""
    from grpo.models.loading import model_config

    try:
        return model_config(model)
    except (UserError, OSError, ValueError) as ex:
        raise PlanSkipped(
            f"model.path={model.path!r}: its config.json cannot be read here ({_first_line(ex)})"
        ) from None


def _pretrained_config(path: str, field: str, trust_remote_code: bool) -> Any:
    from grpo.models.loading import pretrained_config

    try:
        return pretrained_config(path, field, trust_remote_code)
    except (UserError, OSError, ValueError) as ex:
        raise PlanSkipped(
            f"{field}={path!r}: its config.json cannot be read here ({_first_line(ex)})"
        ) from None


def _first_line(ex: BaseException) -> str:
    text = str(ex).strip()
    return text.splitlines()[0] if text else type(ex).__name__


def backbone_config(backbone: RewardModelBackboneConfig) -> tuple[Any, Any]:
    """(config, dtype) of the reward model a reward_model stage trains: its backbone preset's
    architecture (source=random; the vocabulary of the tokenizer it would train, at most
    tokenizer_vocab_size) or its checkpoint's config.json."""
    if backbone.source == "random":
        from grpo.models.tiny import qwen3_config, tiny_tokenizer

        architecture: dict[str, Any] = dict(backbone.architecture or {})
        if backbone.tokenizer_vocab_size and "vocab_size" not in architecture:
            architecture["vocab_size"] = int(backbone.tokenizer_vocab_size)
        config = qwen3_config(architecture, tiny_tokenizer("right"))
    else:
        config = _pretrained_config(
            str(backbone.path), "reward_model.backbone.path", backbone.trust_remote_code
        )
    config.num_labels = 1
    return config, config_dtype(backbone.dtype)


def reward_model_configs(settings: GrpoConfig) -> list[tuple[Any, Any]]:
    """(config, dtype) of every learned reward model the GRPO reward scores with: each of
    reward_model.checkpoints, or the one this run's reward_model stage trains."""
    rm = settings.reward_model
    if rm.kind == "rubric":
        return []
    if not rm.checkpoints:
        return [backbone_config(rm.backbone)]
    configs = []
    for i, path in enumerate(rm.checkpoints):
        config = _pretrained_config(str(path), f"reward_model.checkpoints[{i}]", False)
        configs.append((config, config_dtype("auto", str(getattr(config, "dtype", None) or "float32"))))
    return configs


def fake_causal_lm(config: Any, dtype: Any, peft_config: Any = None) -> Any:
    """A causal LM of `config` in `dtype` (peft-wrapped with `peft_config`, as GRPOTrainer wraps it),
    its tensors fake: see `materialize`."""
    from transformers import AutoModelForCausalLM

    def build() -> Any:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        return model

    return materialize(build)


def fake_sequence_classifier(config: Any, dtype: Any) -> Any:
    """A sequence-classification model of `config` (the reward models), its tensors fake."""
    from transformers import AutoModelForSequenceClassification

    return materialize(lambda: AutoModelForSequenceClassification.from_config(config, dtype=dtype))


def materialize(build: Any) -> Any:
    """`build()` on the meta device (no storage, no fake tensors: peft moves its adapters with
    `.to()`, which a module of fake parameters refuses), then every tensor made a fake CPU tensor
    of the active FakeTensorMode (`to_empty`), and tied weights (the LM head and the embedding)
    tied again."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.device("meta"):
        model = build()
    model.to_empty(device="cpu")
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()
    return model


def parameter_bytes(model: Any) -> int:
    """The bytes of a model's parameters and buffers (each storage once)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        key = id(tensor.untyped_storage()) if hasattr(tensor, "untyped_storage") else id(tensor)
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


def describe(model: Any, dtype: Any) -> str:
    """`Qwen3ForCausalLM (28 layers, hidden 1,024, vocabulary 151,936, 0.60B parameters, bfloat16)`:
    what the plan measured."""
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    return (
        f"{type(model).__name__} ({getattr(config, 'num_hidden_layers', '?')} layers, hidden "
        f"{getattr(config, 'hidden_size', 0):,}, vocabulary {getattr(config, 'vocab_size', 0):,}, "
        f"{_count(params)} parameters, {str(dtype).removeprefix('torch.')})"
    )


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
