"""Prompt texts per language: what an environment declares it needs, and the check of a block.

An environment's texts live in its own YAML, one block per language code:

    prompts:
      en: {system: "...", user: "Reverse this text:\\n{text}"}
      sv: {system: "...", user: "Vänd på den här texten:\\n{text}"}

The class declares what every block holds as a `PromptSpec`: each text key with the {fields} the
environment fills in and the format tokens (tags, markers) it parses and the text must keep
verbatim, plus the non-text settings a block may carry (e.g. where reverse_text's words come
from). `Environment` checks the block of every language its rows can be in when it is built, so a
broken or missing translation is a one-line UserError at start-up. A text with no fields is used
verbatim: its braces are literal (\\boxed{}).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo.errors import UserError


@dataclass(frozen=True)
class Text:
    """One prompt text: the {fields} the environment fills in (a text may leave one out) and the
    substrings it must contain verbatim (format tokens, and fields it may not leave out)."""

    fields: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromptSpec:
    """The keys of an environment's per-language prompt block: every text is required; settings
    are optional non-text values the environment checks itself."""

    texts: Mapping[str, Text] = field(default_factory=dict)
    settings: tuple[str, ...] = ()

    def check(self, block: Any, where: str) -> dict[str, Any]:
        """The block as a dict, or a UserError naming `where`.<key> and what is wrong."""
        if not isinstance(block, Mapping):
            raise UserError(f"{where}: must be a mapping of prompt keys to texts")
        missing = sorted(set(self.texts) - set(block))
        if missing:
            raise UserError(f"{where}: missing {', '.join(missing)}")
        for key, value in block.items():
            if key in self.settings:
                continue
            if key not in self.texts:
                allowed = (
                    ", ".join(sorted([*self.texts, *self.settings])) or "none (its prompt_spec is empty)"
                )
                raise UserError(f"{where}.{key}: unknown key; allowed: {allowed}")
            _check_text(self.texts[key], value, f"{where}.{key}")
        return dict(block)


def _check_text(spec: Text, value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise UserError(f"{where}: must be a text")
    for token in spec.keep:
        if token not in value:
            raise UserError(f"{where}: must keep {token!r} verbatim (a format token the env parses)")
    if not spec.fields:
        return  # used verbatim, never formatted
    try:
        used = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError as ex:
        raise UserError(f"{where}: bad {{field}} syntax ({ex}); write {{{{ and }}}} for braces") from None
    unknown = sorted(used - set(spec.fields))
    if unknown:
        allowed = ", ".join(f"{{{f}}}" for f in spec.fields)
        raise UserError(f"{where}: unknown field(s) {{{', '.join(unknown)}}}; allowed: {allowed}")
