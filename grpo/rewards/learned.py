"""Trained reward models as GRPO rewards: batched scoring, normalisation, ensembles.

For every batch TRL scores, each reward model (an ensemble member) reads the prompt and the WHOLE
episode (every assistant turn and the environment's turns between them, from our rollout function;
TRL's own decoding otherwise) rendered through its tokenizer's chat template with the row's
language tag, in length-sorted batches under torch.inference_mode. Its raw score is normalised
with the member's own statistics (rm_calibration.json, fitted on a held-out reference set after
training) as reward_model.normalization says: per_language (the default), (s - mean_lang) /
std_lang, since a Bradley-Terry score has an arbitrary offset per language and unnormalised
scores should not be mixed; global, (s - mean) / std pooled over all languages; none, the raw
score (grpo/reward_model/calibration.py, Calibration.normalize_one). Members are then combined per
completion: mean, min, or mean - k * std across members.

TRL reward functions (each logs rewards/<name>/mean):
    reward_model    the (combined) normalised score, weight reward_model.weight
    rm_0, rm_1 ...  each member's normalised score, weight 0 (logged only), for ensembles
One scoring pass per batch serves all of them; the evaluator's score columns are these functions
too. A completion in a language the RM was not trained on, or (per_language only) has no
statistics for, gets None (TRL leaves it out of that function's mean); the run's languages are
checked up front so that this only happens for rows that were never expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from grpo.envs.rubric import COMPLETION_FIELD, LANGUAGE_FIELD, RewardFunc
from grpo.errors import UserError
from grpo.rewards.rubric import log_per_language

REWARD_NAME = "reward_model"
MEMBER_PREFIX = "rm_"


def combine_scores(members: Sequence[Sequence[float | None]], how: str, k: float = 1.0) -> list[float | None]:
    """Per completion, the members' scores combined: mean | min | mean_minus_std (mean - k * std,
    the population std across members). Members that have no score (None) are left out; no score
    at all gives None."""
    if how not in ("mean", "min", "mean_minus_std"):
        raise ValueError(f"unknown combination {how!r}")
    if not members:
        return []
    out: list[float | None] = []
    for values in zip(*members, strict=True):
        present = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not present:
            out.append(None)
            continue
        mean = math.fsum(present) / len(present)
        if how == "mean":
            out.append(mean)
        elif how == "min":
            out.append(min(present))
        else:
            std = math.sqrt(math.fsum((v - mean) ** 2 for v in present) / len(present))
            out.append(mean - k * std)
    return out


class RewardModelScorer:
    """One trained reward model: raw and normalised scores of completions (`normalization`: one of
    grpo.config.REWARD_MODEL_NORMALIZATIONS, reward_model.normalization)."""

    def __init__(
        self,
        path: str,
        field: str = "reward_model.checkpoints[0]",
        batch_size: int = 64,
        device: Any = None,
        normalization: str = "per_language",
    ) -> None:
        from grpo.reward_model.backbone import load_reward_model
        from grpo.reward_model.scoring import SequenceEncoder

        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.rm = load_reward_model(path, field, device=device)
        meta = self.rm.meta
        self.encoder = SequenceEncoder(
            self.rm.tokenizer, meta.max_length, meta.tag_token, meta.chat_template_kwargs, meta.tag_at_end
        )
        self.heads = {lang: i for i, lang in enumerate(meta.languages)} if meta.per_language_heads else None
        self.batch_size = int(batch_size)
        self.normalization = str(normalization)

    @property
    def languages(self) -> list[str]:
        """Languages the model can score: trained on and, with per_language normalisation, calibrated."""
        cal = self.rm.calibration
        return [lang for lang in self.rm.meta.languages if cal.covers(lang, self.normalization)]

    def raw(
        self, prompts: Sequence[Any], completions: Sequence[Any], languages: Sequence[str]
    ) -> list[float | None]:
        """Raw model scores (None for a language the model does not know)."""
        from grpo.reward_model.scoring import score_ids

        known = set(self.languages)
        index = [i for i, lang in enumerate(languages) if lang in known]
        ids = self.encoder.encode(
            [prompts[i] for i in index], [completions[i] for i in index], [languages[i] for i in index]
        )
        heads = [self.heads[languages[i]] for i in index] if self.heads is not None else None
        scores = score_ids(self.rm.model, ids, self.rm.tokenizer.pad_token_id, self.batch_size, heads)
        out: list[float | None] = [None] * len(languages)
        for i, score in zip(index, scores, strict=True):
            out[i] = score
        return out

    def normalized(
        self, prompts: Sequence[Any], completions: Sequence[Any], languages: Sequence[str]
    ) -> list[float | None]:
        """Raw scores normalised with the model's own calibration as `self.normalization` says."""
        raw = self.raw(prompts, completions, languages)
        cal = self.rm.calibration
        return [
            None if s is None else cal.normalize_one(s, lang, self.normalization)
            for s, lang in zip(raw, languages, strict=True)
        ]


class LearnedReward:
    """The learned rewards of a run: members' normalised scores and their combination, computed
    once per batch (TRL calls each reward function in turn with the same batch)."""

    def __init__(self, scorers: Sequence[RewardModelScorer], combine: str, k: float, default_language: str):
        self.scorers = list(scorers)
        self.combine = combine
        self.k = float(k)
        self.default_language = default_language
        self._last_key: str | None = None
        self._last: list[list[float | None]] = []

    def _inputs(self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: dict[str, Any]) -> tuple:
        # the real episode (assistant and environment turns) when our rollout function produced it
        episodes = kwargs.get(COMPLETION_FIELD)
        episodes = list(episodes) if episodes is not None else list(completions)
        languages = kwargs.get(LANGUAGE_FIELD)
        if languages is None:
            languages = [self.default_language] * len(prompts)
        languages = [str(lang) if lang else self.default_language for lang in languages]
        return list(prompts), episodes, languages

    def member_scores(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[list[float | None]]:
        """Each member's normalised scores for the batch (cached for the batch's other functions)."""
        prompts, episodes, languages = self._inputs(prompts, completions, kwargs)
        key = json.dumps([prompts, episodes, languages], sort_keys=True, ensure_ascii=False, default=str)
        if key != self._last_key:
            self._last = [s.normalized(prompts, episodes, languages) for s in self.scorers]
            self._last_key = key
        return self._last

    def combined(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        return combine_scores(self.member_scores(prompts, completions, **kwargs), self.combine, self.k)


class LearnedRewardFunc:
    """A TRL reward function for one component of a LearnedReward: a member, or the combination."""

    # already a batched TRL reward function (keyword signature fn(prompts, completions, **kwargs)):
    # grpo.rewards.rubric passes it to TRL as is, without the per-completion [0, 1] rubric adapter
    trl_batched = True

    def __init__(self, name: str, source: LearnedReward, member: int | None = None) -> None:
        self.__name__ = name  # TRL's metric name
        self.source = source
        self.member = member

    def __repr__(self) -> str:
        what = "combined" if self.member is None else f"member {self.member}"
        return f"LearnedRewardFunc({self.__name__!r}, {what})"

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        if self.member is None:
            scores = self.source.combined(prompts, completions, **kwargs)
        else:
            scores = list(self.source.member_scores(prompts, completions, **kwargs)[self.member])
        log_per_language(self.__name__, scores, kwargs.get(LANGUAGE_FIELD), kwargs.get("log_metric"))
        return scores


def learned_reward_funcs(
    settings: Any, device: Any = None, checkpoints: Sequence[str] | None = None
) -> list[RewardFunc]:
    """The run's learned reward functions (none for reward_model=rubric), each named and weighted;
    their `fn` is a batched TRL reward function (`fn.trl_batched`). `checkpoints`: the RM dirs to
    score with (None: reward_model.checkpoints)."""
    from grpo.reward_model import language_mismatch, run_languages

    rm = settings.reward_model
    if rm.kind == "rubric":
        return []
    paths = [str(p) for p in (rm.checkpoints if checkpoints is None else checkpoints)]
    if not paths:
        raise UserError(
            f"reward_model={rm.kind}: reward_model.checkpoints is empty and no reward_model stage ran before "
            "training: set reward_model.checkpoints=[DIR] or use stages=[reward_model,train]"
        )
    batch_size = int(rm.training.score_batch_size)
    scorers = [
        RewardModelScorer(path, f"reward_model.checkpoints[{i}]", batch_size, device, str(rm.normalization))
        for i, path in enumerate(paths)
    ]
    wanted = run_languages(settings.language)
    for i, scorer in enumerate(scorers):
        # the preflight checks the configured dirs; an RM trained by this run's own stage is checked here
        problem = language_mismatch(f"reward_model.checkpoints[{i}]", paths[i], scorer.languages, wanted)
        if problem:
            raise UserError(problem)
    source = LearnedReward(scorers, str(rm.combine), float(rm.k), default_language=wanted[0])
    weight = float(rm.weight)
    if len(scorers) == 1:
        return [RewardFunc(REWARD_NAME, LearnedRewardFunc(REWARD_NAME, source, 0), weight)]
    members = [
        RewardFunc(f"{MEMBER_PREFIX}{i}", LearnedRewardFunc(f"{MEMBER_PREFIX}{i}", source, i), 0.0)
        for i in range(len(scorers))
    ]
    return [*members, RewardFunc(REWARD_NAME, LearnedRewardFunc(REWARD_NAME, source, None), weight)]
