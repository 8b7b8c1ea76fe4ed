"""arithmetic: exact answers, operator precedence, \\boxed{} parsing and the exact_match reward."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest
from helpers.packaged_env import packaged_env

from grpo.envs.arithmetic import evaluate, format_number, last_boxed, parse_number
from grpo.errors import UserError


def answer(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def independent_value(expression: str) -> Fraction:
    """Python's own precedence over Fractions: every number literal becomes a Fraction."""
    code = re.sub(r"\d+(?:\.\d+)?", lambda m: f"Fraction('{m.group()}')", expression)
    return eval(code, {"Fraction": Fraction})  # the expression is ours: digits, operators, parentheses


def test_evaluate_uses_precedence_left_to_right():
    f = Fraction
    assert evaluate([f(2), f(3), f(4)], ["+", "*"]) == 14
    assert evaluate([f(8), f(4), f(2)], ["/", "/"]) == 1
    assert evaluate([f(8), f(4), f(2)], ["-", "-"]) == 2
    assert evaluate([f(1), f(3), f(2), f(5)], ["-", "/", "*"]) == Fraction(-13, 2)  # 1 - (3 / 2) * 5


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(7), "7"),
        (Fraction(-7, 4), "-1.75"),
        (Fraction(1, 8), "0.125"),
        (Fraction(7, 3), "7/3"),
        (Fraction(-1, 6), "-1/6"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text
    assert Fraction(text) == value


@pytest.mark.parametrize(
    "text", ["4", "4.0", " 4 ", "4/1", "8/2", "\\frac{8}{2}", "\\dfrac{12}{3}", "+4", "$4$", "(4)", "4.000"]
)
def test_parse_number_agrees_on_four(text):
    assert parse_number(text) == 4


@pytest.mark.parametrize(
    "text", ["", "four", "4/0", "1/2/3", "4x", "\\frac{1}{0}", "9" * 300, None, "{4}", "4 5"]
)
def test_parse_number_refuses_garbage(text):
    assert parse_number(text) is None


def test_parse_number_signs_and_separators():
    assert parse_number("-\\frac{1}{2}") == Fraction(-1, 2)
    assert parse_number("\u22123/4") == Fraction(-3, 4)
    assert parse_number("1,234.5") == Fraction(2469, 2)
    assert parse_number("-0.25") == Fraction(-1, 4)


def test_last_boxed_handles_nesting_and_unclosed():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{3} and \\boxed{4") == "3"
    assert last_boxed("\\boxed {5}") == "5"
    assert last_boxed("no box {6}") is None
    assert last_boxed(None) is None


def test_rows_deterministic_exact_and_well_formed():
    env = packaged_env(
        "arithmetic",
        seed=0,
        num_train_examples=200,
        num_eval_examples=20,
        min_value=-9,
        max_value=9,
        max_operands=5,
    )
    assert env.rows("train") == packaged_env(
        "arithmetic", seed=0, num_train_examples=200, min_value=-9, max_value=9, max_operands=5
    ).rows("train")
    assert env.rows("train") != packaged_env(
        "arithmetic", seed=1, num_train_examples=200, min_value=-9, max_value=9, max_operands=5
    ).rows("train")
    assert env.rows("train", 20) != env.rows("eval")
    ops = set()
    for row in env.rows("train"):
        expression = row.info["expression"]
        assert Fraction(row.info["answer"]) == independent_value(expression)
        assert row.prompt[1]["content"] == f"Compute: {expression}"
        assert 2 <= len(re.findall(r"\d+", expression)) <= 5
        ops |= set(re.findall(r" ([-+*/]) ", expression))
        assert row.language == "en"
        json.dumps(row.info)
    assert ops == {"+", "-", "*", "/"}


def test_decimal_operands_and_chosen_operations():
    env = packaged_env(
        "arithmetic", operations=["*"], decimal_places=2, min_value=0, max_value=3, num_train_examples=30
    )
    for row in env.rows("train"):
        assert re.fullmatch(r"\d\.\d\d( \* \d\.\d\d)+", row.info["expression"])
        assert Fraction(row.info["answer"]) == independent_value(row.info["expression"])


def test_reference_completion_and_crafted_answers():
    env = packaged_env("arithmetic", seed=2, num_eval_examples=30, decimal_places=1)
    for row in env.rows("eval"):
        assert env.score(row, env.reference_completion(row)) == {"exact_match": 1.0}
    row = env.rows("eval", 1)[0]
    value = Fraction(row.info["answer"])
    as_fraction = f"{value.numerator}/{value.denominator}"
    assert env.score(row, answer(f"so \\boxed{{ {as_fraction} }}"))["exact_match"] == 1.0
    assert env.score(row, answer(f"\\boxed{{{value + 1}}}"))["exact_match"] == 0.0
    assert (
        env.score(row, answer(f"\\boxed{{{as_fraction}}} no wait \\boxed{{{value + 1}}}"))["exact_match"]
        == 0.0
    )
    assert env.score(row, answer(f"{row.info['answer']}"))["exact_match"] == 0.0  # not boxed
    assert env.score(row, [])["exact_match"] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"operations": ["^"]}, "operations"),
        ({"operations": "+"}, "operations"),
        ({"min_operands": 1}, "min_operands"),
        ({"min_value": 5, "max_value": 1}, "max_value"),
        ({"decimal_places": 9}, "decimal_places"),
        ({"operations": ["/"], "min_value": 0, "max_value": 0}, "min_value/max_value"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(UserError, match=rf"^env\.{re.escape(field)}: "):
        packaged_env("arithmetic", **kwargs)
