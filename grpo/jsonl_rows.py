"""User data in JSONL (preference pairs, SFT conversations): every row checked before anything trains.

    items = read_rows(path, "sft.data_path", parse, what="conversations", languages=codes)

`path` is a .jsonl file or a directory of them (its *.jsonl files, sorted). Every non-blank line
is parsed as JSON and handed to `parse(obj, where)`, which returns the item or None and the row's
problems (`where` names the line, e.g. "data.jsonl line 12", for the item to keep). When any line
is bad, ONE UserError line names the config field, the file, how many rows are bad, and the first
MAX_REPORTED of them as `line N: problem, problem` (`name.jsonl: line N: ...` when the path is a
directory), with the known language codes when a row's language is unknown. Light: no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from grpo.errors import UserError

T = TypeVar("T")
# bad rows listed in the error line; the rest are counted
MAX_REPORTED = 10
# the problem text after which the error line lists the known language codes
UNKNOWN_LANGUAGE = "unknown language"


def jsonl_files(path: str | Path, field: str) -> list[Path]:
    """The file itself, or the *.jsonl files of a directory (sorted); `field` names the setting."""
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix == ".jsonl")
        if not files:
            raise UserError(f"{field}={path}: the directory has no *.jsonl files")
        return files
    if not p.is_file():
        raise UserError(f"{field}={path}: no such file or directory")
    return [p]


def read_rows(
    path: str | Path,
    field: str,
    parse: Callable[[Any, str], tuple[T | None, list[str]]],
    what: str,
    languages: Sequence[str] = (),
) -> list[T]:
    """Every row's item, in file and line order; one UserError listing all bad rows otherwise
    (see the module docstring). `what` names the rows in the error of a file without any."""
    files = jsonl_files(path, field)
    items: list[T] = []
    bad: list[str] = []  # "line N: problem, problem" (prefixed by the file name when several)
    for file in files:
        prefix = f"{file.name}: " if len(files) > 1 else ""
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as ex:
            raise UserError(f"{field} {file}: cannot read it ({ex})") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as ex:
                bad.append(f"{prefix}line {number}: bad JSON ({ex.msg} at column {ex.colno})")
                continue
            item, problems = parse(row, f"{file.name} line {number}")
            if problems:
                bad.append(f"{prefix}line {number}: {', '.join(problems)}")
            elif item is not None:
                items.append(item)
    where = files[0] if len(files) == 1 else Path(path)
    if bad:
        shown = "; ".join(bad[:MAX_REPORTED])
        more = f"; ... and {len(bad) - MAX_REPORTED} more" if len(bad) > MAX_REPORTED else ""
        hint = f" (languages: {', '.join(languages)})" if languages and UNKNOWN_LANGUAGE in shown else ""
        raise UserError(f"{field} {where}: {len(bad)} bad row(s), nothing was trained: {shown}{more}{hint}")
    if not items:
        raise UserError(f"{field} {where}: no {what} (one JSON object per line)")
    return items
