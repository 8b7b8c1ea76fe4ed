"""char_target: write a line made only of a target set of characters (single turn, dense reward).

A smoke test for learning. The reward is the share of the answer's characters that belong to the
target set, so even a randomly initialised model earns partial credit and every sampled token
changes it a little: a GRPO run that works raises it within a few dozen steps on CPU, one that is
broken (zero gradient, wrong masks, wrong advantages) leaves it flat. Use it to check a setup
before spending GPU hours (conf/env/char_target.yaml has a command that runs in ~45 s on CPU).

Answers shorter than `min_length` characters are scored as if padded with wrong characters, so
the optimum is a long answer of target characters, not a single lucky token.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

from grpo.envs.base import Environment, Messages, RewardFunc, Row, Rubric, assistant_turns, int_arg, localized
from grpo.errors import UserError

PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "user": "Write one line about '{topic}' using only these characters: {chars}",
        "faker_locale": "en_US",
    },
}


def target_fraction(text: str, targets: frozenset[str], min_length: int) -> float:
    """Characters of `text` in `targets`, divided by max(len(text), min_length)."""
    if not isinstance(text, str) or not text:
        return 0.0
    hits = sum(1 for ch in text if ch in targets)
    return hits / max(len(text), min_length)


class CharTargetEnv(Environment):
    name = "char_target"

    def __init__(
        self,
        target_chars: str = "abcdefghijklmnopqrstuvwxyz ",
        min_length: int = 8,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: str = "en",
        name: str | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name)
        self.prompts = localized(PROMPTS, language, self.name)
        if not isinstance(target_chars, str) or not target_chars:
            raise UserError(
                f"env.target_chars: expected a non-empty string of characters, got {target_chars!r}"
            )
        self.target_chars = target_chars
        self.targets = frozenset(target_chars)
        self.min_length = int_arg("min_length", min_length, minimum=1)
        lorem = importlib.import_module(f"faker.providers.lorem.{self.prompts['faker_locale']}").Provider
        self.topics: list[str] = sorted(set(lorem.word_list))
        self.rubric = Rubric([RewardFunc("target_char_fraction", self._fraction, 1.0)])

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        # two topic words make prompts (nearly) unique, so rows are distinguishable by their prompt
        topic = " ".join(rng.sample(self.topics, 2))
        chars = repr(self.target_chars)
        return Row(
            id=index,
            prompt=[{"role": "user", "content": self.prompts["user"].format(topic=topic, chars=chars)}],
            info={"target_chars": self.target_chars, "min_length": self.min_length, "topic": topic},
            language=self.language,
        )

    def reference_completion(self, row: Row) -> Messages:
        allowed = [c for c in row.info["topic"] if c in self.targets] or [self.target_chars[0]]
        text = "".join(allowed)
        while len(text) < self.min_length:
            text += text
        return [{"role": "assistant", "content": text}]

    def _fraction(self, completion: Any = None, info: dict[str, Any] | None = None, **_: Any) -> float:
        turns = assistant_turns(completion) if isinstance(completion, list) else []
        text = turns[-1] if turns else ""
        info = info or {}
        targets = frozenset(info.get("target_chars") or self.target_chars)
        return target_fraction(text, targets, int(info.get("min_length") or self.min_length))
