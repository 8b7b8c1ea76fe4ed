"""Every reward function of every environment returns a float in [0, 1] and never raises, whatever
the completion: empty, garbage, huge, unicode, unbalanced tags, non-string content, missing turns.
The functions are called directly (not through score_reward), so a raise fails the test."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from helpers.packaged_env import packaged_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo.envs.base import Environment

ENVS: dict[str, Environment] = {
    "alphabet_sort": packaged_env("alphabet_sort", min_turns=3, max_turns=3, num_eval_examples=5, seed=1),
    "alphabet_sort_mixed": packaged_env("alphabet_sort", num_eval_examples=5, seed=2, similarity_power=1),
    "reverse_text": packaged_env("reverse_text", num_eval_examples=5),
    "arithmetic": packaged_env("arithmetic", num_eval_examples=5, decimal_places=1, min_value=-5),
}
FUNCS = [(env_name, f.name) for env_name, env in ENVS.items() for f in env.rubric.funcs]

# pieces models really emit, recombined into well-formed, unbalanced and nested shapes
FRAGMENTS = [
    "<alphabetical_sorted>",
    "</alphabetical_sorted>",
    "<combined_alphabetical_sorted>",
    "</combined_alphabetical_sorted>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "\\boxed{",
    "\\frac{",
    "{",
    "}",
    "\n",
    " ",
    " // new name!",
    "AliceSmith",
    "bob",
    "4",
    "-1/2",
    "0.5",
    ".",
    "ß",
    "İ",
    "\u0301",
    "😀",
    "\x00",
    "\u2028",
]
texts = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.builds(
        lambda piece, n: piece * n, st.sampled_from(FRAGMENTS + ["AliceSmith\n", "9"]), st.integers(500, 5000)
    ),
)
contents = st.one_of(
    texts,
    texts,
    st.none(),
    st.integers(),
    st.floats(),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "assistant", "user", "system", "tool", ""]), "content": contents}
)
odd_messages = st.one_of(
    st.none(), st.text(max_size=5), st.integers(), st.fixed_dictionaries({"content": texts})
)
completions = st.one_of(
    st.lists(messages, max_size=6),
    st.lists(st.one_of(messages, odd_messages), max_size=4),
    st.none(),
    texts,
    st.integers(),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)


def check(value: Any) -> None:
    assert type(value) is float, type(value)
    assert not math.isnan(value) and 0.0 <= value <= 1.0


def call(env_name: str, func_name: str, row_index: int, completion: Any, state: Any = None) -> float:
    env = ENVS[env_name]
    row = env.rows("eval")[row_index % 5]
    fn = next(f.fn for f in env.rubric.funcs if f.name == func_name)
    return fn(
        prompt=row.prompt,
        completion=completion,
        info=row.info,
        state=env.initial_state(row) if state is None else state,
    )


@pytest.mark.parametrize(("env_name", "func_name"), FUNCS)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(row_index=st.integers(0, 4), completion=completions)
def test_any_completion_scores_in_unit_interval(env_name, func_name, row_index, completion):
    check(call(env_name, func_name, row_index, completion))


@pytest.mark.parametrize(("env_name", "func_name"), FUNCS)
@settings(max_examples=60, deadline=None)
@given(row_index=st.integers(0, 4), seed=st.integers(0, 2**32 - 1), cut=st.integers(0, 6), noise=texts)
def test_damaged_reference_completions(env_name, func_name, row_index, seed, cut, noise):
    """Reference episodes with turns missing and garbage spliced into assistant turns."""
    env = ENVS[env_name]
    completion = [dict(m) for m in env.reference_completion(env.rows("eval")[row_index % 5])][:cut]
    rng = random.Random(seed)
    for m in completion:
        if m["role"] == "assistant" and rng.random() < 0.7:
            at = rng.randint(0, len(m["content"]))
            m["content"] = m["content"][:at] + noise + m["content"][at:]
    value = call(env_name, func_name, row_index, completion)
    check(value)
    if cut == 0:
        assert value == 0.0


@pytest.mark.parametrize(("env_name", "func_name"), FUNCS)
def test_empty_and_missing_state(env_name, func_name):
    for completion in ([], [{"role": "assistant", "content": ""}], [{"role": "assistant"}]):
        check(call(env_name, func_name, 0, completion, state={}))
        assert call(env_name, func_name, 0, completion) == 0.0
