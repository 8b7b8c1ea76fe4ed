"""reverse_text: reverse a sentence character by character (single turn).

The model may think inside <think>...</think>, then writes the reversed text inside
<answer>...</answer>. Rewards: `reverse_text_similarity` (difflib ratio of the parsed answer to the
reversed text, weight 1.0) and `format_reward` (the XMLParser layout score, weight 0.2). Texts are
sentences of faker's lorem words drawn with the env's own random stream, so rows depend only on
the seed.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

from grpo.envs.base import (
    Environment,
    Messages,
    RewardFunc,
    Row,
    Rubric,
    XMLParser,
    assistant_turns,
    int_arg,
    localized,
    similarity_ratio,
)

# Every prompt text, per language, and the faker locale whose lorem words make the texts.
PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "system": (
            "Reverse the text you are given, character by character: the last character comes first. "
            "You may think step by step inside <think>...</think> first. Then write only the reversed "
            "text inside <answer>...</answer>."
        ),
        "user": "Reverse this text:\n{text}",
        "faker_locale": "en_US",
    },
}


def reverse(text: str) -> str:
    """The expected answer: code points in reverse order."""
    return text[::-1]


class ReverseTextEnv(Environment):
    name = "reverse_text"

    def __init__(
        self,
        min_words: int = 4,
        max_words: int = 12,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: str = "en",
        name: str | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name)
        self.prompts = localized(PROMPTS, language, self.name)
        self.min_words = int_arg("min_words", min_words, minimum=1)
        self.max_words = int_arg("max_words", max_words, minimum=self.min_words)
        lorem = importlib.import_module(f"faker.providers.lorem.{self.prompts['faker_locale']}").Provider
        self.words: list[str] = list(lorem.word_list)
        self.parser = XMLParser(answer_tag="answer", optional_tags=["think"])
        self.rubric = Rubric(
            [
                RewardFunc("reverse_text_similarity", self._similarity, 1.0),
                RewardFunc("format_reward", self._format, 0.2),
            ]
        )

    def make_text(self, rng: random.Random) -> str:
        """One sentence: capitalised first word, single spaces, a final period."""
        words = [rng.choice(self.words) for _ in range(rng.randint(self.min_words, self.max_words))]
        return " ".join(words)[:1].upper() + " ".join(words)[1:] + "."

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        text = self.make_text(rng)
        return Row(
            id=index,
            prompt=[
                {"role": "system", "content": self.prompts["system"]},
                {"role": "user", "content": self.prompts["user"].format(text=text)},
            ],
            info={"text": text, "answer": reverse(text)},
            language=self.language,
        )

    def reference_completion(self, row: Row) -> Messages:
        return [{"role": "assistant", "content": f"<answer>{row.info['answer']}</answer>"}]

    # ---- rewards -----------------------------------------------------------------------------
    @staticmethod
    def _final_answer(completion: Any) -> str:
        turns = assistant_turns(completion) if isinstance(completion, list) else []
        return turns[-1] if turns else ""

    def _similarity(self, completion: Any = None, info: dict[str, Any] | None = None, **_: Any) -> float:
        answer = self.parser.parse_answer(self._final_answer(completion))
        if answer is None:
            return 0.0
        return similarity_ratio(answer, (info or {})["answer"])

    def _format(self, completion: Any = None, **_: Any) -> float:
        return self.parser.format_score(self._final_answer(completion))
