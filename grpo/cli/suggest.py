"""Close matches for mistakes on the command line: "did you mean" for a key or a group option.

Hydra answers a key typo with its append hint (`To append to your config use +trainer.max_stepz=4`),
which points the wrong way, and takes `+trainer.max_stepz=4` silently. The preflight asks here for
the key or option the user most likely meant, from the composed config tree (so env keys and
options of user config dirs count) and from the schema. Light: omegaconf and difflib only.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator

from omegaconf import DictConfig, OmegaConf

# difflib's ratio for a suggestion: 0.6 takes max_stepz -> max_steps, trainr -> trainer, and
# leaves unrelated words without one
CUTOFF = 0.6


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, or None when none is close."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the closest choice, or ""."""
    close = close_match(word, choices)
    return f"; did you mean {close}?" if close else ""


def closest_key(cfg: DictConfig, key: str) -> str | None:
    """The existing dotted key closest to `key`, part by part (`trainr.max_stepz` ->
    `trainer.max_steps`), or None when some part has no close match or the key exists."""
    node: object = cfg
    found: list[str] = []
    changed = False
    for part in key.split("."):
        if not OmegaConf.is_dict(node):
            return None
        keys = [str(k) for k in node]  # type: ignore[union-attr]
        if part not in keys:
            part = close_match(part, keys)  # type: ignore[assignment]
            if part is None:
                return None
            changed = True
        found.append(part)
        node = OmegaConf.select(cfg, ".".join(found), default=None, throw_on_resolution_failure=False)
    return ".".join(found) if changed else None


def keys_of(cfg: DictConfig, parent: str) -> list[str]:
    """The keys under `parent` ("" for the top), [] when it is not a mapping."""
    node = OmegaConf.select(cfg, parent, default=None, throw_on_resolution_failure=False) if parent else cfg
    return [str(k) for k in node] if OmegaConf.is_dict(node) else []


# names other tools give a setting (TRL's GRPOConfig, transformers' TrainingArguments, peft, vLLM,
# vf-eval), written under the group a user reaches for first -> where grpo keeps it
ELSEWHERE = {
    "trainer.learning_rate": "optimizer.lr",
    "trainer.lr": "optimizer.lr",
    "trainer.weight_decay": "optimizer.weight_decay",
    "trainer.warmup_steps": "optimizer.warmup",
    "trainer.warmup_ratio": "optimizer.warmup",
    "trainer.warmup": "optimizer.warmup",
    "trainer.lr_scheduler_type": "optimizer.lr_scheduler",
    "trainer.lr_scheduler": "optimizer.lr_scheduler",
    "trainer.max_grad_norm": "optimizer.max_grad_norm",
    "trainer.adam_beta1": "optimizer.betas",
    "trainer.adam_beta2": "optimizer.betas",
    "trainer.optim": "optimizer=adamw|sgd|adafactor|adamw_8bit",
    "trainer.optimizer": "optimizer=adamw|sgd|adafactor|adamw_8bit",
    "trainer.per_device_train_batch_size": "trainer.per_device_batch_completions",
    "trainer.batch_size": "trainer.per_device_batch_completions",
    "trainer.micro_batch_size": "trainer.per_device_batch_completions",
    "trainer.generation_batch_size": "trainer.completions_per_step",
    "trainer.steps_per_generation": "trainer.gradient_accumulation_steps",
    "trainer.group_size": "trainer.num_generations",
    "trainer.num_completions": "trainer.num_generations",
    "trainer.kl_coef": "trainer.beta",
    "trainer.kl": "trainer.beta",
    "trainer.num_train_epochs": "trainer.max_steps",
    "trainer.max_new_tokens": "generation.max_tokens_per_turn",
    "trainer.max_tokens": "generation.max_tokens_per_turn",
    "trainer.use_vllm": "generation=vllm_colocate|vllm_server",
    "trainer.vllm_mode": "generation=vllm_colocate|vllm_server",
    "trainer.vllm_gpu_memory_utilization": "generation.gpu_memory_utilization",
    "trainer.use_peft": "model.lora.enabled",
    "trainer.lora": "model.lora.enabled",
    "model.lora_r": "model.lora.r",
    "model.r": "model.lora.r",
    "model.lora_alpha": "model.lora.alpha",
    "model.lora_dropout": "model.lora.dropout",
    "model.lora_target_modules": "model.lora.target_modules",
    "model.use_lora": "model.lora.enabled",
    "model.use_peft": "model.lora.enabled",
    "model.lora_enabled": "model.lora.enabled",
    "model.model_name_or_path": "model.path",
    "model.name_or_path": "model.path",
    "model.torch_dtype": "model.dtype",
    "model.gradient_checkpointing": "trainer.gradient_checkpointing",
    "model.max_length": "trainer.max_completion_length",
    "model.lr": "optimizer.lr",
    "generation.temperature": "trainer.temperature (training) or eval.temperature",
    "generation.top_p": "trainer.top_p (training) or eval.top_p",
    "generation.max_new_tokens": "generation.max_tokens_per_turn",
    "generation.max_tokens": "generation.max_tokens_per_turn",
    "generation.num_generations": "trainer.num_generations",
    "eval.n": "eval.num_examples",
    "eval.num_samples": "eval.num_examples",
    "eval.r": "eval.rollouts_per_example",
    "eval.rollouts": "eval.rollouts_per_example",
    "eval.max_tokens": "generation.max_tokens_per_turn",
    "optimizer.learning_rate": "optimizer.lr",
    "optimizer.warmup_steps": "optimizer.warmup",
    "optimizer.lr_scheduler_type": "optimizer.lr_scheduler",
    "env.language": "language=CODE",
}


def elsewhere(cfg: DictConfig | None, key: str) -> str | None:
    """Where grpo keeps the setting `key` names when its group does not have it: the name other
    tools give it (ELSEWHERE), or the same name in another group of `cfg` (`trainer.top_p` and
    `eval.top_p` both exist; `model.beta` -> trainer.beta)."""
    if key in ELSEWHERE:
        return ELSEWHERE[key]
    parent, _, leaf = key.rpartition(".")
    if cfg is None or not parent or "." in parent:
        return None
    for group in (str(k) for k in cfg):
        if group != parent and leaf in keys_of(cfg, group) and group not in ("env", "hydra"):
            return f"{group}.{leaf}"
    return None


def unknown_key_message(cfg: DictConfig, key: str, choices: Iterable[str] | None = None) -> str:
    """One line for a key the config does not have: the setting's name in another group (a name
    another tool gives it, `trainer.learning_rate` -> optimizer.lr), else the closest key (part by
    part through `cfg`, or among `choices`, the keys its parent allows), else the keys its parent
    has."""
    moved = elsewhere(cfg, key.lstrip("+~"))
    if moved:
        return f"unknown key {key}; did you mean {moved}?"
    parent, _, leaf = key.rpartition(".")
    dotted = f"{parent}." if parent else ""
    if choices is not None:
        siblings = sorted(set(choices))
        close = close_match(leaf, siblings)
        close = f"{dotted}{close}" if close else None
    else:
        siblings = keys_of(cfg, parent)
        close = closest_key(cfg, key)
    if close:
        return f"unknown key {key}; did you mean {close}?"
    where = parent or "the config"
    return f"unknown key {key}" + (f" (keys of {where}: {', '.join(siblings)})" if siblings else "")


def unknown_keys(cfg: DictConfig, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
    """(dotted key, the keys its parent allows) for each key of `cfg` that its schema (the
    dataclass a node was composed on) does not have: what `+trainer.max_stepz=4` or a typo in a
    YAML file adds. Nodes typed as plain dicts (env, the `extra` kwargs) take any key and are not
    searched."""
    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return
    fields = [f.name for f in dataclasses.fields(schema)]
    for k in cfg:
        key = str(k)
        if key == "hydra":
            continue
        if key not in fields:
            yield f"{prefix}{key}", fields
            continue
        try:
            child = cfg[key]
        except Exception:  # noqa: BLE001 - an unresolvable value is the checks' business, not a key typo
            continue
        if isinstance(child, DictConfig):
            yield from unknown_keys(child, f"{prefix}{key}.")
