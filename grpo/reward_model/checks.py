"""The settings rules of the reward model group: its kind and combination, the anti-hacking guards
and preference rounds, the checkpoints a learned reward scores with (complete, and scoring every
language of the run), and the reward_model stage's backbone, data and training.

Walked by the registry grpo/cli/checks.py; UserError (one line: field, value, fix) on the first
rule broken. Light: reads a checkpoint dir's JSON files, never its weights."""

from __future__ import annotations

import math
from pathlib import Path

from grpo.config import (
    CORRUPTIONS,
    LABELERS,
    REWARD_MODEL_COMBINES,
    REWARD_MODEL_KINDS,
    REWARD_MODEL_NORMALIZATIONS,
    REWARD_MODEL_REFERENCES,
    LanguageConfig,
    RewardModelConfig,
)
from grpo.errors import reject
from grpo.models.checks import weights_source


def check_reward_model(rm: RewardModelConfig, stages: list[str], language: LanguageConfig) -> None:
    """The reward_model group, for a run of these stages in this language group."""
    if rm.kind not in REWARD_MODEL_KINDS:
        reject(f"reward_model.kind='{rm.kind}' is not one of {', '.join(REWARD_MODEL_KINDS)}")
    if rm.combine not in REWARD_MODEL_COMBINES:
        reject(f"reward_model.combine='{rm.combine}' is not one of {', '.join(REWARD_MODEL_COMBINES)}")
    if rm.normalization not in REWARD_MODEL_NORMALIZATIONS:
        reject(
            f"reward_model.normalization='{rm.normalization}' is not one of "
            f"{', '.join(REWARD_MODEL_NORMALIZATIONS)}"
        )
    for key in ("weight", "rubric_weight", "k"):
        if getattr(rm, key) < 0:
            reject(f"reward_model.{key}={getattr(rm, key)} must be >= 0")
    _reward_model_guards(rm)
    if "reward_model" in stages:
        _reward_model_training(rm)
    if (
        rm.kind != "rubric"
        and not rm.checkpoints
        and "eval" in stages
        and not {"train", "reward_model"} & set(stages)
    ):
        # evaluation reports a learned RM's score as a column next to the env's rewards: without an
        # RM the column would silently be missing
        reject(
            f"reward_model={rm.kind} with stages=[{','.join(stages)}] has no reward model to score with: set "
            "reward_model.checkpoints=[DIR] (a reward_model stage's output dir), train one first with "
            "stages=[reward_model,eval], or drop reward_model= to evaluate with the env's rubric only"
        )
    # GRPO training rewards with the RM; evaluation only adds its score column
    if rm.kind == "rubric" or "train" not in stages:
        if rm.kind != "rubric" and "eval" in stages:
            _reward_model_checkpoints(rm, language)
        return
    if rm.kind == "learned" and len(rm.checkpoints) > 1:
        reject(
            f"reward_model=learned takes one checkpoint, got {len(rm.checkpoints)}: use reward_model=ensemble "
            "to combine several"
        )
    if rm.kind == "ensemble" and len(rm.checkpoints) < 2:
        reject(
            f"reward_model=ensemble needs two or more reward_model.checkpoints, got {len(rm.checkpoints)}: "
            "e.g. 'reward_model.checkpoints=[runs/a/reward_model,runs/b/reward_model]'"
        )
    if not rm.checkpoints and "reward_model" not in stages[: stages.index("train")]:
        reject(
            f"reward_model={rm.kind} needs a trained reward model: set reward_model.checkpoints=[DIR] "
            "(a reward_model stage's output dir) or train one first with stages=[reward_model,train]"
        )
    _reward_model_checkpoints(rm, language)


def _reward_model_guards(rm: RewardModelConfig) -> None:
    g, r = rm.guards, rm.rounds
    if g.reference not in REWARD_MODEL_REFERENCES:
        reject(
            f"reward_model.guards.reference='{g.reference}' is not one of {', '.join(REWARD_MODEL_REFERENCES)}"
        )
    if g.kl_beta is not None and not (math.isfinite(g.kl_beta) and g.kl_beta >= 0):
        reject(f"reward_model.guards.kl_beta={g.kl_beta} must be a finite number >= 0, or null (off)")
    if r.labeler not in LABELERS:
        reject(f"reward_model.rounds.labeler='{r.labeler}' is not one of {', '.join(LABELERS)}")
    for key, least in (("every", 0), ("samples_per_prompt", 1), ("label_budget", 1), ("steps", 1)):
        value = getattr(r, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            reject(f"reward_model.rounds.{key}={value!r} must be an integer >= {least}")
    if r.lr is not None and not (math.isfinite(r.lr) and r.lr >= 0):
        reject(
            f"reward_model.rounds.lr={r.lr} must be a finite number >= 0, or null (reward_model.training.lr)"
        )
    if r.every and r.labeler == "judge" and not str(r.judge.base_url).startswith(("http://", "https://")):
        reject(
            f"reward_model.rounds.judge.base_url={r.judge.base_url!r} must be an http(s) URL (an OpenAI-compatible .../v1)"
        )


def _reward_model_checkpoints(rm: RewardModelConfig, language: LanguageConfig) -> None:
    """Each RM dir is complete and scores every language of the run: a mismatch found only once
    the stages run would leave a FAILED MLflow run behind. Reads the dirs' JSON, not the weights."""
    from grpo.reward_model import check_checkpoint_dir, language_mismatch, run_languages, scored_languages

    wanted = run_languages(language)
    for i, path in enumerate(rm.checkpoints):
        field = f"reward_model.checkpoints[{i}]"
        check_checkpoint_dir(path, field)
        problem = language_mismatch(field, path, scored_languages(path, field, rm.normalization), wanted)
        if problem:
            reject(problem)


def _reward_model_training(rm: RewardModelConfig) -> None:
    data, syn, tr, bb = rm.data, rm.data.synthetic, rm.training, rm.backbone
    weights_source("reward_model.backbone", bb)
    if bb.max_length < 16:
        reject(f"reward_model.backbone.max_length={bb.max_length} must be >= 16 tokens")
    if bb.tokenizer_vocab_size and bb.tokenizer_vocab_size < 512:
        reject(
            f"reward_model.backbone.tokenizer_vocab_size={bb.tokenizer_vocab_size} must be 0 or >= 512 tokens"
        )
    if data.path is not None and not Path(data.path).expanduser().exists():
        reject(f"reward_model.data.path={data.path}: no such file or directory")
    if not 0 < data.heldout_fraction < 1:
        reject(f"reward_model.data.heldout_fraction={data.heldout_fraction} must be in (0, 1), e.g. 0.2")
    if data.path is None:
        if syn.n < 2:
            reject(f"reward_model.data.synthetic.n={syn.n} must be >= 2 pairs per language")
        if not 0 <= syn.severity <= 1:
            reject(f"reward_model.data.synthetic.severity={syn.severity} must be in [0, 1]")
        unknown = [c for c in syn.corruptions if c not in CORRUPTIONS]
        if unknown or not syn.corruptions:
            reject(
                f"reward_model.data.synthetic.corruptions={list(syn.corruptions)}: use a non-empty subset of "
                f"{', '.join(CORRUPTIONS)}"
            )
        if syn.languages is not None:
            from grpo.languages.spec import available_languages

            known = available_languages()
            bad = [code for code in syn.languages if code not in known]
            if bad or not syn.languages:
                reject(
                    f"reward_model.data.synthetic.languages={list(syn.languages)}: unknown language(s) "
                    f"{', '.join(map(str, bad)) or '(empty list)'}; available: {', '.join(known)}"
                )
    if tr.lr <= 0:
        reject(f"reward_model.training.lr={tr.lr} must be > 0")
    if tr.max_steps < 1 and tr.epochs <= 0:
        reject(
            f"reward_model.training.epochs={tr.epochs} must be > 0 (or set reward_model.training.max_steps)"
        )
    for key in ("batch_size_pairs", "gradient_accumulation_steps", "logging_steps", "score_batch_size"):
        if getattr(tr, key) < 1:
            reject(f"reward_model.training.{key}={getattr(tr, key)} must be >= 1")
    if tr.warmup < 0:
        reject(f"reward_model.training.warmup={tr.warmup} must be >= 0")
