"""language=mix: row languages follow the weights (exactly, for any n), `balance` equalises them,
and the sequence is deterministic for a seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from grpo.compose import compose
from grpo.languages.mix import language_counts, language_shares, sample_languages
from grpo.languages.spec import get_spec, spec_from_config


def test_proportions_match_the_weights_for_1000_rows():
    spec = get_spec("mix")
    total = sum(spec.mix.values())  # en 4, zh/es/fr/de/ru 2, ja/ar/hi/ko/sv 1: 19
    rows = sample_languages(random.Random(0), spec, 1000)
    counts = Counter(rows)
    assert len(rows) == 1000 and set(counts) == set(spec.mix)
    for code, weight in spec.mix.items():
        assert abs(counts[code] / 1000 - weight / total) <= 1 / 1000, (code, counts[code])
    # en 4/19 of 1000 = 210.5..., ja 1/19 = 52.6...
    assert counts["en"] in (210, 211) and counts["ja"] in (52, 53)


def test_balance_upsamples_to_equal_shares():
    cfg = compose(
        ["+env=alphabet_sort", "language=mix", "language.members=[en,zh,sv,hi]", "language.balance=true"]
    )
    spec = spec_from_config(cfg.language)
    assert Counter(sample_languages(random.Random(1), spec, 1000)) == {
        "en": 250,
        "zh": 250,
        "sv": 250,
        "hi": 250,
    }
    unbalanced = spec_from_config(
        compose(["+env=alphabet_sort", "language=mix", "language.members=[en,hi]"]).language
    )
    assert language_shares(unbalanced) == {"en": 0.8, "hi": 0.2}


def test_counts_add_up_and_favour_the_largest_remainders():
    spec = spec_from_config({"code": "mix", "name": "Mixed", "mix": {"en": 1, "zh": 1, "ja": 1}})
    assert language_counts(spec, 10) == {"en": 4, "zh": 3, "ja": 3}
    assert language_counts(spec, 0) == {"en": 0, "zh": 0, "ja": 0}
    for n in (1, 2, 7, 999):
        assert sum(language_counts(get_spec("mix"), n).values()) == n
    with pytest.raises(ValueError):
        language_counts(spec, -1)


def test_zero_weight_languages_never_appear():
    spec = spec_from_config({"code": "mix", "name": "Mixed", "mix": {"en": 1, "zh": 0}})
    assert set(sample_languages(random.Random(0), spec, 50)) == {"en"}


def test_order_is_seeded_and_shuffled():
    spec = get_spec("mix")
    a = sample_languages(random.Random(5), spec, 200)
    assert a == sample_languages(random.Random(5), spec, 200)
    assert a != sample_languages(random.Random(6), spec, 200)
    assert a != sorted(a)


def test_single_language_is_all_rows():
    assert sample_languages(random.Random(0), get_spec("sv"), 5) == ["sv"] * 5
