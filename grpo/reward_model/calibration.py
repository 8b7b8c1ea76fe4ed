"""Per-language normalisation statistics of a reward model.

A Bradley-Terry reward model only learns score DIFFERENCES within a pair, so the offset (and the
spread) of its scores is arbitrary and may differ from one language to the next: mixed as is, one
language would look better than another for no reason, and the mean or min of several ensemble
members would be meaningless. After training, the scores of a held-out reference set (both
completions of every held-out pair) give each language's mean and standard deviation; scores are
then used as (s - mean_lang) / std_lang. Saved as rm_calibration.json next to the weights.

How a score is normalised is reward_model.normalization (`normalize_one`, the one place):
    per_language  (s - mean_lang) / std_lang (the default); None for a language without statistics
    global        (s - mean) / std of the whole reference set (languages pooled); any language
    none          the raw score
Light module: no torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grpo.config import REWARD_MODEL_NORMALIZATIONS
from grpo.files import write_json_atomic

# a std below this (a constant model) would blow normalised scores up; treated as this
MIN_STD = 1e-6


@dataclass(frozen=True)
class ScoreStats:
    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> ScoreStats:
        """Population mean and std (so the fitted set normalises to exactly mean 0, std 1)."""
        n = len(values)
        if n == 0:
            raise ValueError("no scores to compute statistics from")
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / n
        return cls(mean=mean, std=max(math.sqrt(var), MIN_STD), n=n)


@dataclass(frozen=True)
class Calibration:
    """Score statistics per language and pooled over all languages (normalization=global)."""

    languages: dict[str, ScoreStats]
    pooled: ScoreStats

    @classmethod
    def fit(cls, scores: Sequence[float], languages: Sequence[str]) -> Calibration:
        if len(scores) != len(languages):
            raise ValueError(f"{len(scores)} scores but {len(languages)} languages")
        by_language: dict[str, list[float]] = {}
        for score, language in zip(scores, languages, strict=True):
            by_language.setdefault(language, []).append(float(score))
        return cls(
            languages={lang: ScoreStats.of(values) for lang, values in sorted(by_language.items())},
            pooled=ScoreStats.of([float(s) for s in scores]),
        )

    def covers(self, language: str, normalization: str = "per_language") -> bool:
        """Whether `normalize_one` can normalise a score in `language`: per_language needs the
        language's own statistics, global and none work for any language."""
        _check_normalization(normalization)
        return normalization != "per_language" or language in self.languages

    def normalize_one(self, score: float, language: str, normalization: str = "per_language") -> float | None:
        """The score normalised as `normalization` says (see the module docstring): per_language
        (score - mean_lang) / std_lang, None for a language the model was not calibrated on; global
        (score - mean_pooled) / std_pooled; none the score itself. None for a non-finite score."""
        if not self.covers(language, normalization) or not math.isfinite(score):
            return None
        if normalization == "none":
            return float(score)
        stats = self.pooled if normalization == "global" else self.languages[language]
        return (score - stats.mean) / stats.std

    def normalize(
        self, scores: Sequence[float], languages: Sequence[str], normalization: str = "per_language"
    ) -> list[float | None]:
        return [
            self.normalize_one(float(s), lang, normalization)
            for s, lang in zip(scores, languages, strict=True)
        ]

    def to_json(self) -> dict[str, object]:
        def plain(s: ScoreStats) -> dict[str, float | int]:
            return {"mean": s.mean, "std": s.std, "n": s.n}

        return {"languages": {k: plain(v) for k, v in self.languages.items()}, "pooled": plain(self.pooled)}

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        def stats(d: dict) -> ScoreStats:
            return ScoreStats(mean=float(d["mean"]), std=max(float(d["std"]), MIN_STD), n=int(d["n"]))

        return cls(
            languages={str(k): stats(v) for k, v in data["languages"].items()}, pooled=stats(data["pooled"])
        )

    def save(self, path: str | Path) -> Path:
        return write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def _check_normalization(normalization: str) -> None:
    # settings arrive checked (grpo/cli/checks.py); this guards direct callers
    if normalization not in REWARD_MODEL_NORMALIZATIONS:
        raise ValueError(
            f"unknown normalization {normalization!r}: one of {', '.join(REWARD_MODEL_NORMALIZATIONS)}"
        )
