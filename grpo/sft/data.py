"""Demonstrations for the sft stage: what the model should answer, turn by turn.

Two sources, chosen by sft.data_path:
- null: the run's environment. Its first sft.num_examples train rows (or, with
  sft.num_examples_per_language, the first N rows of each language), each with the env's reference
  episode (`reference_completion`: the ground-truth assistant turns with the environment's own
  turns between them). Under language=mix every row is in its own language. sft.demonstrator makes
  another configuration of the env the demonstrator (e.g. alphabet_sort in code-point order): its
  reference episodes are imitated, while GRPO and the evaluation score with the run's env.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.envs.base import Environment, Messages, Row
from grpo.errors import UserError
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

PER_LANGUAGE = "sft.num_examples_per_language"
DEMONSTRATOR = "sft.demonstrator"


def language_quota(value: Any, languages: Sequence[str]) -> dict[str, int] | None:
    """sft.num_examples_per_language as {code: N} over `languages` (the demonstrations' languages),
    None when unset. An int gives every language N; a mapping gives the listed ones theirs and the
    others none. UserError on anything else (a code not among `languages`, a negative count)."""
    if value is None:
        return None

    def count(code: str, n: Any) -> int:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UserError(f"{PER_LANGUAGE}{'.' + code if code else ''}={n!r}: expected a count >= 0")
        return n

    if isinstance(value, Mapping):
        unknown = [str(code) for code in value if code not in languages]
        if unknown:
            raise UserError(
                f"{PER_LANGUAGE}: {', '.join(unknown)} is not a language of the demonstrations "
                f"({', '.join(languages)})"
            )
        quota = {code: count(code, value.get(code, 0)) for code in languages}
    else:
        quota = dict.fromkeys(languages, count("", value))
    if not any(quota.values()):
        raise UserError(f"{PER_LANGUAGE}={value!r}: no demonstration in any language")
    return quota


def env_demonstrations(
    env: Environment, n: int, quota: Mapping[str, int] | None = None
) -> list[Demonstration]:
    """The reference episodes of the env's first `n` train rows; with `quota` ({code: N}), of the
    first N train rows of each language instead (scarce demonstrations per language)."""
    if quota is None:
        rows = env.rows("train", n)
        if len(rows) < n:
            print(
                f"[sft] note: sft.num_examples={n} but {env.name}'s train split has {len(rows)} rows "
                "(env.num_train_examples); using all of them",
                file=sys.stderr,
            )
    else:
        rows = _rows_per_language(env, quota)
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


def _rows_per_language(env: Environment, quota: Mapping[str, int]) -> list[Row]:
    """The first quota[code] train rows of each language, in row order; one note line when the
    split holds fewer rows of a language, one for the languages that get none."""
    # a prefix of the split is enough (rows(split, n) is a prefix of rows(split)): grown until every
    # quota is met, so a large split is not built whole for a few rows of each language
    n = 2 * sum(quota.values())
    while True:
        prefix = env.rows("train", n)
        left, rows = dict(quota), []
        for row in prefix:
            if left.get(row.language, 0) > 0:
                rows.append(row)
                left[row.language] -= 1
        if not any(left.values()) or len(prefix) < n:
            break
        n *= 2
    short = {code: quota[code] - n for code, n in left.items() if n > 0}
    if short:
        got = ", ".join(f"{code} {short[code]} of {quota[code]}" for code in short)
        print(
            f"[sft] note: {env.name}'s train split has too few rows for {PER_LANGUAGE} ({got}); raise "
            "env.num_train_examples for more",
            file=sys.stderr,
        )
    none = [code for code, n in quota.items() if n == 0]
    if none:
        print(f"[sft] note: no demonstrations in {', '.join(none)} ({PER_LANGUAGE})", file=sys.stderr)
    return rows


def demonstration_env(settings: GrpoConfig, env: Environment) -> tuple[Environment, str | None]:
    """The env whose reference episodes are the demonstrations, and what differs from the run's
    env (None: it is the run's env). sft.demonstrator's env arguments are merged over the run's env
    config and its language replaces the run's; GRPO and the evaluation keep the run's env."""
    d = settings.sft.demonstrator
    if not d.env and d.language is None:
        return env, None
    from grpo.envs import build_env

    config = {**dict(settings.env or {}), **dict(d.env)}
    try:
        demonstrator = build_env(config, settings.language if d.language is None else d.language)
    except UserError as ex:
        raise UserError(f"{DEMONSTRATOR}: {ex}") from None
    differs = [f"env.{key}={value}" for key, value in d.env.items()]
    differs += [f"language={d.language}"] if d.language is not None else []
    return demonstrator, ", ".join(differs)


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
    """The stage's demonstrations: sft.data_path's conversations, else the reference episodes of
    `env` (the demonstrator's, see `demonstration_env`), sft.num_examples of them or
    sft.num_examples_per_language per language."""
    f = settings.sft
    if f.data_path:
        return load_conversations(f.data_path)
    codes = [spec.code for spec in env.language_specs()]
    return env_demonstrations(env, f.num_examples, language_quota(f.num_examples_per_language, codes))
