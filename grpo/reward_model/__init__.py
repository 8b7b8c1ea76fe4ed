"""The multilingual reward model: preference data, Bradley-Terry training, per-language calibration.

    data.py         preference JSONL rows {prompt|instruction, chosen, rejected, language}, validated
    synthetic.py    pairs from any environment: chosen = its reference episode, rejected = a corruption
    backbone.py     the sequence-classification backbone (offline tiny Qwen3 or a hub / local model),
                    language conditioning, text rendering, batched scoring, checkpoint save / load
    calibration.py  per-language mean / std of scores on a held-out reference set
    train.py        the `reward_model` stage: TRL's RewardTrainer, held-out accuracy per language

The GRPO side (loading checkpoints, normalising, ensembles, TRL reward functions) is
grpo/rewards/learned.py. This module is light: it holds the names shared by both sides and the
config checks, which import nothing heavy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from grpo.errors import UserError

KINDS = ("rubric", "learned", "ensemble", "learned_only")
COMBINES = ("mean", "min", "mean_minus_std")
CORRUPTIONS = ("swap", "drop", "duplicate", "format", "language")
BACKBONE_SOURCES = ("random", "pretrained")

# files of a trained reward model dir, next to the HF weights and tokenizer files
META_FILE = "rm_meta.json"  # written last: a dir without it is not a complete checkpoint
CALIBRATION_FILE = "rm_calibration.json"
METRICS_FILE = "rm_metrics.json"
TRAIN_PAIRS_FILE = "pairs_train.jsonl"
HELDOUT_PAIRS_FILE = "pairs_heldout.jsonl"


def uses_learned_reward(cfg: Any) -> bool:
    return str(cfg.reward_model.kind) != "rubric"


def run_languages(cfg: Any) -> list[str]:
    """The languages a run's rows are in: language.code, or the members of language=mix."""
    lang = cfg.language
    if str(lang.code) != "mix":
        return [str(lang.code)]
    members = lang.get("members")
    return [str(m) for m in (members if members else list(lang.get("mix") or {}))]


def validate_reward_model(cfg: Any) -> None:
    """The reward_model group's cross-field rules; one UserError line on the first problem. Light."""
    rm = cfg.reward_model
    if rm.kind not in KINDS:
        raise UserError(f"reward_model.kind='{rm.kind}' is not one of {', '.join(KINDS)}")
    if rm.combine not in COMBINES:
        raise UserError(f"reward_model.combine='{rm.combine}' is not one of {', '.join(COMBINES)}")
    for key in ("weight", "rubric_weight", "k"):
        if float(rm[key]) < 0:
            raise UserError(f"reward_model.{key}={rm[key]} must be >= 0")
    stages = list(cfg.stages)
    if "reward_model" in stages:
        _validate_training(rm)
    # only GRPO training scores with the RM (evaluation reports the environment's own rewards)
    if not uses_learned_reward(cfg) or "train" not in stages:
        return
    checkpoints = [str(c) for c in rm.checkpoints]
    if rm.kind == "learned" and len(checkpoints) > 1:
        raise UserError(
            f"reward_model=learned takes one checkpoint, got {len(checkpoints)}: use reward_model=ensemble "
            "to combine several"
        )
    if rm.kind == "ensemble" and len(checkpoints) < 2:
        raise UserError(
            f"reward_model=ensemble needs two or more reward_model.checkpoints, got {len(checkpoints)}: "
            "e.g. 'reward_model.checkpoints=[runs/a/reward_model,runs/b/reward_model]'"
        )
    if not checkpoints:
        first_train = stages.index("train")
        if "reward_model" not in stages[:first_train]:
            raise UserError(
                f"reward_model={rm.kind} needs a trained reward model: set reward_model.checkpoints=[DIR] "
                "(a reward_model stage's output dir) or train one first with stages=[reward_model,train]"
            )
    for i, path in enumerate(checkpoints):
        check_checkpoint_dir(path, f"reward_model.checkpoints[{i}]")


def check_checkpoint_dir(path: str | os.PathLike[str], field: str) -> Path:
    """A complete reward model dir, or a one-line UserError naming `field`."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(
            f"{field}={path}: no such directory; point it at a reward_model stage's output "
            "(outputs/runs/<date>/<time>/reward_model)"
        )
    if not p.is_dir():
        raise UserError(
            f"{field}={path} is a file; it must be a reward model dir (a reward_model stage's output)"
        )
    if not (p / META_FILE).is_file():
        raise UserError(
            f"{field}={path} is not a complete reward model (no {META_FILE}): point it at a reward_model "
            "stage's output, or train again if that stage was interrupted"
        )
    return p


def _validate_training(rm: Any) -> None:
    data, syn, tr, bb = rm.data, rm.data.synthetic, rm.training, rm.backbone
    if bb.source not in BACKBONE_SOURCES:
        raise UserError(
            f"reward_model.backbone.source='{bb.source}' is not one of {', '.join(BACKBONE_SOURCES)}"
        )
    if bb.source == "pretrained" and not bb.path:
        raise UserError(
            "reward_model.backbone.path is required for source=pretrained: a hub id or a local dir"
        )
    if int(bb.max_length) < 16:
        raise UserError(f"reward_model.backbone.max_length={bb.max_length} must be >= 16 tokens")
    if data.path is not None and not Path(str(data.path)).expanduser().exists():
        raise UserError(f"reward_model.data.path={data.path}: no such file or directory")
    if not 0 < float(data.heldout_fraction) < 1:
        raise UserError(
            f"reward_model.data.heldout_fraction={data.heldout_fraction} must be in (0, 1), e.g. 0.2"
        )
    if data.path is None:
        if int(syn.n) < 2:
            raise UserError(f"reward_model.data.synthetic.n={syn.n} must be >= 2 pairs per language")
        if not 0 <= float(syn.severity) <= 1:
            raise UserError(f"reward_model.data.synthetic.severity={syn.severity} must be in [0, 1]")
        unknown = [c for c in syn.corruptions if c not in CORRUPTIONS]
        if unknown or not syn.corruptions:
            raise UserError(
                f"reward_model.data.synthetic.corruptions={list(syn.corruptions)}: use a non-empty subset of "
                f"{', '.join(CORRUPTIONS)}"
            )
        if syn.languages is not None:
            from grpo.languages.spec import available_languages

            known = available_languages()
            bad = [code for code in syn.languages if code not in known]
            if bad or not syn.languages:
                raise UserError(
                    f"reward_model.data.synthetic.languages={list(syn.languages)}: unknown language(s) "
                    f"{', '.join(map(str, bad)) or '(empty list)'}; available: {', '.join(known)}"
                )
    if float(tr.lr) <= 0:
        raise UserError(f"reward_model.training.lr={tr.lr} must be > 0")
    if int(tr.max_steps) < 1 and float(tr.epochs) <= 0:
        raise UserError(
            f"reward_model.training.epochs={tr.epochs} must be > 0 (or set reward_model.training.max_steps)"
        )
    for key in ("batch_size_pairs", "gradient_accumulation_steps", "logging_steps", "score_batch_size"):
        if int(tr[key]) < 1:
            raise UserError(f"reward_model.training.{key}={tr[key]} must be >= 1")
    if float(tr.warmup) < 0:
        raise UserError(f"reward_model.training.warmup={tr.warmup} must be >= 0")


__all__ = [
    "CALIBRATION_FILE",
    "COMBINES",
    "CORRUPTIONS",
    "KINDS",
    "META_FILE",
    "METRICS_FILE",
    "check_checkpoint_dir",
    "run_languages",
    "uses_learned_reward",
    "validate_reward_model",
]
