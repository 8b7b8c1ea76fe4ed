"""Demonstrations for the sft stage: what the model should answer, turn by turn.

Two sources, chosen by sft.data_path:
- null: the run's environment. Its first sft.num_examples train rows, each with the env's reference
  episode (`reference_completion`: the ground-truth assistant turns with the environment's own
  turns between them). Under language=mix every row is in its own language.
- a JSONL file, or a directory of *.jsonl files: one conversation per line,
  `{"messages": [{"role": ..., "content": ...}, ...], "language": "sv"}` (language optional, a
  code of conf/language). The messages before the first assistant message are the prompt; every
  assistant message is a turn to learn; the messages between two assistant messages are the
  "environment" turns (no loss, as environment turns in GRPO); messages after the last assistant
  message are left out (there is nothing to learn from them).

Every JSONL row is checked before anything loads; bad rows (bad JSON, not an object, missing or
empty messages, a message that is not {role, content} strings, an unknown role, empty content, no
assistant message, an assistant message first or right after another one, an unknown language)
are reported together in one UserError line with their file and line numbers
(grpo/files.py). Light module: no torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.envs.base import Environment, Messages, Row
from grpo.files import UNKNOWN_LANGUAGE, read_rows

FIELD = "sft.data_path"
ROLES = ("system", "user", "assistant", "tool")
ASSISTANT = "assistant"


@dataclass
class Demonstration:
    """One conversation to imitate."""

    prompt: Messages
    # the assistant turns, with the environment's (user / tool / system) messages between them;
    # it starts and ends with an assistant message
    completion: Messages
    # the language code ("" when a JSONL row does not say)
    language: str
    # where it comes from, for messages: "train row 3", "data.jsonl line 12"
    where: str
    # env demonstrations: the env's row (its env_response reads the row's info); None for JSONL
    row: Row | None = None

    @property
    def answers(self) -> list[str]:
        """The assistant messages, in order: what the model is trained to write."""
        return [m["content"] for m in self.completion if m["role"] == ASSISTANT]


# ---- from the environment -----------------------------------------------------------------------


def env_demonstrations(env: Environment, n: int) -> list[Demonstration]:
    """The reference episodes of the env's first `n` train rows."""
    rows = env.rows("train", n)
    if len(rows) < n:
        print(
            f"[sft] note: sft.num_examples={n} but {env.name}'s train split has {len(rows)} rows "
            "(env.num_train_examples); using all of them",
            file=sys.stderr,
        )
    return [
        Demonstration(
            prompt=list(row.prompt),
            completion=[dict(m) for m in env.reference_completion(row)],
            language=row.language,
            where=f"train row {row.id}",
            row=row,
        )
        for row in rows
    ]


# ---- from JSONL conversations -------------------------------------------------------------------


def _messages_problem(messages: Any) -> str | None:
    """Why `messages` is not a conversation to learn from, or None."""
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list of {role, content} messages"
    for j, m in enumerate(messages):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            return f"'messages'[{j}] must be a {{role, content}} message with string values"
        if m["role"] not in ROLES:
            return f"'messages'[{j}] has role {m['role']!r} (use one of {', '.join(ROLES)})"
        if not m["content"].strip():
            return f"'messages'[{j}] has empty content"
    roles = [m["role"] for m in messages]
    if ASSISTANT not in roles:
        return "no assistant message (nothing to learn)"
    if roles[0] == ASSISTANT:
        return "'messages'[0] is an assistant message: the conversation must start with what it answers"
    for j in range(1, len(roles)):
        if roles[j] == roles[j - 1] == ASSISTANT:
            return f"'messages'[{j}] follows another assistant message: merge the two into one"
    return None


def parse_conversation(
    obj: Any, where: str, languages: Sequence[str]
) -> tuple[Demonstration | None, list[str]]:
    """A checked demonstration, or None and every problem of the row."""
    if not isinstance(obj, dict):
        return None, [f"expected a JSON object, got {type(obj).__name__}"]
    problems: list[str] = []
    if "messages" not in obj:
        problems.append("missing 'messages'")
    elif problem := _messages_problem(obj["messages"]):
        problems.append(problem)
    language = obj.get("language")
    if language is not None and (not isinstance(language, str) or language not in languages):
        problems.append(f"{UNKNOWN_LANGUAGE} {language!r}")
    if problems:
        return None, problems
    messages = [{"role": m["role"], "content": m["content"]} for m in obj["messages"]]
    roles = [m["role"] for m in messages]
    first = roles.index(ASSISTANT)
    last = len(roles) - 1 - roles[::-1].index(ASSISTANT)
    return (
        Demonstration(messages[:first], messages[first : last + 1], language or "", where),
        [],
    )


def load_conversations(path: str | Path, languages: Sequence[str] | None = None) -> list[Demonstration]:
    """Every conversation of a JSONL file (or dir of them); one UserError listing all bad rows."""
    if languages is None:
        from grpo.languages.spec import available_languages

        languages = available_languages()
    known = list(languages)

    def parse(obj: Any, where: str) -> tuple[Demonstration | None, list[str]]:
        return parse_conversation(obj, where, known)

    return read_rows(path, FIELD, parse, what="conversations", languages=known)


def load_demonstrations(settings: GrpoConfig, env: Environment) -> list[Demonstration]:
    """The stage's demonstrations: sft.data_path's conversations, else the env's reference episodes."""
    if settings.sft.data_path:
        return load_conversations(settings.sft.data_path)
    return env_demonstrations(env, settings.sft.num_examples)
