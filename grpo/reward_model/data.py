"""Preference data: JSONL rows {"prompt", "chosen", "rejected", "language"}, validated as a whole.

A row's prompt (or `instruction`, accepted as the prompt) is a string or a list of chat messages
{role, content}; chosen and rejected are strings (one assistant turn) or message lists (a whole,
possibly multi-turn, completion). Extra keys are kept as metadata. Strings are turned into
messages here, so the reward model renders every pair and every GRPO completion the same way
(through the chat template).

Loading checks every line before anything trains and reports ALL bad rows (by file and line
number: bad JSON, missing key, empty text, malformed messages, unknown language) in one UserError
line, capped at grpo.files.MAX_REPORTED. Light module: no torch.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.files import UNKNOWN_LANGUAGE, read_rows, write_jsonl_atomic
from grpo.generation.base import Messages

FIELD = "reward_model.data.path"
ROLES = ("system", "user", "assistant", "tool")
# the row key naming how the rejected completion was made worse (synthetic pairs: swap, drop,
# duplicate, format, language), and the kind of a pair whose row has none (a user's own data)
CORRUPTION_KEY = "corruption"
UNKNOWN_KIND = "unknown"


@dataclass
class PreferencePair:
    """One preference: `chosen` is the better completion of `prompt` than `rejected`."""

    prompt: Messages
    chosen: Messages
    rejected: Messages
    language: str
    # any other keys of the row (synthetic pairs: source, corruption, severity)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The pair's corruption kind (its row's `corruption` key), UNKNOWN_KIND without one."""
        value = self.meta.get(CORRUPTION_KEY)
        return value if isinstance(value, str) and value else UNKNOWN_KIND

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "chosen": self.chosen,
            "rejected": self.rejected,
            "language": self.language,
            **self.meta,
        }


def as_messages(value: Any, role: str) -> Messages:
    """A string as a one-message conversation with `role`; a message list as plain dicts."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]


def _text_problem(value: Any, key: str) -> str | None:
    """Why `value` is not a usable prompt / completion, or None."""
    if isinstance(value, str):
        return f"empty '{key}'" if not value.strip() else None
    if not isinstance(value, list):
        return f"'{key}' must be a string or a list of {{role, content}} messages, got {type(value).__name__}"
    if not value:
        return f"empty '{key}'"
    for j, m in enumerate(value):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            return f"'{key}'[{j}] must be a {{role, content}} message with string values"
        if m["role"] not in ROLES:
            return f"'{key}'[{j}] has role {m['role']!r} (use one of {', '.join(ROLES)})"
    if not any(m["content"].strip() for m in value):
        return f"empty '{key}'"
    return None


def parse_row(row: Any, known_languages: Sequence[str]) -> tuple[PreferencePair | None, list[str]]:
    """A validated pair, or None and every problem of the row."""
    if not isinstance(row, dict):
        return None, [f"expected a JSON object, got {type(row).__name__}"]
    problems: list[str] = []
    prompt_key = "prompt" if "prompt" in row else "instruction" if "instruction" in row else None
    if prompt_key is None:
        problems.append("missing 'prompt' (or 'instruction')")
    elif problem := _text_problem(row[prompt_key], prompt_key):
        problems.append(problem)
    for key in ("chosen", "rejected"):
        if key not in row:
            problems.append(f"missing '{key}'")
        elif problem := _text_problem(row[key], key):
            problems.append(problem)
    language = row.get("language")
    if "language" not in row:
        problems.append("missing 'language'")
    elif not isinstance(language, str) or language not in known_languages:
        problems.append(f"{UNKNOWN_LANGUAGE} {language!r}")
    if not problems and row["chosen"] == row["rejected"]:
        problems.append("'chosen' and 'rejected' are identical")
    if problems:
        return None, problems
    assert prompt_key is not None
    meta = {
        k: v for k, v in row.items() if k not in ("prompt", "instruction", "chosen", "rejected", "language")
    }
    return (
        PreferencePair(
            prompt=as_messages(row[prompt_key], "user"),
            chosen=as_messages(row["chosen"], "assistant"),
            rejected=as_messages(row["rejected"], "assistant"),
            language=str(language),
            meta=meta,
        ),
        [],
    )


def load_pairs(path: str | Path, known_languages: Sequence[str] | None = None) -> list[PreferencePair]:
    """Every pair of a JSONL file (or dir of them); one UserError listing all bad rows otherwise."""
    if known_languages is None:
        from grpo.languages.spec import available_languages

        known_languages = available_languages()
    languages = list(known_languages)
    return read_rows(path, FIELD, lambda row, _where: parse_row(row, languages), "preference rows", languages)


def write_pairs(path: str | Path, pairs: Iterable[PreferencePair]) -> Path:
    """Write pairs as JSONL (UTF-8, one row per line), atomically: a reader never sees half a file."""
    return write_jsonl_atomic(path, (pair.to_json() for pair in pairs))


def split_heldout(
    pairs: Sequence[PreferencePair], fraction: float, seed: int
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out), stratified by language: each language with >= 2 pairs gets at least one
    held-out pair and keeps at least one training pair. Deterministic for a seed."""
    by_language: dict[str, list[PreferencePair]] = {}
    for pair in pairs:
        by_language.setdefault(pair.language, []).append(pair)
    train: list[PreferencePair] = []
    heldout: list[PreferencePair] = []
    for language in sorted(by_language):
        group = list(by_language[language])
        random.Random(f"rm-split:{seed}:{language}").shuffle(group)
        n_out = min(len(group) - 1, max(1, round(fraction * len(group)))) if len(group) >= 2 else 0
        heldout.extend(group[:n_out])
        train.extend(group[n_out:])
    random.Random(f"rm-order:{seed}").shuffle(train)
    return train, heldout


def pair_texts(pairs: Iterable[PreferencePair]) -> list[str]:
    """Every message of the pairs (role and content): what a random backbone's tokenizer learns from."""
    return [
        text
        for pair in pairs
        for messages in (pair.prompt, pair.chosen, pair.rejected)
        for m in messages
        for text in (m["role"], m["content"])
    ]


def languages_of(pairs: Iterable[PreferencePair]) -> list[str]:
    return sorted({p.language for p in pairs})
