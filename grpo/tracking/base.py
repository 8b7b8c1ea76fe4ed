"""The tracker a stage is handed: what it may log, and a tracker that logs nothing.

`Tracker` is the interface every stage uses the same way (grpo/tracking/__init__.py); this base
logs nothing and creates no store, and is the tracker of tracking=none (`NullTracker`). The
MLflow tracker (grpo/tracking/mlflow_tracker.py) derives from it. Light: no mlflow import.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from grpo.config import GrpoConfig

# where a TRL stage's metrics go by default: train/<TRL name> (GRPO)
TRAIN_PREFIX = "train/"


class Tracker:
    """What a stage may ask of the run's tracker. This base logs nothing and creates no store:
    it is the tracker of tracking=none and of every process but rank 0 (`NullTracker`)."""

    run_id: str | None = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return False

    def log_config(self, settings: GrpoConfig) -> None:
        """The run's settings (params, the resolved config)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Metrics at `step` (may raise when the store stays unreachable: see `best_effort`)."""

    def log_eval(self, label: str, result: Any, step: int = 0) -> None:
        """An evaluation (grpo.evaluation.summary.EvalResult) under eval/<label>/."""

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A file, or a directory's files, as artifacts."""

    def log_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_policy(self, model: Any, tokenizer: Any, model_path: str | None) -> None:
        """The trained policy as a model of the run."""

    def log_reward_model(self, rm_dir: Path) -> None:
        """The trained reward model as a model of the run."""

    def trainer_callback(self, prefix: str = TRAIN_PREFIX) -> Any:
        """A transformers TrainerCallback sending the trainer's logs to `log_metrics`, renamed
        <prefix><name> (grpo/tracking/trainer_callback.py); it never stops training."""
        from grpo.tracking.trainer_callback import MetricsCallback

        return MetricsCallback(self.log_metrics, prefix)

    def completions_callback(self) -> Any:
        """A transformers TrainerCallback logging GRPO's completions table every logging step
        (grpo/tracking/completions.py; its `trainer` is set once the trainer exists), or None when
        this tracker keeps no tables."""
        return None

    def finish_run(self, objective: float | None) -> None:
        """The run's objective (the last evaluation's mean reward)."""

    def where(self) -> list[str]:
        """The lines a run ends with, once its tracker closed: where its results are shown."""
        return []


class NullTracker(Tracker):
    """tracking=none: the same API, logs nothing and creates no store."""


@contextlib.contextmanager
def best_effort(stage: str, what: str) -> Iterator[None]:
    """Log `what` without letting a tracking failure end the stage: one warning line
    (`[stage] warning: what not logged: ...`) instead of the error. Tracking must never cost a
    trained model or a training run."""
    try:
        yield
    except Exception as ex:  # noqa: BLE001 - any store error; the run's own work is already on disk
        print(f"[{stage}] warning: {what} not logged to the tracker: {ex}", file=sys.stderr)
