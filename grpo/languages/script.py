"""Unicode scripts of characters and words, by code-point ranges.

Words are maximal runs of one script's letters, except Han and kana, where every character is a
word (Chinese and Japanese are written without spaces). The character classes of the scripts are
disjoint, so counting the matches of each script's pattern separately gives the same total as one
tokenizer over all of them; the consistency reward relies on that to count with a few C-level
`findall` passes instead of a Python loop per word. Digits, punctuation, symbols and marks that do
not follow a letter are no script's words.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Letter ranges per script (ISO 15924 names). Combining marks of a script ride on its letters:
# a word starts with a letter and may continue with marks.
_LETTERS: dict[str, str] = {
    "Latin": "A-Za-z\u00aa\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\u2c60-\u2c7f\ua720-\ua7ff"
    "\uff21-\uff3a\uff41-\uff5a",
    "Cyrillic": "\u0400-\u0482\u048a-\u052f\u1c80-\u1c8f\ua640-\ua66e\ua680-\ua69d",
    "Arabic": "\u0620-\u064a\u066e\u066f\u0671-\u06d3\u06d5\u06ee\u06ef\u06fa-\u06fc\u06ff\u0750-\u077f"
    "\u08a0-\u08c9\ufb50-\ufdfb\ufe70-\ufefc",
    "Devanagari": "\u0904-\u0939\u093d\u0950\u0958-\u0961\u0972-\u097f\ua8f2-\ua8f7\ua8fb\ua8fd-\ua8fe",
    "Hangul": "\u1100-\u11ff\u3131-\u318e\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7fb\uffa0-\uffdc",
    "Han": "\u2e80-\u2fd5\u3005\u3007\u3021-\u3029\u3038-\u303b\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0003134f",
    "Hiragana": "\u3041-\u3096\u309d-\u309f",
    # includes the prolonged sound mark and iteration marks; the middle dot (U+30FB) is punctuation
    "Katakana": "\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9d",
}
_MARKS: dict[str, str] = {
    "Latin": "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\ufe20-\ufe2f",
    "Cyrillic": "\u0300-\u036f\u0483-\u0489\u2de0-\u2dff\ua66f-\ua67f\ua69e\ua69f",
    "Arabic": "\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e8\u06ea-\u06ed\u08ca-\u08ff",
    "Devanagari": "\u0900-\u0903\u093a-\u093c\u093e-\u094f\u0951-\u0957\u0962\u0963\u0971\ua8e0-\ua8f1\ua8ff",
    "Hangul": "",
    "Han": "",
    "Hiragana": "\u3099\u309a",
    "Katakana": "\u3099\u309a",
}
SCRIPTS: tuple[str, ...] = tuple(_LETTERS)
# scripts written without spaces: one character is one word
CHARACTER_WORD_SCRIPTS = frozenset({"Han", "Hiragana", "Katakana"})
OTHER = "Other"

# Word characters that are not letters: numbers of category No (superscripts, fractions, circled
# numbers, ...). Python's \w matches them, so "other letters" excludes them explicitly.
_NON_LETTER_WORD_CHARS = (
    "\u00b2\u00b3\u00b9\u00bc-\u00be\u09f4-\u09f9\u0bf0-\u0bf2\u0f2a-\u0f33\u1369-\u137c\u2070-\u209f"
    "\u2150-\u218f\u2460-\u24ff\u2776-\u2793\u2cfd\u3192-\u3195\u3220-\u3229\u3248-\u324f\u3251-\u325f"
    "\u3280-\u3289\u32b1-\u32bf"
)
_ALL_LETTERS = "".join(_LETTERS.values())


def _word_pattern(script: str) -> str:
    letters, marks = _LETTERS[script], _MARKS[script]
    if script in CHARACTER_WORD_SCRIPTS:
        return f"[{letters}][{marks}]*" if marks else f"[{letters}]"
    if script == "Latin":
        # keep elisions and contractions (l'homme, don't) one word
        return f"[{letters}][{letters}{marks}]*(?:['\u2019][{letters}][{letters}{marks}]*)*"
    return f"[{letters}][{letters}{marks}]*"


# letters of any other script (Greek, Hebrew, Thai, ...): runs of word characters outside every
# range above that are neither digits, underscore nor number signs
_OTHER_PATTERN = f"[^\\W\\d_{_ALL_LETTERS}{_NON_LETTER_WORD_CHARS}]+"
WORD_RES: dict[str, re.Pattern[str]] = {s: re.compile(_word_pattern(s)) for s in SCRIPTS}
WORD_RES[OTHER] = re.compile(_OTHER_PATTERN)
_CHAR_RES: dict[str, re.Pattern[str]] = {s: re.compile(f"[{_LETTERS[s]}]") for s in SCRIPTS}


def check_scripts(scripts: list[str] | tuple[str, ...], field: str = "language.scripts") -> tuple[str, ...]:
    """`scripts` as a tuple, or ValueError naming the unknown ones (the spec loader reports it)."""
    unknown = [s for s in scripts if s not in _LETTERS]
    if unknown or not scripts:
        raise ValueError(f"{field}: unknown script(s) {unknown or scripts}; known: {', '.join(SCRIPTS)}")
    return tuple(scripts)


def char_script(ch: str) -> str | None:
    """The script of a letter (one of SCRIPTS or "Other"), or None for anything that is not a
    letter starting a word: digits, punctuation, spaces, symbols, combining marks."""
    for script, pattern in _CHAR_RES.items():
        if pattern.match(ch):
            return script
    return OTHER if WORD_RES[OTHER].match(ch) else None


@lru_cache(maxsize=64)
def words_re(scripts: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern matching the words of any of `scripts` (CJK characters singly)."""
    return re.compile("|".join(WORD_RES[s].pattern for s in scripts))


@lru_cache(maxsize=64)
def other_words_re(scripts: tuple[str, ...]) -> re.Pattern[str]:
    """The words of every script NOT in `scripts`, including letters of unlisted scripts."""
    rest = [s for s in (*SCRIPTS, OTHER) if s not in scripts]
    return re.compile("|".join(WORD_RES[s].pattern for s in rest))


@lru_cache(maxsize=64)
def foreign_letter_re(scripts: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern whose `search` finds any letter NOT of `scripts` (one character class: a fast
    scan). When it finds nothing, counting words of other scripts can be skipped."""
    letters = "".join(_LETTERS[s] for s in scripts)
    return re.compile(f"[^\\W\\d_{letters}{_NON_LETTER_WORD_CHARS}]")


def words(text: str, script: str) -> list[str]:
    """The words of one script in `text`, in order."""
    return WORD_RES[script].findall(text)


def word_scripts(text: str) -> dict[str, int]:
    """How many words of each script `text` has (scripts with none are left out)."""
    counts = {}
    for script, pattern in WORD_RES.items():
        n = len(pattern.findall(text))
        if n:
            counts[script] = n
    return counts


def is_written_in(text: str, scripts: tuple[str, ...], allowed: str = "") -> bool:
    """True when every character of `text` is a letter or mark of `scripts` or one of `allowed`,
    and there is at least one letter. Used to keep only native-script names."""
    if not text:
        return False
    letters = "".join(_LETTERS[s] for s in scripts)
    marks = "".join(_MARKS[s] for s in scripts)
    pattern = _written_in_re(letters, marks, allowed)
    return pattern.fullmatch(text) is not None


@lru_cache(maxsize=64)
def _written_in_re(letters: str, marks: str, allowed: str) -> re.Pattern[str]:
    extra = re.escape(allowed) if allowed else ""
    return re.compile(f"(?=.*[{letters}])[{letters}{marks}{extra}]+", re.S)
