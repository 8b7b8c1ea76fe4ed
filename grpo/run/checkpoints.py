"""Training checkpoints on disk: which are complete, which is the latest, and what a resume changes.

transformers writes a checkpoint in place (no temp dir + rename), so once all of it is on disk a
marker file is written (every file fsynced first, the marker atomically): `latest_checkpoint`
only picks marked checkpoints, so a run killed mid-save never yields a corrupt "latest".

With trainer.keep_best, <checkpoints>/grpo_best.json names the checkpoint with the best validation
reward (`write_best_marker`, `best_checkpoint`).

Light module: the config check (`resume=`) uses it before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from grpo.errors import UserError
from grpo.files import write_json_atomic
from grpo.run.layout import CHECKPOINTS_DIR

CHECKPOINT_PREFIX = "checkpoint-"
# written last into a checkpoint dir, once everything else is on disk
COMPLETE_MARKER = "grpo_checkpoint_complete.json"
# in the checkpoints dir: the best checkpoint by validation reward (trainer.keep_best)
BEST_MARKER = "grpo_best.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
)


def checkpoint_step(path: Path) -> int | None:
    """The global step in a `checkpoint-N` dir name, else None."""
    name = path.name
    if not name.startswith(CHECKPOINT_PREFIX):
        return None
    suffix = name[len(CHECKPOINT_PREFIX) :]
    return int(suffix) if suffix.isdigit() else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_complete_checkpoint(path: Path) -> bool:
    """A checkpoint dir everything was written to: our marker and the trainer state agree on its
    step, the weights, optimizer and scheduler files are there, each of the size the marker
    recorded (markers since sizes were recorded; older ones are checked by name)."""
    return checkpoint_problem(path) is None


def checkpoint_problem(path: Path) -> str | None:
    """Why `path` is not a complete checkpoint (one phrase, e.g. "model.safetensors has 1000 of
    2000 bytes"), None when it is one."""
    step = checkpoint_step(path)
    if step is None or not path.is_dir():
        return "not a checkpoint-N directory"
    marker = _read_json(path / COMPLETE_MARKER)
    state = _read_json(path / "trainer_state.json")
    if not isinstance(marker, dict) or marker.get("global_step") != step:
        return "no completion marker (the run stopped while saving it)"
    if not isinstance(state, dict) or state.get("global_step") != step:
        return "trainer_state.json is missing or damaged"
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        return "no weights file"
    sizes = marker.get("sizes") if isinstance(marker.get("sizes"), dict) else {}
    for name in marker.get("files", ()):
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if name in sizes and sizes[name] != size:
            return f"{name} has {size} of {sizes[name]} bytes (damaged or cut short)"
    return None


def checkpoints_of(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The `checkpoint-N` dirs of a run (its output dir, its checkpoints dir, or a checkpoint
    itself), newest step first."""
    root = Path(run_dir)
    if checkpoint_step(root) is not None:
        return [root]
    if (root / CHECKPOINTS_DIR).is_dir():
        root = root / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0, reverse=True)


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path:
    """The newest COMPLETE checkpoint of a previous run; incomplete ones (a run killed while
    saving) are skipped. UserError when there is none."""
    root = Path(run_dir).expanduser()
    if not root.exists():
        raise UserError(
            f"resume={run_dir}: no such directory; pass a previous run's output dir (outputs/runs/...)"
        )
    latest = latest_complete(root)
    if latest is not None:
        return latest
    candidates = checkpoints_of(root)
    where = root / CHECKPOINTS_DIR if (root / CHECKPOINTS_DIR).is_dir() else root
    skipped = f" ({len(candidates)} incomplete skipped)" if candidates else ""
    raise UserError(
        f"resume={run_dir}: no complete checkpoint under {where}{skipped}; a run writes one every "
        "trainer.save_steps steps and at its end"
    )


def latest_complete(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under `root` (see checkpoints_of), None if there is none."""
    return next((c for c in checkpoints_of(root) if is_complete_checkpoint(c)), None)


def marker_callback() -> Any:
    """A transformers TrainerCallback marking each checkpoint complete once it is all on disk."""
    from transformers import TrainerCallback

    class CheckpointMarker(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not state.is_world_process_zero:
                return
            path = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            if path.is_dir():
                mark_checkpoint_complete(path, state.global_step)

    return CheckpointMarker()


def mark_checkpoint_complete(path: Path, global_step: int) -> None:
    """Flush every file of a finished checkpoint to disk, then write the marker atomically."""
    files = sorted(
        str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER
    )
    for name in files:
        with open(path / name, "rb") as fh:
            os.fsync(fh.fileno())
    sizes = {name: (path / name).stat().st_size for name in files}
    write_json_atomic(path / COMPLETE_MARKER, {"global_step": global_step, "files": files, "sizes": sizes})


@dataclasses.dataclass(frozen=True)
class BestCheckpoint:
    """The checkpoint with the best validation reward of a run."""

    path: Path
    global_step: int
    val_reward: float


def write_best_marker(checkpoints_dir: Path, checkpoint: Path, global_step: int, val_reward: float) -> None:
    """Record `checkpoint` as the run's best (atomically): by name when it is in `checkpoints_dir`,
    else by absolute path (a resumed run's best may sit in the run it resumed)."""
    checkpoints_dir, checkpoint = Path(checkpoints_dir), Path(checkpoint)
    name = (
        checkpoint.name
        if checkpoint.parent.resolve() == checkpoints_dir.resolve()
        else str(checkpoint.resolve())
    )
    record = {"checkpoint": name, "global_step": int(global_step), "val_reward": float(val_reward)}
    write_json_atomic(checkpoints_dir / BEST_MARKER, record)


def best_checkpoint(run_dir: str | os.PathLike[str]) -> BestCheckpoint | None:
    """The best checkpoint recorded in a run (its output dir or its checkpoints dir), if it is still
    complete on disk; None otherwise (no keep_best, no validation yet, or deleted)."""
    root = Path(run_dir).expanduser()
    if (root / CHECKPOINTS_DIR).is_dir():
        root = root / CHECKPOINTS_DIR
    record = _read_json(root / BEST_MARKER)
    if not isinstance(record, dict) or not isinstance(record.get("checkpoint"), str):
        return None
    path = root / record["checkpoint"]
    if not is_complete_checkpoint(path):
        return None
    return BestCheckpoint(path, int(record["global_step"]), float(record["val_reward"]))
