"""language=mix: which language each dataset row is in.

The counts are exact, not drawn one row at a time: n rows get round(n * share) rows of each
language (largest remainders settle the rounding), then the sequence is shuffled with the caller's
seeded rng. So 1,000 rows at weights {en: 2, zh: 1, sv: 1} hold exactly 500/250/250 rows, and the
same seed gives the same sequence. `balance: true` gives every language with a positive weight the
same share, upsampling the low-resource ones.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec


def language_shares(spec: LanguageSpec) -> dict[str, float]:
    """Each language's share of the rows (summing to 1). A single language: {code: 1.0}."""
    if not spec.is_mix:
        return {spec.code: 1.0}
    weights = {code: w for code, w in spec.mix.items() if w > 0}
    if spec.balance:
        weights = dict.fromkeys(weights, 1.0)
    total = sum(weights.values())
    return {code: w / total for code, w in weights.items()}


def language_counts(spec: LanguageSpec, n: int) -> dict[str, int]:
    """How many of n rows each language gets: floor of n * share, plus one for the largest
    remainders until the counts add up to n (ties go to the language listed first)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    shares = language_shares(spec)
    exact = {code: n * share for code, share in shares.items()}
    counts = {code: int(x) for code, x in exact.items()}
    order = sorted(shares, key=lambda c: (-(exact[c] - counts[c]), list(shares).index(c)))
    for code in order[: n - sum(counts.values())]:
        counts[code] += 1
    return counts


def sample_languages(rng: random.Random, spec: LanguageSpec, n: int) -> list[str]:
    """The language code of each of n rows, in a seeded random order with exact proportions."""
    out: list[str] = []
    for code, count in language_counts(spec, n).items():
        out.extend([code] * count)
    rng.shuffle(out)
    return out
