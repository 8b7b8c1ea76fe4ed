"""Language consistency: the share of a text's words that are in the target language, the score
behind DeepSeek-R1's language-consistency reward (the reward function: grpo/rewards/consistency.py).

Counting:
- Words by script (grpo.languages.script): each Han or kana character is one word; Hangul,
  Arabic, Devanagari, Cyrillic and Latin words are runs of letters. Digits, punctuation and
  symbols are no words.
- Left out before counting: code (``` fences and `inline` spans), XML-like tags (<answer>, the
  tag only: its content counts), LaTeX commands (\\boxed), URLs, and the caller's `ignore`
  strings (the task's names, an environment's format tokens). The content of the caller's `tags`
  goes too: blocks that hold the task's data rather than prose (sorted names, a reversed text,
  which is no language at all).
- A word of a script the language is not written in counts against it (English in a Chinese
  answer, kana in a Chinese answer, Cyrillic in a German one).
- Latin-script languages (en de es fr sv) share their script, so Latin words are attributed by an
  offline language identifier (grpo.languages.identify: function words, else fastText lid.176),
  sentence by sentence: sentences shorter than MIN_ID_WORDS Latin words join the next one, and the
  model reads at most MAX_ID_WORDS words of each (enough to tell a sentence's language, and it
  bounds the cost).
- Chinese: Han characters in a sentence that also has kana are Japanese, so they count against.
- Names carry little language signal: the caller's `names` are left out as written and word by
  word (a first or family name alone). For the wrong-language monitor (`consistency_counts` with
  min_confidence=MIN_ID_CONFIDENCE) a Latin sentence that no function word settles and the
  identifier is unsure of (a list of other names, a few keywords) is not counted either way.
The reward is target words / counted words, in [0, 1]. A text with no countable word (empty,
whitespace, only tags, names or numbers, not a string) scores 0.0: silence is no evidence of
answering in the language, and a constant for a whole group changes no GRPO advantage. So does a
text that is no plausible answer in any language (`plausible_text`): bytes that are not text
(control characters, U+FFFD), a soup of three or more writing systems (what a random model
writes), one character or one word repeated. Never raises.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Any

from grpo.languages.script import OTHER, WORD_RES, foreign_letter_re, other_words_re, words_re
from grpo.languages.spec import LanguageSpec

log = logging.getLogger(__name__)

# shorter sentences are identified together with the next one (fastText is unreliable on 1-2 words)
MIN_ID_WORDS = 3
# words of a sentence the identifier reads
MAX_ID_WORDS = 8
# the wrong-language monitor's least identifier probability for the most likely language of a
# sentence no function word settles: below it (a list of names, a few keywords) the sentence
# carries no language signal and counts neither way. The reward counts every sentence: a few
# English words such as a format token score low there too (names are left out by the caller)
MIN_ID_CONFIDENCE = 0.8

_MARKUP_RE = re.compile(
    r"```.*?(?:```|\Z)"  # fenced code; an unclosed fence runs to the end
    r"|`[^`\n]*`"  # inline code
    r"|</?[A-Za-z_][\w:.\-]*(?:\s[^<>]*)?/?>"  # XML-like tags (not their content)
    r"|\\[A-Za-z]+",  # LaTeX commands
    re.S,
)
_URL_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://\S+")
_SENTENCE_RE = re.compile(r"[.!?;:…\n\u3002\uff01\uff1f\uff1b\uff1a\u0964\u0965\u061f\u06d4]+")
_LATIN_RE = WORD_RES["Latin"]
_KANA_RE = re.compile(f"{WORD_RES['Hiragana'].pattern}|{WORD_RES['Katakana'].pattern}")
_HAN_RE = WORD_RES["Han"]


def language_consistency(
    text: Any,
    spec: LanguageSpec,
    ignore: Iterable[str] = (),
    tags: Iterable[str] = (),
    names: Iterable[str] = (),
) -> float:
    """The share, in [0, 1], of the words of `text` that are in `spec`'s language. `ignore`:
    strings left out before counting (names, format tokens); `tags`: tag names whose complete
    <tag>...</tag> blocks are left out with their content; `names`: the task's names, whose words
    (a first or family name alone) are left out as whole words too. 0.0 when nothing is countable."""
    try:
        target, total = consistency_counts(text, spec, ignore, tags, names)
    except Exception:  # the reward contract: garbage in, a number out
        log.debug("language_consistency failed", exc_info=True)
        return 0.0
    if total <= 0:
        return 0.0
    return min(1.0, max(0.0, target / total))


def consistency_counts(
    text: Any,
    spec: LanguageSpec,
    ignore: Iterable[str] = (),
    tags: Iterable[str] = (),
    names: Iterable[str] = (),
    min_confidence: float = 0.0,
) -> tuple[int, int]:
    """(words in `spec`'s language, words counted) of `text`, as `language_consistency` counts
    them. `min_confidence` (e.g. MIN_ID_CONFIDENCE): a Latin sentence that no function word
    settles and the identifier gives less is not counted (no language signal). (0, 0) when
    nothing is counted. May raise on garbage."""
    if not isinstance(text, str) or not text or spec.is_mix:
        return 0, 0
    text = strip_uncounted(text, ignore, tags)
    if not plausible_text(text):
        return 0, 0  # garbage: no evidence of any language, for or against
    if spec.needs_language_id:
        name_words = {
            w.casefold() for name in names if isinstance(name, str) for w in _LATIN_RE.findall(name)
        }
        return _latin_counts(text, spec, name_words, min_confidence)
    return _script_counts(text, spec.scripts)


# bytes that are no text: C0 controls but tab / newline / carriage return, DEL, and U+FFFD (what a
# byte-level tokenizer decodes from bytes that are not UTF-8)
_NOT_TEXT_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
# the writing systems a reader tells apart: Japanese writes Han and kana together, the others one
# script each; letters of every other script (Greek, Hebrew, Armenian, Thai, ...) by their
# Unicode script name
_SYSTEMS = {
    "Latin": ("Latin",),
    "Cyrillic": ("Cyrillic",),
    "Arabic": ("Arabic",),
    "Devanagari": ("Devanagari",),
    "Hangul": ("Hangul",),
    "CJK": ("Han", "Hiragana", "Katakana"),
}
_SYSTEM_RES = {
    name: re.compile("|".join(WORD_RES[s].pattern for s in scripts)) for name, scripts in _SYSTEMS.items()
}
_OTHER_LETTER_RE = WORD_RES[OTHER]
# a writing system counts in a soup from this many letters (a lone Greek pi in a formula does not)
SOUP_LETTERS = 3
# systems that make a soup
SOUP_SYSTEMS = 3
_WORD_RE = re.compile(r"\w+")


def plausible_text(text: str) -> bool:
    """Whether `text` could be an answer in some language: False for bytes that are no text
    (control characters, U+FFFD), a soup of SOUP_SYSTEMS or more writing systems with
    SOUP_LETTERS letters each, one character making half of 8+ letters, or one word 60% of 5+
    words. Real answers mix two systems at most (Japanese with an English name, Hindi with a
    formula's x); a random model's bytes mix five or more."""
    if _NOT_TEXT_RE.search(text):
        return False
    letters: dict[str, int] = {}
    for name, pattern in _SYSTEM_RES.items():
        count = sum(len(w) for w in pattern.findall(text))
        if count:
            letters[name] = count
    for word in _OTHER_LETTER_RE.findall(text):
        for ch in word:
            system = unicodedata.name(ch, "OTHER").split(" ", 1)[0]
            letters[system] = letters.get(system, 0) + 1
    if sum(1 for n in letters.values() if n >= SOUP_LETTERS) >= SOUP_SYSTEMS:
        return False
    chars = [ch.casefold() for ch in text if ch.isalpha()]
    if len(chars) >= 8 and max(Counter(chars).values()) * 2 >= len(chars):
        return False
    words = [w.casefold() for w in _WORD_RE.findall(text)]
    return not (len(words) >= 5 and max(Counter(words).values()) * 5 >= 3 * len(words))


def strip_uncounted(text: str, ignore: Iterable[str] = (), tags: Iterable[str] = ()) -> str:
    """`text` without the `tags` blocks (content included), code, tags, LaTeX commands, URLs and
    the `ignore` strings (each replaced by a space so that words on either side stay apart). Names
    are removed as written and lower-cased."""
    for tag in tags:
        text = _drop_blocks(text, tag)
    if "`" in text or "<" in text or "\\" in text:
        text = _MARKUP_RE.sub(" ", text)
    if "://" in text:
        text = _URL_RE.sub(" ", text)
    phrases = sorted({s for s in ignore if isinstance(s, str) and s.strip()}, key=len, reverse=True)
    for phrase in phrases:
        if phrase in text:
            text = text.replace(phrase, " ")
        lower = phrase.lower()
        if lower != phrase and lower in text:
            text = text.replace(lower, " ")
    return text


def _drop_blocks(text: str, tag: str) -> str:
    """`text` with every complete <tag>...</tag> block made a space. str.find, linear time (a lazy
    regex is quadratic on many unclosed open tags); an unclosed block stays."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    if open_tag not in text:
        return text
    parts: list[str] = []
    pos = 0
    while (start := text.find(open_tag, pos)) >= 0:
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            break
        parts += [text[pos:start], " "]
        pos = end + len(close_tag)
    parts.append(text[pos:])
    return "".join(parts)


def _other_words(text: str, scripts: tuple[str, ...]) -> int:
    """How many words of `text` are in none of `scripts`. Fast paths: ASCII text holds only Latin
    words, and one character-class scan tells whether any third script is present at all."""
    if text.isascii():
        return 0 if "Latin" in scripts else len(_LATIN_RE.findall(text))
    count = 0
    if "Latin" not in scripts:
        count += len(_LATIN_RE.findall(text))
        scripts = (*scripts, "Latin")
    if foreign_letter_re(scripts).search(text):
        count += len(other_words_re(scripts).findall(text))
    return count


def _script_counts(text: str, scripts: tuple[str, ...]) -> tuple[int, int]:
    """(target words, counted words) for a language told by its script alone."""
    if text.isascii():  # no letter of a non-Latin script
        return 0, len(_LATIN_RE.findall(text))
    target = len(words_re(scripts).findall(text))
    total = target + _other_words(text, scripts)
    if "Han" in scripts and "Hiragana" not in scripts and _KANA_RE.search(text):
        # Chinese target: Han characters of a sentence written with kana are Japanese
        target -= sum(len(_HAN_RE.findall(s)) for s in _SENTENCE_RE.split(text) if _KANA_RE.search(s))
    return target, total


def _latin_counts(
    text: str, spec: LanguageSpec, name_words: set[str], min_confidence: float
) -> tuple[int, int]:
    """(target words, counted words) for a Latin-script language: Latin words count when their
    sentence is identified as the language. `name_words` (case-folded) are left out; a sentence
    without language signal (`words_in_language` None under `min_confidence`) is not counted."""
    from grpo.languages.identify import words_in_language

    total = _other_words(text, ("Latin",))
    target = 0
    buffer: list[str] = []
    last: bool | None = None
    for sentence in _SENTENCE_RE.split(text):
        words = [w for w in _LATIN_RE.findall(sentence) if w.casefold() not in name_words]
        if not words:
            continue
        buffer.extend(words)
        if len(buffer) >= MIN_ID_WORDS:
            verdict = words_in_language(buffer, spec.code, MAX_ID_WORDS, min_confidence)
            if verdict is not None:
                last = verdict
                total += len(buffer)
                target += len(buffer) if verdict else 0
            buffer = []
    if buffer:  # a short tail goes with the sentence before it (or is identified alone)
        verdict = (
            last if last is not None else words_in_language(buffer, spec.code, MAX_ID_WORDS, min_confidence)
        )
        if verdict is not None:
            total += len(buffer)
            target += len(buffer) if verdict else 0
    return target, total
