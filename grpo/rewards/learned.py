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

The reference guard (reward_model.guards.reference, on by default): the row's reference episode (the
env's reference_completion) is scored by the same members and combined the same way, and the
reward is min(score, reference's) (cap) or score - reference's (relative); reference scores are
cached per prompt until the RM changes (a preference round, grpo/reward_model/rounds.py). An env
without reference episodes gets the score as is, said in one line.

TRL reward functions (each logs rewards/<name>/mean):
    reward_model    the (combined, guarded) normalised score, weight reward_model.weight
    rm_0, rm_1 ...  each member's normalised score, weight 0 (logged only), for ensembles
One scoring pass per batch serves all of them; the evaluator's score columns are these functions
too. A completion in a language the RM was not trained on, or (per_language only) has no
statistics for, gets None (TRL leaves it out of that function's mean); the run's languages are
checked up front so that this only happens for rows that were never expected.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from grpo.envs.rubric import COMPLETION_FIELD, INFO_FIELD, LANGUAGE_FIELD, RewardFunc
from grpo.errors import UserError
from grpo.rewards.reward_funcs import log_per_language
from grpo.trl_adapter.internals import reward_metric_logger

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


def guard_scores(
    scores: Sequence[float | None], references: Sequence[float | None], how: str
) -> list[float | None]:
    """Scores against their reference episode's: cap = min(score, reference), relative = score -
    reference, none = the scores as they are. A missing reference score leaves the score as is."""
    if how not in ("cap", "relative", "none"):
        raise ValueError(f"unknown reference guard {how!r}")
    out: list[float | None] = []
    for s, ref in zip(scores, references, strict=True):
        if s is None or ref is None or how == "none":
            out.append(s)
        else:
            out.append(min(s, ref) if how == "cap" else s - ref)
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

    def __init__(
        self,
        scorers: Sequence[RewardModelScorer],
        combine: str,
        k: float,
        default_language: str,
        reference: Callable[[Any, Any, str], Any] | None = None,
        guard: str = "none",
    ):
        """`reference(prompt, info, language)`: the row's reference episode, for `guard` (cap |
        relative | none: reward_model.guards.reference); None = no guard."""
        self.scorers = list(scorers)
        self.combine = combine
        self.k = float(k)
        self.default_language = default_language
        self.reference = reference
        self.guard = guard if reference is not None else "none"
        self._last_key: str | None = None
        self._last: list[list[float | None]] = []
        self._references: dict[str, float | None] = {}

    def changed(self) -> None:
        """The members' weights or calibration changed (a preference round): forget cached scores."""
        self._last_key = None
        self._references.clear()

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
        """The members' combination, against the reference episode's as the guard says."""
        scores = combine_scores(self.member_scores(prompts, completions, **kwargs), self.combine, self.k)
        infos = kwargs.get(INFO_FIELD)
        if self.guard == "none" or infos is None:
            return scores
        prompts, _, languages = self._inputs(prompts, completions, kwargs)
        return guard_scores(scores, self.reference_scores(prompts, list(infos), languages), self.guard)

    def reference_scores(
        self, prompts: Sequence[Any], infos: Sequence[Any], languages: Sequence[str]
    ) -> list[float | None]:
        """The combined score of each row's reference episode (cached per prompt and language)."""
        keys = [
            json.dumps([p, lang], sort_keys=True, ensure_ascii=False, default=str)
            for p, lang in zip(prompts, languages, strict=True)
        ]
        todo: dict[str, int] = {}
        for i, key in enumerate(keys):
            if key not in self._references and key not in todo:
                todo[key] = i
        if todo:
            index = list(todo.values())
            episodes = [self.reference(prompts[i], infos[i], languages[i]) for i in index]
            members = [
                s.normalized([prompts[i] for i in index], episodes, [languages[i] for i in index])
                for s in self.scorers
            ]
            for key, score in zip(todo, combine_scores(members, self.combine, self.k), strict=True):
                self._references[key] = score
        return [self._references[key] for key in keys]


class LearnedRewardFunc:
    """A TRL reward function for one component of a LearnedReward: a member, or the combination."""

    # already a batched TRL reward function (keyword signature fn(prompts, completions, **kwargs)):
    # grpo.rewards.reward_funcs passes it to TRL as is, without the per-completion [0, 1] rubric adapter
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
        log_per_language(self.__name__, scores, kwargs.get(LANGUAGE_FIELD), reward_metric_logger(kwargs))
        return scores


def kl_guard(settings: Any) -> tuple[Any, str | None]:
    """The settings GRPO runs with when its reward holds a learned RM (reward_model.kind is not
    rubric): trainer.beta raised to reward_model.guards.kl_beta where it is lower, and the line that
    says so (None when nothing changed); without validation (trainer.eval_steps=0) the line also
    says that reward hacking is then only seen in the training rewards."""
    import dataclasses

    rm, trainer = settings.reward_model, settings.trainer
    if rm.kind == "rubric":
        return settings, None
    notes = []
    floor = rm.guards.kl_beta
    if floor is not None and trainer.beta < floor:
        notes.append(
            f"trainer.beta={trainer.beta:g} -> {floor:g}: a learned reward model is in the reward "
            f"(reward_model={rm.kind}), and the KL anchor keeps the policy where the RM's judgments hold "
            "(reward_model.guards.kl_beta=null keeps trainer.beta)"
        )
        settings = dataclasses.replace(settings, trainer=dataclasses.replace(trainer, beta=float(floor)))
    if not trainer.eval_steps:
        notes.append(
            "trainer.eval_steps=0: reward hacking (the RM rising while the rubric falls, per language) is "
            "watched on held-out rows only with validation (trainer.eval_steps=N)"
        )
    return settings, ("[train] note: " + "; ".join(notes)) if notes else None


def env_reference(env: Any) -> Callable[[Any, Any, str], Any] | None:
    """(prompt, info, language) -> the row's reference episode, or None when `env` has none."""
    from grpo.envs.base import Row, reference_of

    reference = reference_of(env)
    if reference is None:
        return None

    def for_fields(prompt: Any, info: Any, language: str) -> Any:
        return reference(Row(0, list(prompt), dict(info or {}), language))

    return for_fields


def learned_reward_funcs(
    settings: Any, device: Any = None, checkpoints: Sequence[str] | None = None, env: Any = None
) -> list[RewardFunc]:
    """The run's learned reward functions (none for reward_model=rubric), each named and weighted;
    their `fn` is a batched TRL reward function (`fn.trl_batched`). `checkpoints`: the RM dirs to
    score with (None: reward_model.checkpoints); `env`: the run's env, whose reference episodes the
    reference guard scores (None: no guard)."""
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
    guard = str(rm.guards.reference)
    reference = env_reference(env) if env is not None and guard != "none" else None
    if guard != "none" and env is not None and reference is None:
        print(
            f"[reward_model] note: env {env.name} has no reference episodes: reward_model.guards.reference={guard} "
            "is off, the RM score counts as it is",
            file=sys.stderr,
        )
    source = LearnedReward(
        scorers, str(rm.combine), float(rm.k), default_language=wanted[0], reference=reference, guard=guard
    )
    weight = float(rm.weight)
    if len(scorers) == 1:
        return [RewardFunc(REWARD_NAME, LearnedRewardFunc(REWARD_NAME, source, None), weight)]
    members = [
        RewardFunc(f"{MEMBER_PREFIX}{i}", LearnedRewardFunc(f"{MEMBER_PREFIX}{i}", source, i), 0.0)
        for i in range(len(scorers))
    ]
    return [*members, RewardFunc(REWARD_NAME, LearnedRewardFunc(REWARD_NAME, source, None), weight)]
