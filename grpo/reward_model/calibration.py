"""Per-language normalisation statistics of a reward model.

A Bradley-Terry reward model only learns score DIFFERENCES within a pair, so the offset (and the
spread) of its scores is arbitrary and may differ from one language to the next: mixed as is, one
language would look better than another for no reason, and the mean or min of several ensemble
members would be meaningless. After training, the scores of a held-out reference set (both
completions of every held-out pair) give each language's mean and standard deviation; scores are
then used as (s - mean_lang) / std_lang. Saved as rm_calibration.json next to the weights.
Light module: no torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
    """Score statistics per language (and pooled over all languages, for reference)."""

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

    def normalize_one(self, score: float, language: str) -> float | None:
        """(score - mean) / std of the language; None for a language the model was not calibrated on."""
        stats = self.languages.get(language)
        if stats is None or not math.isfinite(score):
            return None
        return (score - stats.mean) / stats.std

    def normalize(self, scores: Sequence[float], languages: Sequence[str]) -> list[float | None]:
        return [self.normalize_one(float(s), lang) for s, lang in zip(scores, languages, strict=True)]

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
