"""Parsers shared by environments: tag parsing (linear on any text), the format score, assistant turns."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo.envs.parsers import XMLParser, assistant_turns, last_tag_content, tag_spans


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<t>", "</t>", "x", "\n", "<t", "t>", "</t"]), max_size=30).map("".join))
def test_tag_spans_equal_re_findall(text):
    found = [text[s:e] for s, e in tag_spans(text, "t")]
    assert found == re.findall(r"<t>(.*?)</t>", text, re.DOTALL)
    assert last_tag_content(text, "t") == (found[-1] if found else None)


def test_tag_parsing_is_linear_on_unclosed_tags():
    """Hostile model output (a tag opened 200,000 times) costs time in proportion to its length:
    8 times the text takes under 24 times as long (linear: 8; a quadratic scan: 64). Compared in
    one process, each size's fastest of three tries, so a busy machine does not decide it (an
    absolute 2 s bound failed beside three other test workers)."""

    def fastest(n: int) -> float:
        text = "<answer>" * n
        times = []
        for _ in range(3):
            start = time.perf_counter()
            assert last_tag_content(text, "answer") is None
            assert XMLParser().format_score(text) == 0.0
            times.append(time.perf_counter() - start)
        return min(times)

    small, large = fastest(25_000), fastest(200_000)
    assert large < 24 * small, (small, large)


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("<answer>x</answer>", 1.0),
        ("  <think>a</think>\n<answer>x</answer>\n", 1.0),
        ("<think>a</think><think>b</think><answer>x</answer>", 0.5),  # a field twice
        ("<answer>x</answer><think>a</think>", 0.5),  # answer not last
        ("intro <answer>x</answer>", 0.5),  # text outside the fields
        ("<answer>x</answer><answer>y</answer>", 0.5),
        ("<think>a<answer>x</answer></think>", 0.5),  # nested
        ("<think>a</think> <answer>x", 0.0),  # unclosed answer
        ("", 0.0),
        (None, 0.0),
    ],
)
def test_format_score(text, score):
    assert XMLParser().format_score(text) == score


def test_assistant_turns_of_anything():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": None},
        "junk",
    ]
    assert assistant_turns(messages) == ["a", ""]
    for garbage in (None, 3.5, "text", {"role": "assistant"}):
        assert assistant_turns(garbage) == []
