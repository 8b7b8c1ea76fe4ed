"""reverse_text: reverse a sentence character by character (single turn), in every language.

The model may think inside <think>...</think>, then writes the reversed text inside
<answer>...</answer>. Rewards: `reverse_text_similarity` (difflib ratio of the parsed answer to the
reversed text, weight 1.0) and `format_reward` (the XMLParser layout score, weight 0.2).

Texts and prompts follow the row's language (the `prompts.<code>` blocks of
conf/env/reverse_text.yaml, keys: PROMPTS): sentences of faker's lorem words for the block's
`faker_locale`, or of its own `words` list (languages faker has no lorem words for), joined by
`word_separator` (no space for zh and ja) and ended by `sentence_end` (。 for zh and ja, । for hi). Words are drawn with the env's own
random stream, so rows depend only on the seed; English rows are those of the first version.

A "character" is a user-perceived character (an extended grapheme cluster, through ICU): a
Devanagari syllable such as हि or क्ष stays whole when reversed instead of leaving its vowel sign
or virama stranded. For text without combining sequences (English, and the lorem texts of most
languages) that is plain code-point reversal.
"""

from __future__ import annotations

import importlib
import random
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from grpo.envs.base import Environment, Messages, Row, int_arg
from grpo.envs.parsers import XMLParser, assistant_turns
from grpo.envs.prompts import PromptSpec, Text
from grpo.envs.rubric import RewardFunc, Rubric
from grpo.envs.similarity import similarity_ratio
from grpo.errors import UserError

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec

# a language's prompt block: the instructions, the task, and where its texts come from (a faker
# lorem locale, or a `words` list, joined by word_separator and ended by sentence_end)
PROMPTS = PromptSpec(
    {
        "system": Text(keep=("<answer>", "</answer>", "<think>", "</think>")),
        "user": Text(("text",), ("{text}",)),
    },
    settings=("faker_locale", "words", "word_separator", "sentence_end"),
)


def reverse(text: str) -> str:
    """The expected answer: the text's user-perceived characters in reverse order."""
    if text.isascii():  # every ASCII character is a grapheme of its own
        return text[::-1]
    import icu

    breaks = icu.BreakIterator.createCharacterInstance(icu.Locale.getRoot())
    breaks.setText(text)
    bounds = [0, *breaks]
    return "".join(text[start:end] for start, end in reversed(list(zip(bounds, bounds[1:], strict=False))))


@lru_cache(maxsize=64)
def lorem_words(faker_locale: str, where: str) -> tuple[str, ...]:
    """faker's lorem word list of a locale (`where`: the config key that names it)."""
    try:
        provider = importlib.import_module(f"faker.providers.lorem.{faker_locale}").Provider
    except ModuleNotFoundError:
        raise UserError(
            f"{where}: faker has no lorem words for {faker_locale!r}; give a `words` list instead"
        ) from None
    return tuple(provider.word_list)


class TextSource:
    """The sentences of one language: its words, separator and sentence end."""

    def __init__(self, block: dict[str, Any], where: str):
        words = block.get("words")
        if words:
            if isinstance(words, str) or not all(isinstance(w, str) and w for w in words):
                raise UserError(f"{where}.words: expected a list of words, got {words!r}")
            self.words: list[str] = list(words)
        elif block.get("faker_locale"):
            self.words = list(lorem_words(str(block["faker_locale"]), f"{where}.faker_locale"))
        else:
            raise UserError(f"{where}: needs a text source: faker_locale (a faker lorem locale) or words")
        self.separator = str(block.get("word_separator", " "))
        self.end = str(block.get("sentence_end", "."))

    def sentence(self, rng: random.Random, count: int) -> str:
        """`count` random words: the first capitalised (where the script has case), then the end."""
        text = self.separator.join(rng.choice(self.words) for _ in range(count))
        return text[:1].upper() + text[1:] + self.end


class ReverseTextEnv(Environment):
    name = "reverse_text"
    # the reversed text is data, not prose (see Environment.answer_tags)
    answer_tags = ("answer",)
    prompt_spec = PROMPTS

    def __init__(
        self,
        min_words: int = 4,
        max_words: int = 12,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: LanguageSpec | str = "en",
        name: str | None = None,
        prompts: dict[str, Any] | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name, prompts)
        self.min_words = int_arg("min_words", min_words, minimum=1)
        self.max_words = int_arg("max_words", max_words, minimum=self.min_words)
        # every language rows can be in, checked now (language=mix: each member)
        self.texts = {code: TextSource(block, f"env.prompts.{code}") for code, block in self.prompts.items()}
        self.parser = XMLParser(answer_tag="answer", optional_tags=["think"])
        self.rubric = Rubric(
            [
                RewardFunc("reverse_text_similarity", self._similarity, 1.0),
                RewardFunc("format_reward", self._format, 0.2),
            ]
        )

    def make_text(self, rng: random.Random, language: LanguageSpec | None = None) -> str:
        """One sentence of the language (the env's own by default)."""
        spec = language or self.spec
        return self.texts[spec.code].sentence(rng, rng.randint(self.min_words, self.max_words))

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        spec = self.row_spec(split, index)
        text = self.make_text(rng, spec)
        return Row(
            id=index,
            prompt=[
                {"role": "system", "content": self.prompt(spec, "system")},
                {"role": "user", "content": self.prompt(spec, "user", text=text)},
            ],
            info={"text": text, "answer": reverse(text)},
            language=spec.code,
        )

    def reference_completion(self, row: Row) -> Messages:
        return [{"role": "assistant", "content": f"<answer>{row.info['answer']}</answer>"}]

    # ---- rewards -----------------------------------------------------------------------------
    def has_answer(self, row: Row, completion: Messages) -> bool:
        """The last assistant turn has a complete <answer> block (what the similarity reads)."""
        return self.parser.parse_answer(self._final_answer(completion)) is not None

    @staticmethod
    def _final_answer(completion: Any) -> str:
        turns = assistant_turns(completion)
        return turns[-1] if turns else ""

    def _similarity(self, completion: Any = None, info: dict[str, Any] | None = None, **_: Any) -> float:
        answer = self.parser.parse_answer(self._final_answer(completion))
        if answer is None:
            return 0.0
        return similarity_ratio(answer, (info or {})["answer"])

    def _format(self, completion: Any = None, **_: Any) -> float:
        return self.parser.format_score(self._final_answer(completion))
