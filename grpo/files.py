"""Files: one atomic write for the whole project, and user JSONL read with every row checked.

`atomic_write(path)` yields a text handle on a temporary file in the same directory; when the
block ends without error the data is flushed and fsynced, the temporary file is renamed over
`path`, and the directory entry is fsynced too. A crash at any point leaves the previous file
(or none), never a mix; an exception inside the block removes the temporary file and leaves the
old file untouched. Two processes writing the same path each use their own temporary file, and
the last rename wins whole.

`replace_dir(partial, out)` does the same for a directory written whole elsewhere (a model, a
saved dataset): its files are fsynced and it is renamed to `out`, an older `out` moved aside first
and removed last, so a dir named `out` is never half-written.

`claim_new_dir(path)` takes a fresh directory atomically (mkdir fails when it exists): two runs
started in the same second, in one process or several, get different run folders.

JSON is written with `to_json`: sets become sorted lists, tuples lists, numpy/torch scalars numbers,
anything else its str(), so ground truth of any shape serialises.

User data in JSONL (preference pairs, SFT conversations) is checked row by row before anything
trains: `read_rows(path, field, parse, what)` reads a .jsonl file or a directory of them (its
*.jsonl files, sorted), hands every non-blank line's JSON to `parse(obj, where)` (which returns
the item or None and the row's problems; `where` names the line, e.g. "data.jsonl line 12"), and
when any line is bad raises ONE UserError naming the config field, the file, how many rows are
bad and the first MAX_REPORTED of them as `line N: problem, problem` (`name.jsonl: line N: ...`
for a directory), with the known language codes when a row's language is unknown.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from grpo.errors import UserError


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename inside it) to disk; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """Write `path` (UTF-8 text) all at once or not at all (see the module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def replace_dir(partial: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Put the finished dir `partial` in place of `out` (see the module docstring)."""
    import shutil

    partial, out = Path(partial), Path(out)
    for file in partial.rglob("*"):
        if file.is_file():
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())
    old = out.with_name(out.name + ".old")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(partial, out)
    fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)
    return out


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    with atomic_write(path) as fh:
        fh.write(text)
    return Path(path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        with contextlib.suppress(Exception):
            return obj.item()
    if hasattr(obj, "tolist") and callable(obj.tolist):
        with contextlib.suppress(Exception):
            return obj.tolist()
    return str(obj)


def to_json(obj: Any, **kwargs: Any) -> str:
    """JSON text of `obj` (UTF-8 kept as is, NaN allowed, anything unknown as its str())."""
    return json.dumps(obj, ensure_ascii=False, default=_json_default, allow_nan=True, **kwargs)


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    return write_text_atomic(path, to_json(obj, indent=2) + "\n")


def read_jsonl(path: str | os.PathLike[str], limit: int | None = None) -> Iterator[Any]:
    """The JSON values of a JSONL file's non-blank lines (the first `limit` lines only, if given)."""
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and i >= limit:
                break
            if line.strip():
                yield json.loads(line)


def write_jsonl_atomic(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    """One JSON value per line."""
    with atomic_write(path) as fh:
        for record in records:
            fh.write(to_json(record) + "\n")
    return Path(path)


# the most same-second runs one base name can hold (runs/<date>/<H-M-S>, <H-M-S>_2, ...)
MAX_DIR_CLAIMS = 1000


# the dirs claim_new_dir created in this process -> the parent dirs that claim created (outermost first)
_claimed: dict[Path, tuple[Path, ...]] = {}


def claim_new_dir(path: str | os.PathLike[str]) -> Path:
    """Create and return a directory that did not exist before: `path` itself, else `path_2`,
    `path_3`, ... (names stay sortable by time). The parent is created if missing; mkdir is
    atomic, so concurrent callers never get the same directory."""
    base = Path(path)
    made = tuple(p.absolute() for p in reversed(base.parents) if not p.exists())
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while n <= MAX_DIR_CLAIMS:
        candidate = base if n == 1 else base.with_name(f"{base.name}_{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        except FileNotFoundError:  # another process released the (then empty) parent just now
            base.parent.mkdir(parents=True, exist_ok=True)
            continue
        _claimed[candidate.absolute()] = made
        return candidate
    raise FileExistsError(f"{base}: {MAX_DIR_CLAIMS} directories of that name exist already")


def release_claimed_dir(path: str | os.PathLike[str], disposable: Collection[str]) -> bool:
    """Remove a directory that claim_new_dir created in this process when it holds nothing but
    entries named in `disposable` (e.g. a refused run's .hydra/ and log), then the parents that
    claim created, if empty. A dir this process did not claim, or one holding anything else, is
    left as it is. Returns whether the dir was removed."""
    import shutil

    path = Path(path)
    made = _claimed.get(path.absolute())
    if made is None or not path.is_dir() or any(e.name not in disposable for e in path.iterdir()):
        return False
    shutil.rmtree(path)
    del _claimed[path.absolute()]
    for parent in reversed(made):
        try:
            parent.rmdir()
        except OSError:  # not empty: another run's folder is there now
            break
    return True


# resolver of conf/config.yaml's run and sweep dirs: the folder taken with claim_new_dir
NEW_DIR_RESOLVER = "grpo_new_dir"


# resolver of files shipped inside the package (grpo/assets/<name>), e.g. a warm-start model
ASSET_RESOLVER = "grpo_asset"
ASSETS_DIR = Path(__file__).resolve().parent / "assets"


def register_resolvers() -> None:
    """Register ${grpo_new_dir:path} and ${grpo_asset:name}. grpo_new_dir is cached: a config
    resolves it once, and Hydra copies that cache into every job of a sweep, so a sweep keeps one
    folder. grpo_asset is the absolute path of grpo/assets/<name>, wherever the package lives and
    whatever the working directory."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(NEW_DIR_RESOLVER):
        OmegaConf.register_new_resolver(
            NEW_DIR_RESOLVER, lambda path: str(claim_new_dir(path)), use_cache=True
        )
    if not OmegaConf.has_resolver(ASSET_RESOLVER):
        OmegaConf.register_new_resolver(ASSET_RESOLVER, lambda name: str(ASSETS_DIR / str(name)))


# ---- user data in JSONL, every row checked ------------------------------------------------------

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
