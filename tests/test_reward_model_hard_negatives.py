"""Hard negatives: each way a policy breaks down (a fragment repeated to the budget, an unclosed tag,
another script, an empty answer, a copy of the prompt) is produced from the reference episode, in
several environments and scripts, scores below the reference by the env's rubric, and gets its own
accuracy row in the RM's report."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from helpers.packaged_env import packaged_env

from grpo.config import CORRUPTIONS, HARD_NEGATIVES
from grpo.reward_model.synthetic import corrupt_episode, env_pairs
from grpo.reward_model.train import format_kind_table, pair_metrics


@pytest.mark.parametrize(
    ("env_name", "language", "args"),
    [
        ("alphabet_sort", "en", {"max_turns": 1}),
        ("alphabet_sort", "ja", {"max_turns": 2, "min_turns": 2}),
        ("alphabet_sort", "ru", {"max_turns": 1}),
        ("reverse_text", "de", {}),
    ],
)
def test_every_hard_negative_is_made_and_scores_below_the_reference(env_name, language, args):
    env = packaged_env(env_name, language, seed=0, num_train_examples=60, **args)
    pairs = env_pairs(env, 60, severity=0.5, corruptions=list(HARD_NEGATIVES), seed=0)
    kinds = Counter(p.kind for p in pairs)
    assert set(kinds) == set(HARD_NEGATIVES), kinds
    rows = {tuple(map(str, r.prompt)): r for r in env.rows("train", 60)}
    for pair in pairs:
        row = rows[tuple(map(str, pair.prompt))]
        chosen = env.rubric.total(env.score(row, pair.chosen))
        rejected = env.rubric.total(env.score(row, pair.rejected))
        assert rejected < chosen, (pair.kind, pair.rejected)


def test_each_kind_looks_like_its_breakdown():
    env = packaged_env("alphabet_sort", "en", seed=0, num_train_examples=4, max_turns=1)
    row = env.rows("train", 1)[0]
    reference = env.reference_completion(row)
    answer = reference[0]["content"]
    tag = answer[: answer.index(">") + 1]
    rng = random.Random(0)

    def turn(kind: str, severity: float = 1.0) -> str:
        out = corrupt_episode(reference, kind, severity, rng, prompt=row.prompt)
        return out[0]["content"]

    repeat = turn("repeat")
    assert repeat.startswith(tag) and "</" not in repeat and len(repeat) > 200  # the loop runs to a budget
    body = repeat[len(tag) :].strip()
    assert len(set(body)) <= 4  # one short fragment, over and over
    unclosed = turn("unclosed", 0.0)
    assert unclosed.startswith(tag) and "</" not in unclosed
    script = turn("script")
    assert any("\u0400" <= ch <= "\u04ff" for ch in script)  # Latin names written in Cyrillic
    assert tag in script  # the format is kept: only the script changed
    empty = turn("empty")
    assert empty.startswith(tag) and empty[len(tag) :].strip().startswith("</")
    assert turn("copy_prompt") == row.prompt[-1]["content"]


def test_hard_negatives_get_their_own_accuracy_rows():
    env = packaged_env("alphabet_sort", "sv", seed=0, num_train_examples=50, max_turns=1)
    pairs = env_pairs(env, 50, severity=0.5, corruptions=list(CORRUPTIONS), seed=1)
    chosen = [1.0] * len(pairs)
    # a scorer that is fooled by exactly the repetition loops: they score above the reference
    rejected = [2.0 if p.kind == "repeat" else 0.0 for p in pairs]
    metrics = pair_metrics(chosen, rejected, [p.language for p in pairs], [p.kind for p in pairs])
    assert metrics.accuracy_by_kind["repeat"] == 0.0
    assert all(metrics.accuracy_by_kind[k] == 1.0 for k in HARD_NEGATIVES if k != "repeat")
    header = format_kind_table(metrics)[0].split()
    assert [k for k in header if k in HARD_NEGATIVES] == list(HARD_NEGATIVES)  # CORRUPTIONS order
