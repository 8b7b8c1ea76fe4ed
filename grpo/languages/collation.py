"""Alphabetical order per language: plain code-point order for English (sort_key: codepoint), ICU
collation for every other language.

ICU (through PyICU) implements CLDR's collation rules: zh@collation=pinyin orders Han characters
by their (most common) pinyin reading, sv puts å ä ö after z, es puts ñ after n, de (DIN 5007-1)
sorts ä ö ü as a o u with the plain letter first on a tie, ru sorts ё with е (е first on a tie),
ar at primary strength makes أ and إ equal to ا, fr-FR compares accents left to right (only
fr-CA uses backwards accents). Japanese kanji have no reading ICU could know, so ja sorts the
name's kana reading (`Name.sort_text`) with ICU's ja (gojūon) order.

Sort keys are ICU sort-key bytes: comparable, hashable and picklable (collators themselves are
not, so they live in a per-process cache). Two names "collate equal" when their keys are equal at
the language's strength; a row never holds two such names, so its expected order is unique.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from grpo.languages.spec import STRENGTHS

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec


class Sortable(Protocol):
    text: str
    sort_text: str


@lru_cache(maxsize=64)
def collator(icu_locale: str, strength: str = "tertiary") -> Any:
    """A cached ICU collator for `icu_locale` (e.g. "sv_SE", "zh@collation=pinyin")."""
    import icu

    if strength not in STRENGTHS:
        raise ValueError(f"collation strength {strength!r}: use one of {', '.join(STRENGTHS)}")
    coll = icu.Collator.createInstance(icu.Locale(icu_locale))
    coll.setStrength(getattr(icu.Collator, strength.upper()))
    return coll


def _sort_string(name: str | Sortable) -> str:
    return name if isinstance(name, str) else name.sort_text


def sort_key(spec: LanguageSpec) -> Callable[[str], Any]:
    """The key function of the language's order, applied to a name's sort text (its reading for
    ja, the name itself otherwise). Distinct strings that collate equal get distinct keys (the
    string breaks the tie), so sorting is deterministic; rows avoid such pairs anyway."""
    if spec.sort_key == "codepoint":
        return _identity
    coll = collator(spec.icu_locale or "root", spec.collation_strength)
    get = coll.getSortKey

    def key(text: str) -> tuple[bytes, str]:
        return get(text), text

    return key


def _identity(text: str) -> str:
    return text


def collation_key(text: str, spec: LanguageSpec) -> Any:
    """The key that decides equality: two sort texts collate equal iff their keys are equal."""
    if spec.sort_key == "codepoint":
        return text
    return collator(spec.icu_locale or "root", spec.collation_strength).getSortKey(text)


def sort_names(names: Iterable[Any], spec: LanguageSpec) -> list[Any]:
    """`names` (strings or Name objects) in the language's alphabetical order. Name objects sort
    by their `sort_text` (the kana reading for ja)."""
    key = sort_key(spec)
    items = list(names)
    return sorted(items, key=lambda n: key(_sort_string(n)))


def collate_equal(a: str | Sortable, b: str | Sortable, spec: LanguageSpec) -> bool:
    """Whether two names are equal in the language's collation (e.g. ar "أحمد" and "احمد" at
    primary strength, ja 斎藤 and 斉藤, both read サイトウ)."""
    return collation_key(_sort_string(a), spec) == collation_key(_sort_string(b), spec)
