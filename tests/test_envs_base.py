"""The shared environment helpers: the fast difflib ratio, tag parsing, the format score."""

from __future__ import annotations

import difflib
import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo.envs.base import XMLParser, int_arg, last_tag_content, similarity_ratio, tag_spans
from grpo.errors import UserError

# small alphabets make repeated characters (and so difflib's tie-breaks) common
texts = st.one_of(
    st.text(alphabet="ab\n", max_size=300),
    st.text(alphabet="abcdefghij \n/!", max_size=450),
    st.text(max_size=60),
)


def sm_ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts)
def test_similarity_ratio_is_difflibs(a, b):
    assert similarity_ratio(a, b) == sm_ratio(a, b)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_similarity_ratio_is_difflibs_on_near_copies(data):
    # near-identical pairs around difflib's 200-character autojunk threshold
    b = data.draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz\n /!", min_size=150, max_size=320))
    a = list(b)
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, max(0, len(a) - 1)))
        op = data.draw(st.sampled_from(["del", "ins", "sub", "swap"]))
        if op == "del" and a:
            del a[i]
        elif op == "ins":
            a.insert(i, data.draw(st.sampled_from("ax\n!")))
        elif op == "sub" and a:
            a[i] = "q"
        elif a:
            j = data.draw(st.integers(0, len(a) - 1))
            a[i], a[j] = a[j], a[i]
    a = "".join(a)
    assert similarity_ratio(a, b) == sm_ratio(a, b)
    assert similarity_ratio(b, a) == sm_ratio(b, a)


def test_similarity_ratio_on_random_name_lists():
    rng = random.Random(7)
    names = [
        f"{rng.choice(['ann', 'bob', 'cy', 'dee'])}{rng.choice(['smith', 'jones', 'li'])}" for _ in range(40)
    ]
    for _ in range(300):
        exp = "\n".join(rng.sample(names, rng.randint(1, 25)))
        lines = exp.split("\n")
        rng.shuffle(lines[: rng.randint(0, len(lines))])
        pred = "\n".join(lines[: rng.randint(0, len(lines))] + rng.sample(names, rng.randint(0, 3)))
        assert similarity_ratio(pred, exp) == sm_ratio(pred, exp)


def test_similarity_ratio_corner_cases():
    assert similarity_ratio("", "") == 1.0 == sm_ratio("", "")
    assert similarity_ratio("abc", "") == 0.0
    # all characters "popular" for difflib's autojunk: still matched whole when identical
    assert similarity_ratio("a" * 300, "a" * 300) == 1.0 == sm_ratio("a" * 300, "a" * 300)
    assert similarity_ratio("a" * 300, "a" * 299 + "b") == sm_ratio("a" * 300, "a" * 299 + "b")


def test_similarity_ratio_stays_fast_on_huge_garbage():
    rng = random.Random(0)
    garbage = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz \n") for _ in range(100_000))
    start = time.perf_counter()
    value = similarity_ratio(garbage, "alice\nbob\ncarol // new name!")
    assert time.perf_counter() - start < 5 and 0 <= value < 0.01


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<t>", "</t>", "x", "\n", "<t", "t>", "</t"]), max_size=30).map("".join))
def test_tag_spans_equal_re_findall(text):
    found = [text[s:e] for s, e in tag_spans(text, "t")]
    assert found == re.findall(r"<t>(.*?)</t>", text, re.DOTALL)
    assert last_tag_content(text, "t") == (found[-1] if found else None)


def test_tag_parsing_is_linear_on_unclosed_tags():
    text = "<answer>" * 200_000
    start = time.perf_counter()
    assert last_tag_content(text, "answer") is None
    assert XMLParser().format_score(text) == 0.0
    assert time.perf_counter() - start < 2


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


def test_int_arg():
    assert int_arg("k", 3) == 3 and int_arg("k", "4") == 4 and int_arg("k", 5.0) == 5
    for bad in [True, 2.5, "x", None, [1]]:
        with pytest.raises(UserError, match=r"^env\.k: expected an integer"):
            int_arg("k", bad)
    with pytest.raises(UserError, match=r"^env\.k: must be >= 1, got 0"):
        int_arg("k", 0, minimum=1)
