"""The reward_model stage's held-out report per corruption kind: a scripted scorer that ranks every
pair right except swapped ones gives exactly the expected table per kind and per language, through
the stage's own metric function (pair_metrics), its tracker names, rm_metrics.json's fields and its
printout; the kind travels with a pair through the pairs files, and a user's row without one counts
as "unknown"."""

from __future__ import annotations

import json
from collections import Counter

from helpers.packaged_env import packaged_env

from grpo.config import CORRUPTIONS
from grpo.reward_model.data import UNKNOWN_KIND, PreferencePair, load_pairs, write_pairs
from grpo.reward_model.synthetic import synthetic_pairs
from grpo.reward_model.train import PairMetrics, format_kind_table, pair_metrics


def swap_blind_metrics(pairs: list[PreferencePair]) -> PairMetrics:
    """The stage's metrics of a scorer that prefers the chosen completion of every pair except the
    swapped ones, whose rejected completion it scores higher."""
    chosen = [0.0 if p.kind == "swap" else 1.0 for p in pairs]
    rejected = [1.0 - c for c in chosen]
    return pair_metrics(chosen, rejected, [p.language for p in pairs], [p.kind for p in pairs])


def test_a_scorer_blind_to_swaps_gives_the_expected_table(tmp_path):
    # a user's JSONL: kinds given in the rows' `corruption` key, one row without it
    kinds = {"en": ["swap", "swap", "drop", "format", None], "sv": ["swap", "drop", "duplicate", "duplicate"]}
    path = tmp_path / "prefs.jsonl"
    rows = []
    for lang, lang_kinds in kinds.items():
        for i, kind in enumerate(lang_kinds):
            row = {
                "prompt": f"Sort: b{i}, a{i}",
                "chosen": f"a{i}\nb{i}",
                "rejected": f"b{i}\na{i}",
                "language": lang,
            }
            rows.append(json.dumps(row if kind is None else {**row, "corruption": kind}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    pairs = load_pairs(path)
    assert [p.kind for p in pairs][:5] == ["swap", "swap", "drop", "format", UNKNOWN_KIND]

    metrics = swap_blind_metrics(pairs)
    # kinds in CORRUPTIONS order, the unknown ones last
    assert metrics.accuracy_by_kind == {
        "swap": 0.0,
        "drop": 1.0,
        "duplicate": 1.0,
        "format": 1.0,
        "unknown": 1.0,
    }
    assert list(metrics.accuracy_by_kind) == ["swap", "drop", "duplicate", "format", "unknown"]
    assert metrics.accuracy_by_language_kind == {
        "en": {"swap": 0.0, "drop": 1.0, "format": 1.0, "unknown": 1.0},
        "sv": {"swap": 0.0, "drop": 1.0, "duplicate": 1.0},
    }
    assert metrics.pairs_by_kind == {"swap": 3, "drop": 2, "duplicate": 2, "format": 1, "unknown": 1}
    assert metrics.accuracy == {"en": 0.6, "sv": 0.75}
    assert metrics.overall_accuracy == 6 / 9

    # the tracker's names: rm/acc/kind/<kind>, rm/acc/<lang>/<kind> next to rm/acc/<lang>
    logged = metrics.to_metrics()
    assert {k: v for k, v in logged.items() if k.startswith("rm/acc/kind/")} == {
        "rm/acc/kind/swap": 0.0,
        "rm/acc/kind/drop": 1.0,
        "rm/acc/kind/duplicate": 1.0,
        "rm/acc/kind/format": 1.0,
        "rm/acc/kind/unknown": 1.0,
    }
    assert {k: v for k, v in logged.items() if k.startswith("rm/acc/sv")} == {
        "rm/acc/sv": 0.75,
        "rm/acc/sv/swap": 0.0,
        "rm/acc/sv/drop": 1.0,
        "rm/acc/sv/duplicate": 1.0,
    }
    # rm_metrics.json's fields, as JSON keeps them
    report = json.loads(json.dumps(metrics.to_json()))
    assert report["accuracy_by_kind"] == metrics.accuracy_by_kind
    assert report["accuracy_by_language_kind"] == metrics.accuracy_by_language_kind
    assert report["pairs_by_kind"] == metrics.pairs_by_kind
    # the stage's printout: one row per language, "-" where a language has no pair of a kind
    assert format_kind_table(metrics) == [
        "       swap  drop duplicate format unknown   all",
        "all   0.000 1.000     1.000  1.000   1.000 0.667",
        "en    0.000 1.000         -  1.000   1.000 0.600",
        "sv    0.000 1.000     1.000      -       - 0.750",
        "pairs     3     2         2      1       1     9",
    ]


def test_synthetic_pairs_keep_their_kind_through_the_pairs_file(tmp_path):
    def make_env(code: str):
        return packaged_env("alphabet_sort", code, seed=0, num_train_examples=40, max_turns=1)

    made = synthetic_pairs(
        make_env, ["en", "sv", "ja"], n=40, severity=0.5, corruptions=list(CORRUPTIONS), seed=0
    )
    path = write_pairs(tmp_path / "pairs_heldout.jsonl", made)
    pairs = load_pairs(path)
    assert [p.kind for p in pairs] == [p.meta["corruption"] for p in made]
    counts = Counter(p.kind for p in pairs)
    assert set(counts) == set(CORRUPTIONS)  # every kind drawn, none unknown

    metrics = swap_blind_metrics(pairs)
    assert metrics.accuracy_by_kind == {kind: 0.0 if kind == "swap" else 1.0 for kind in CORRUPTIONS}
    assert metrics.pairs_by_kind == {kind: counts[kind] for kind in CORRUPTIONS}
    for lang in ("en", "sv", "ja"):
        lang_kinds = Counter(p.kind for p in pairs if p.language == lang)
        assert metrics.accuracy_by_language_kind[lang] == {
            kind: 0.0 if kind == "swap" else 1.0 for kind in CORRUPTIONS if kind in lang_kinds
        }
        assert metrics.accuracy[lang] == 1 - lang_kinds["swap"] / lang_kinds.total()
