"""similarity_ratio: exactly difflib's SequenceMatcher ratio, and fast on huge garbage."""

from __future__ import annotations

import difflib
import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo.envs.similarity import similarity_ratio

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
