"""An output location the run cannot write (read-only, impossible, full) or an unwritable MLflow
store is one line on stderr with exit code 2, before any model is loaded; `--cfg` creates nothing.
Real `python -m grpo` processes: they stop in the preflight, about a second each."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo.cli.output_check import check_writable_outputs
from grpo.compose import load_settings
from grpo.errors import UserError

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# the run would evaluate the tiny model if the check let it through; it must stop before that
RUN = ["+env=alphabet_sort", "stages=[eval]", "eval.num_examples=1"]


def assert_one_line_error(result: subprocess.CompletedProcess[str], path: Path | str) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(path) in lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """A folder nothing can be written in. Root writes through file modes, so as root it is a
    read-only tmpfs mounted there; otherwise mode 0o555."""
    path.mkdir()
    if not IS_ROOT:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro", "none", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs as root: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_output_root_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    bad = tmp_path / "afile" / "out"
    line = assert_one_line_error(run_grpo([*RUN, f"output_root={bad}"], cwd=tmp_path, timeout=120), bad)
    assert "cannot create it" in line and "Not a directory" in line


def test_output_root_in_proc(tmp_path):
    bad = "/proc/grpo-test/out"
    line = assert_one_line_error(run_grpo([*RUN, f"output_root={bad}"], cwd=tmp_path, timeout=120), bad)
    assert "cannot create it" in line


def test_read_only_output_root(tmp_path):
    with read_only_dir(tmp_path / "ro") as ro:
        line = assert_one_line_error(run_grpo([*RUN, f"output_root={ro}"], cwd=tmp_path, timeout=120), ro)
        # the folder exists, so the write itself is refused
        assert "not writable" in line
        bad = ro / "out"
        line = assert_one_line_error(run_grpo([*RUN, f"output_root={bad}"], cwd=tmp_path, timeout=120), bad)
        assert "cannot create it" in line


def test_read_only_mlflow_store(tmp_path):
    out = tmp_path / "out"
    with read_only_dir(tmp_path / "ro") as ro:
        db = ro / "mlflow.db"
        result = run_grpo(
            [*RUN, f"output_root={out}", "tracking=mlflow", f"tracking.uri=sqlite:///{db}"],
            cwd=tmp_path,
            timeout=120,
        )
        line = assert_one_line_error(result, db)
        assert line.startswith(f"error: MLflow store {db}: not writable")
    # the writable output root passed its check; nothing was trained, so nothing else is there
    assert out.is_dir() and not any(out.iterdir())


def test_full_output_root(tmp_path):
    if not IS_ROOT:
        pytest.skip("mounting a small tmpfs needs root")
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "none", str(full)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs as root: {mounted.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(full / "fill", "wb", buffering=0) as fill:
            while True:
                fill.write(b"\0" * 4096)
        line = assert_one_line_error(run_grpo([*RUN, f"output_root={full}"], cwd=tmp_path, timeout=120), full)
        assert "No space left on device" in line
    finally:
        subprocess.run(["umount", str(full)], check=True)


@pytest.mark.parametrize("output_root", ["afile/out", "new/out"])
def test_printing_the_config_checks_and_creates_nothing(tmp_path, output_root):
    (tmp_path / "afile").write_text("not a folder\n")
    before = sorted(tmp_path.rglob("*"))
    result = run_grpo([*RUN, f"output_root={output_root}", "--cfg", "job"], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"output_root: {output_root}" in result.stdout
    assert sorted(tmp_path.rglob("*")) == before


# ---- in process: what the check leaves behind ----------------------------------------------------


def test_a_writable_output_root_is_created_and_left_empty(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = tmp_path / "a" / "b"
    check_writable_outputs(load_settings(["+env=alphabet_sort", f"output_root={root}", "tracking=mlflow"]))
    assert root.is_dir() and not any(root.iterdir())


def test_an_existing_store_is_opened_but_not_changed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"SQLite format 3\0")
    before = db.stat()
    check_writable_outputs(
        load_settings(["+env=alphabet_sort", f"output_root={tmp_path}", "tracking=mlflow"])
    )
    after = db.stat()
    assert db.read_bytes() == b"SQLite format 3\0"
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_store_path_that_is_a_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlflow.db").mkdir()
    settings = load_settings(["+env=alphabet_sort", f"output_root={tmp_path}", "tracking=mlflow"])
    with pytest.raises(UserError, match=r"^MLflow store .*mlflow\.db: not writable \(Is a directory\)$"):
        check_writable_outputs(settings)


def test_a_tracking_server_and_tracking_none_touch_no_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for overrides in (["tracking=none"], ["tracking=mlflow", "tracking.uri=http://127.0.0.1:9"]):
        settings = load_settings(["+env=alphabet_sort", f"output_root={tmp_path}", *overrides])
        check_writable_outputs(settings)
    assert not any(tmp_path.iterdir())


def test_only_a_claimed_folder_holding_nothing_else_is_released(tmp_path):
    """What a refused start removes (grpo/__main__.py): the run folder this process claimed, when
    it holds only .hydra/ and the log, with the date folder the claim made; nothing else."""
    from grpo.files import claim_new_dir, release_claimed_dir

    keep = {".hydra", "__main__.log"}
    refused = claim_new_dir(tmp_path / "runs" / "2026-01-01" / "10-00-00")
    (refused / ".hydra").mkdir()
    (refused / "__main__.log").write_text("", encoding="utf-8")
    assert release_claimed_dir(refused, keep)
    assert list(tmp_path.iterdir()) == []  # runs/ and the date folder were made by the claim

    started = claim_new_dir(tmp_path / "runs" / "2026-01-01" / "10-00-00")
    (started / ".hydra").mkdir()
    (started / "mlflow_run.json").write_text("{}", encoding="utf-8")
    assert not release_claimed_dir(started, keep) and (started / "mlflow_run.json").is_file()
    # a folder this process did not claim (hydra.run.dir=<an existing run>) is never removed
    other = tmp_path / "runs" / "earlier"
    (other / ".hydra").mkdir(parents=True)
    assert not release_claimed_dir(other, keep) and (other / ".hydra").is_dir()
