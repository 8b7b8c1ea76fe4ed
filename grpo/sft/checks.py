"""The settings rules of the sft stage: its data (a JSONL file, or demonstrations from the env in
a language of conf/language), its training settings, and what it needs of the model and
generation groups (an adapter shaped by model.lora; a checkpoint the hf backend can evaluate).

Walked by the registry grpo/cli/checks.py; UserError (one line: field, value, fix) on the first
rule broken. Light: no torch."""

from __future__ import annotations

from pathlib import Path

from grpo.config import LR_SCHEDULERS, GrpoConfig, LanguageConfig, SftConfig
from grpo.errors import UserError, reject


def _demonstrations(f: SftConfig, language: LanguageConfig) -> None:
    """sft.demonstrator's language is one of conf/language, and sft.num_examples_per_language counts
    demonstrations in the demonstrations' languages (the env's arguments are checked when it is built)."""
    from grpo.languages.mix import language_shares
    from grpo.languages.spec import get_spec, spec_from_config
    from grpo.sft.data import language_quota

    d = f.demonstrator
    if not isinstance(d.env, dict) or "_target_" in d.env:
        reject("sft.demonstrator.env: a mapping of the run env's arguments, e.g. {collation: codepoint}")
    try:
        spec = spec_from_config(language) if d.language is None else get_spec(str(d.language))
    except UserError as ex:
        raise UserError(f"sft.demonstrator.language: {ex}") from None
    language_quota(f.num_examples_per_language, list(language_shares(spec)))


def check_sft(s: GrpoConfig) -> None:
    """The sft group, with the model and generation groups it shares a run with."""
    f = s.sft
    if f.data_path is not None and not Path(f.data_path).expanduser().exists():
        reject(f"sft.data_path={f.data_path}: no such file or directory")
    if f.data_path is None and f.num_examples < 1:
        reject(f"sft.num_examples={f.num_examples} must be >= 1 (demonstrations from the env's train rows)")
    if f.data_path is None:
        _demonstrations(f, s.language)
    if f.lr <= 0:
        reject(f"sft.lr={f.lr} must be > 0")
    if f.max_steps < 1 and f.epochs <= 0:
        reject(f"sft.epochs={f.epochs} must be > 0 (or set sft.max_steps)")
    for key in ("batch_size", "gradient_accumulation_steps", "logging_steps"):
        if getattr(f, key) < 1:
            reject(f"sft.{key}={getattr(f, key)} must be >= 1")
    if f.max_length < 16:
        reject(f"sft.max_length={f.max_length} must be >= 16 tokens")
    if f.warmup < 0 or f.weight_decay < 0 or f.max_grad_norm < 0:
        reject("sft.warmup, sft.weight_decay and sft.max_grad_norm must be >= 0")
    if f.lr_scheduler not in LR_SCHEDULERS:
        reject(f"sft.lr_scheduler='{f.lr_scheduler}' is not one of {', '.join(LR_SCHEDULERS)}")
    if s.generation.backend == "openai":
        reject(
            "stages with sft and generation=openai: the endpoint serves its own model, not the SFT "
            "checkpoint; evaluate the checkpoint with generation=hf (model.path=<run_dir>/sft)"
        )
    lora = s.model.lora
    if f.lora and (lora.r < 1 or lora.alpha <= 0 or not 0 <= lora.dropout < 1 or not lora.target_modules):
        reject(
            f"sft.lora=true trains an adapter shaped by model.lora: model.lora.r={lora.r} and alpha={lora.alpha} "
            f"must be positive, dropout={lora.dropout} in [0, 1), target_modules non-empty"
        )
