"""char_target: write a line made only of a target set of characters (single turn, dense reward).

A smoke test for learning. The reward is the share of the answer's characters that belong to the
target set, so even a randomly initialised model earns partial credit and every sampled token
changes it a little: a GRPO run that works raises it within a few dozen steps on CPU, one that is
broken (zero gradient, wrong masks, wrong advantages) leaves it flat. Use it to check a setup
before spending GPU hours (conf/env/char_target.yaml has a command that runs in ~45 s on CPU).

Answers shorter than `min_length` characters are scored as if padded with wrong characters, so
the optimum is a long answer of target characters, not a single lucky token. English only: its
YAML has a `prompts.en` block (keys: PROMPTS; topics are lorem words of the block's faker_locale).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from grpo.envs.base import Environment, Messages, Row, int_arg
from grpo.envs.parsers import assistant_turns
from grpo.envs.prompts import PromptSpec, Text
from grpo.envs.reverse_text import lorem_words
from grpo.envs.rubric import RewardFunc, Rubric
from grpo.errors import UserError

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec

PROMPTS = PromptSpec({"user": Text(("topic", "chars"), ("{chars}",))}, settings=("faker_locale",))


def target_fraction(text: str, targets: frozenset[str], min_length: int) -> float:
    """Characters of `text` in `targets`, divided by max(len(text), min_length)."""
    if not isinstance(text, str) or not text:
        return 0.0
    hits = sum(1 for ch in text if ch in targets)
    return hits / max(len(text), min_length)


class CharTargetEnv(Environment):
    name = "char_target"
    prompt_spec = PROMPTS

    def __init__(
        self,
        target_chars: str = "abcdefghijklmnopqrstuvwxyz ",
        min_length: int = 8,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: LanguageSpec | str = "en",
        name: str | None = None,
        prompts: dict[str, Any] | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name, prompts)
        if not isinstance(target_chars, str) or not target_chars:
            raise UserError(
                f"env.target_chars: expected a non-empty string of characters, got {target_chars!r}"
            )
        self.target_chars = target_chars
        self.targets = frozenset(target_chars)
        self.min_length = int_arg("min_length", min_length, minimum=1)
        # topic words of every language rows can be in
        self.topics: dict[str, list[str]] = {}
        for code, block in self.prompts.items():
            words = lorem_words(block.get("faker_locale", "en_US"), f"env.prompts.{code}.faker_locale")
            self.topics[code] = sorted(set(words))
        self.rubric = Rubric([RewardFunc("target_char_fraction", self._fraction, 1.0)])

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        spec = self.row_spec(split, index)
        # two topic words make prompts (nearly) unique, so rows are distinguishable by their prompt
        topic = " ".join(rng.sample(self.topics[spec.code], 2))
        chars = repr(self.target_chars)
        return Row(
            id=index,
            prompt=[{"role": "user", "content": self.prompt(spec, "user", topic=topic, chars=chars)}],
            info={"target_chars": self.target_chars, "min_length": self.min_length, "topic": topic},
            language=spec.code,
        )

    def reference_completion(self, row: Row) -> Messages:
        allowed = [c for c in row.info["topic"] if c in self.targets] or [self.target_chars[0]]
        text = "".join(allowed)
        while len(text) < self.min_length:
            text += text
        return [{"role": "assistant", "content": text}]

    def _fraction(self, completion: Any = None, info: dict[str, Any] | None = None, **_: Any) -> float:
        turns = assistant_turns(completion)
        text = turns[-1] if turns else ""
        info = info or {}
        targets = frozenset(info.get("target_chars") or self.target_chars)
        return target_fraction(text, targets, int(info.get("min_length") or self.min_length))
