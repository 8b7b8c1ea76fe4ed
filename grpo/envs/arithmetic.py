"""arithmetic: generated arithmetic problems with exact answers (single turn, math style).

Each row is an expression such as `7 - 3.5 * (-2) / 4` over `min_operands..max_operands` operands
drawn from [min_value, max_value] with `decimal_places` digits, and operators from `operations`,
with the usual precedence (* and / before + and -, left to right). The answer is computed exactly
with fractions.Fraction and written as an integer, a terminating decimal or p/q. The model puts its
final answer in \\boxed{}; `exact_match` compares the last complete \\boxed{...} numerically, so
"4", "4.0", " 4 ", "4/1" and "\\frac{8}{2}" all match 4.

Prompts follow the row's language (the `prompts.<code>` blocks of conf/env/arithmetic.yaml, keys:
PROMPTS); the expression, the answer and \\boxed{} stay machine-readable in every language (ASCII
digits, a decimal point, p/q), so the same parser scores every language.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from grpo.envs.base import Environment, Messages, Row, int_arg
from grpo.envs.parsers import assistant_turns
from grpo.envs.prompts import PromptSpec, Text
from grpo.envs.rubric import RewardFunc, Rubric
from grpo.errors import UserError

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec

OPERATIONS = ("+", "-", "*", "/")
# a language's prompt block: the system prompt, the problem, and a perfect answer (the reference)
PROMPTS = PromptSpec(
    {
        "system": Text(keep=("\\boxed{",)),
        "user": Text(("expression",), ("{expression}",)),
        "reference": Text(("expression", "answer"), ("\\boxed{{{answer}}}",)),
    }
)

# ---- exact numbers -------------------------------------------------------------------------------


def format_number(x: Fraction) -> str:
    """Integer, terminating decimal (denominator 2^a 5^b) or p/q: the canonical written answer."""
    if x.denominator == 1:
        return str(x.numerator)
    den, twos, fives = x.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return f"{x.numerator}/{x.denominator}"
    digits = max(twos, fives)
    scaled = abs(x.numerator) * 10**digits // x.denominator
    sign = "-" if x < 0 else ""
    return f"{sign}{scaled // 10**digits}.{scaled % 10**digits:0{digits}d}"


def format_operand(x: Fraction, decimal_places: int) -> str:
    """An operand as shown in the expression: fixed decimals, negatives in parentheses."""
    scaled = abs(x) * 10**decimal_places
    whole, frac = divmod(int(scaled), 10**decimal_places)
    text = f"{whole}.{frac:0{decimal_places}d}" if decimal_places else str(whole)
    return f"(-{text})" if x < 0 else text


def evaluate(operands: Sequence[Fraction], ops: Sequence[str]) -> Fraction:
    """Exact value with the usual precedence: products/quotients first, then sums, left to right."""
    total, sign, term = Fraction(0), 1, operands[0]
    for op, x in zip(ops, operands[1:], strict=True):
        if op == "*":
            term *= x
        elif op == "/":
            term /= x
        else:
            total += sign * term
            sign, term = (1 if op == "+" else -1), x
    return total + sign * term


# ---- answer parsing ------------------------------------------------------------------------------

_BOX_TOKENS = re.compile(r"\\boxed\s*\{|\{|\}")
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_LATEX_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_LATEX_SPACING = re.compile(r"\\[,!;: ]|\{,\}")
# spaces around a fraction bar or after a sign are layout; any other inner space splits two numbers
_LAYOUT_SPACE = re.compile(r"\s*/\s*|(?<=^[+-])\s+")
# longer numbers are garbage, and int() refuses more than 4300 digits anyway
_MAX_NUMBER_CHARS = 200


def last_boxed(text: Any) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces balanced), or None. One pass."""
    if not isinstance(text, str):
        return None
    stack: list[tuple[int, bool]] = []
    best: tuple[int, int] | None = None
    for m in _BOX_TOKENS.finditer(text):
        if m.group() == "}":
            if stack:
                start, boxed = stack.pop()
                if boxed and (best is None or start > best[0]):
                    best = (start, m.start())
        else:
            stack.append((m.end(), m.group() != "{"))
    return None if best is None else text[best[0] : best[1]]


def _decimal(text: str) -> Fraction | None:
    text = text.strip()
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    return Fraction(text) if _DECIMAL.fullmatch(text) else None


def parse_number(text: Any) -> Fraction | None:
    """An exact number written as an integer, decimal, p/q or \\frac{p}{q}; None if it is not one."""
    if not isinstance(text, str):
        return None
    s = _LATEX_SPACING.sub("", text.replace("\u2212", "-")).strip().strip("$").strip()
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    if s.startswith("(") and s.endswith(")"):
        s = s[1:-1].strip()
    s = _LAYOUT_SPACE.sub(lambda m: "/" if "/" in m.group() else "", s)
    try:
        if m := _LATEX_FRAC.fullmatch(s):
            num, den = _decimal(m.group(2)), _decimal(m.group(3))
            if num is None or den is None:
                return None
            return -(num / den) if m.group(1) == "-" else num / den
        if s.count("/") == 1:
            num_text, den_text = s.split("/")
            num, den = _decimal(num_text), _decimal(den_text)
            return None if num is None or den is None else num / den
        return _decimal(s)
    except (ValueError, ZeroDivisionError):
        return None


# ---- environment ---------------------------------------------------------------------------------


class ArithmeticEnv(Environment):
    name = "arithmetic"
    prompt_spec = PROMPTS

    def __init__(
        self,
        operations: Sequence[str] = OPERATIONS,
        min_operands: int = 2,
        max_operands: int = 3,
        min_value: int = 0,
        max_value: int = 20,
        decimal_places: int = 0,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: LanguageSpec | str = "en",
        name: str | None = None,
        prompts: dict[str, Any] | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name, prompts)
        if isinstance(operations, str) or not operations or any(op not in OPERATIONS for op in operations):
            raise UserError(
                f"env.operations: expected a non-empty list drawn from {list(OPERATIONS)}, got {operations!r}"
            )
        self.operations = list(dict.fromkeys(operations))
        self.min_operands = int_arg("min_operands", min_operands, minimum=2)
        self.max_operands = int_arg("max_operands", max_operands, minimum=self.min_operands)
        self.decimal_places = int_arg("decimal_places", decimal_places, minimum=0)
        if self.decimal_places > 6:
            raise UserError(f"env.decimal_places: at most 6, got {self.decimal_places}")
        self.min_value = int_arg("min_value", min_value)
        self.max_value = int_arg("max_value", max_value, minimum=self.min_value)
        if "/" in self.operations and self.min_value == self.max_value == 0:
            raise UserError("env.min_value/max_value: division needs a non-zero operand; widen the range")
        self.rubric = Rubric([RewardFunc("exact_match", self._exact_match, 1.0, binary=True)])

    def draw_operand(self, rng: random.Random, nonzero: bool = False) -> Fraction:
        scale = 10**self.decimal_places
        while True:
            value = Fraction(rng.randint(self.min_value * scale, self.max_value * scale), scale)
            if value or not nonzero:
                return value

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        spec = self.row_spec(split, index)
        count = rng.randint(self.min_operands, self.max_operands)
        ops = [rng.choice(self.operations) for _ in range(count - 1)]
        # the operand right after "/" is its divisor (left-to-right precedence), so never zero
        operands = [self.draw_operand(rng)] + [self.draw_operand(rng, nonzero=op == "/") for op in ops]
        parts = [format_operand(operands[0], self.decimal_places)]
        for op, x in zip(ops, operands[1:], strict=True):
            parts += [op, format_operand(x, self.decimal_places)]
        expression = " ".join(parts)
        return Row(
            id=index,
            prompt=[
                {"role": "system", "content": self.prompt(spec, "system")},
                {"role": "user", "content": self.prompt(spec, "user", expression=expression)},
            ],
            info={"expression": expression, "answer": format_number(evaluate(operands, ops))},
            language=spec.code,
        )

    def reference_completion(self, row: Row) -> Messages:
        info = row.info
        text = self.prompt(row.language, "reference", expression=info["expression"], answer=info["answer"])
        return [{"role": "assistant", "content": text}]

    def has_answer(self, row: Row, completion: Messages) -> bool:
        """The last assistant turn's last \\boxed{} holds a number (what exact_match compares)."""
        return self._answer(completion) is not None

    @staticmethod
    def _answer(completion: Any) -> Fraction | None:
        turns = assistant_turns(completion)
        return parse_number(last_boxed(turns[-1])) if turns else None

    def _exact_match(self, completion: Any = None, info: dict[str, Any] | None = None, **_: Any) -> float:
        predicted = self._answer(completion)
        return 1.0 if predicted is not None and predicted == Fraction((info or {})["answer"]) else 0.0
