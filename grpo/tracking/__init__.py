"""Experiment tracking: every run and every sweep logged to MLflow (tracking=mlflow, the default).

    tracker = make_tracker(settings, run_dir)  # NullTracker for tracking=none: touches no store
    with tracker:                               # an exception inside -> run FAILED, re-raised
        tracker.log_config(settings)
        tracker.log_eval(label, eval_result, step)
        callbacks = [tracker.trainer_callback()]
        tracker.finish_run(objective)

Sweeps get one parent run from the Hydra callback grpo.tracking.sweep.SweepCallback (registered
in conf/config.yaml). This package stays light at import: mlflow is imported when a run starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from grpo.config import GrpoConfig


class NullTracker:
    """tracking=none: the same API, logs nothing and creates no store."""

    run_id: str | None = None

    def __enter__(self) -> NullTracker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return False

    def log_config(self, settings: GrpoConfig) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_eval(self, label: str, result: Any, step: int = 0) -> None:
        pass

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        pass

    def log_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_policy(self, model: Any, tokenizer: Any, model_path: str | None) -> None:
        pass

    def log_reward_model(self, rm_dir: Path) -> None:
        pass

    def trainer_callback(self) -> Any:
        from transformers import TrainerCallback

        return TrainerCallback()  # does nothing; keeps `callbacks=[tracker.trainer_callback()]` uniform

    def finish_run(self, objective: float | None) -> None:
        pass


def make_tracker(settings: GrpoConfig, run_dir: Path) -> Any:
    """The tracker of this run: MlflowTracker for tracking=mlflow, NullTracker for tracking=none
    and on every process but rank 0 of a multi-process run (one MLflow run, not N)."""
    from grpo.run.distributed import is_main

    if settings.tracking.backend == "none" or not is_main():
        return NullTracker()
    from grpo.tracking.mlflow_tracker import MlflowTracker

    return MlflowTracker(settings, Path(run_dir))


__all__ = ["NullTracker", "make_tracker"]
