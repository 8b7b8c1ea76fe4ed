"""reverse_text: rows, the reference answer, and both rewards on crafted answers."""

from __future__ import annotations

import difflib
import json

import pytest
from helpers.packaged_env import packaged_env

from grpo.envs.reverse_text import ReverseTextEnv
from grpo.errors import UserError


@pytest.fixture(scope="module")
def env() -> ReverseTextEnv:
    return packaged_env("reverse_text", seed=0, num_train_examples=30, num_eval_examples=10)


def answer(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_rows_deterministic_per_seed_and_splits_differ(env):
    same = packaged_env("reverse_text", seed=0, num_train_examples=30, num_eval_examples=10)
    other = packaged_env("reverse_text", seed=1, num_train_examples=30, num_eval_examples=10)
    assert env.rows("train") == same.rows("train")
    assert env.rows("train") != other.rows("train")
    assert env.rows("train") != env.rows("eval")
    for row in env.rows("train"):
        assert row.language == "en"
        assert row.prompt[0]["role"] == "system" and "<answer>" in row.prompt[0]["content"]
        assert row.prompt[1]["content"].endswith(row.info["text"])
        assert row.info["answer"] == row.info["text"][::-1]
        assert 4 <= len(row.info["text"].split()) <= 12 and row.info["text"].endswith(".")
        json.dumps(row.info)


def test_text_length_is_configurable():
    env = packaged_env("reverse_text", min_words=20, max_words=20, num_train_examples=5)
    assert all(len(r.info["text"].split()) == 20 for r in env.rows("train"))
    with pytest.raises(UserError, match=r"^env\.max_words: must be >= 5"):
        packaged_env("reverse_text", min_words=5, max_words=2)


def test_reference_completion_scores_one(env):
    for row in env.rows("eval"):
        assert env.score(row, env.reference_completion(row)) == {
            "reverse_text_similarity": 1.0,
            "format_reward": 1.0,
        }


def test_crafted_answers(env):
    row = env.rows("eval", 1)[0]
    target = row.info["answer"]
    half = target[: len(target) // 2].strip()  # the parsed answer is stripped
    assert env.score(row, answer(f"<think>reverse it</think>\n<answer>\n{target}\n</answer>")) == {
        "reverse_text_similarity": 1.0,
        "format_reward": 1.0,
    }
    expected = difflib.SequenceMatcher(None, half, target).ratio()
    assert env.score(row, answer(f"<answer>{half}</answer>"))["reverse_text_similarity"] == pytest.approx(
        expected
    )
    # the text itself, not reversed: partial similarity only
    unreversed = env.score(row, answer(f"<answer>{row.info['text']}</answer>"))["reverse_text_similarity"]
    assert unreversed == pytest.approx(difflib.SequenceMatcher(None, row.info["text"], target).ratio())
    assert unreversed < 1
    assert env.score(row, answer(target)) == {"reverse_text_similarity": 0.0, "format_reward": 0.0}
    assert env.score(row, answer(f"Sure! <answer>{target}</answer>")) == {
        "reverse_text_similarity": 1.0,
        "format_reward": 0.5,
    }
    assert env.score(row, []) == {"reverse_text_similarity": 0.0, "format_reward": 0.0}


def test_weights(env):
    assert {f.name: f.weight for f in env.rubric.funcs} == {
        "reverse_text_similarity": 1.0,
        "format_reward": 0.2,
    }
