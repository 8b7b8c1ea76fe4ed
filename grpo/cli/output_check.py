"""Before anything is trained: can the run write where its outputs go?

`check_writable_outputs(settings)` raises a one-line UserError naming the path and the cause when
- output_root (runs/, multirun/ and the default MLflow store) cannot be created or written: a
  read-only file system, no permission, a path under a regular file, /proc, a full disk;
- tracking=mlflow with a SQLite store (the default, or tracking.uri / $MLFLOW_TRACKING_URI
  sqlite:///path) whose folder cannot be created or written, or whose existing database file
  cannot be opened for writing.
A tracking server (http/https) is not checked. On success output_root and the store's folder
exist (Hydra and MLflow would create them anyway) and nothing else is left behind: an existing
database is opened without being modified.

Light to import (standard library and grpo.tracking.store, which imports mlflow lazily), so the
CLI preflight can call it before any model is loaded.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from grpo.errors import UserError
from grpo.run.layout import output_root
from grpo.tracking.store import sqlite_path, tracking_uri

if TYPE_CHECKING:
    from grpo.config import GrpoConfig

# written to the probe file: one page or less, enough for a full disk to refuse it
_PROBE = b"grpo write check\n"


def check_writable_outputs(settings: GrpoConfig) -> None:
    """Raise UserError (one line) when the run could not write its outputs or its MLflow store."""
    root = output_root(settings)
    problem = _probe_folder(root)
    if problem is not None:
        step, cause = problem
        what = "cannot create it" if step == "create" else "not writable"
        raise UserError(f"output_root {root}: {what} ({cause})")
    if settings.tracking.backend != "mlflow":
        return
    db = sqlite_path(tracking_uri(settings))
    if db is None:
        return  # a tracking server: its own business, and probing it could be slow
    # SQLite writes journal files next to the database, and the store keeps its lock file and
    # artifacts there too: the folder itself must take new files, not just the database
    problem = None if db.parent == root else _probe_folder(db.parent)
    if problem is not None:
        step, cause = problem
        if step == "create":
            raise UserError(f"MLflow store {db}: cannot create its folder {db.parent} ({cause})")
        raise UserError(f"MLflow store {db}: not writable ({cause})")
    try:
        # no O_CREAT and no O_TRUNC: a missing file stays missing, an existing one unchanged
        fd = os.open(db, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        return  # created on the first run; the folder takes new files
    except OSError as ex:
        raise UserError(f"MLflow store {db}: not writable ({_cause(ex, db)})") from None
    os.close(fd)


def _probe_folder(folder: Path) -> tuple[str, str] | None:
    """("create" or "write", cause) when files cannot be written in `folder`, which is created
    (with its parents) if missing; None when they can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as ex:
        return "create", _cause(ex, folder)
    try:
        # a real write and fsync, not os.access: that misses read-only mounts as root and full
        # disks. Unbuffered, so write() itself reports ENOSPC; an unnamed temporary file
        # (O_TMPFILE where supported) leaves nothing behind even if this process is killed
        with tempfile.TemporaryFile(dir=folder, buffering=0) as probe:
            probe.write(_PROBE)
            os.fsync(probe.fileno())
    except OSError as ex:
        return "write", _cause(ex, folder)
    return None


def _cause(ex: OSError, path: Path) -> str:
    """The OS's reason, plus which part of the path is not a folder when that is the reason."""
    cause = ex.strerror or (os.strerror(ex.errno) if ex.errno else str(ex))
    if ex.errno in (errno.ENOTDIR, errno.EEXIST):
        # "Not a directory" alone does not say which part of the path is in the way
        # (os.path.exists: False rather than an error on a part we may not even stat)
        parts = (path, *path.parents)
        blocker = next((p for p in parts if os.path.exists(p) and not os.path.isdir(p)), None)
        if blocker is not None:
            cause = f"{cause}: {blocker} is not a folder"
    return cause
