"""Experiment tracking: every run and every sweep logged to MLflow (tracking=mlflow, the default).

    tracker = make_tracker(settings, run_dir)   # NullTracker for tracking=none: touches no store
    with tracker:                                # an exception inside -> run FAILED, re-raised
        tracker.log_config(settings)
        tracker.log_eval(label, eval_result, step)
        callbacks = [tracker.trainer_callback("sft/")]   # a TRL stage's metrics, under its prefix
        tracker.finish_run(objective)

Every stage is handed the run's tracker and uses it the same way (`Tracker`): its trainer's
metrics through `trainer_callback(prefix)`, anything else through `log_metrics`, `log_artifact`
and `log_tags`. Sweeps get one parent run from the Hydra callback grpo.tracking.sweep.SweepCallback
(registered in conf/config.yaml). This package stays light at import: mlflow is imported when a
run starts.
"""

from __future__ import annotations

from pathlib import Path

from grpo.config import GrpoConfig
from grpo.tracking.base import TRAIN_PREFIX, NullTracker, Tracker, best_effort


def make_tracker(settings: GrpoConfig, run_dir: Path) -> Tracker:
    """The tracker of this run: MlflowTracker for tracking=mlflow, NullTracker for tracking=none
    and on every process but rank 0 of a multi-process run (one MLflow run, not N)."""
    from grpo.run.distributed import is_main

    if settings.tracking.backend == "none" or not is_main():
        return NullTracker()
    return make_mlflow_tracker(settings, run_dir)


def make_mlflow_tracker(settings: GrpoConfig, run_dir: Path) -> Tracker:
    """The MLflow tracker of the run in `run_dir`, given the parts of `settings` it logs with: the
    tracking group, the store (tracking.uri or the one under output_root), the experiment, the
    env's name, the stages and language its run name says, and the run it resumes."""
    from grpo.tracking.mlflow_tracker import MlflowTracker
    from grpo.tracking.store import env_name, experiment_name, tracking_uri

    language = settings.language
    code = "+".join(language.members) if language.code == "mix" and language.members else language.code
    return MlflowTracker(
        settings.tracking,
        Path(run_dir),
        uri=tracking_uri(settings),
        experiment=experiment_name(settings.tracking, settings.env),
        env_name=env_name(settings.env),
        stages=list(settings.stages),
        language=code,
        resume=settings.resume,
    )


__all__ = ["TRAIN_PREFIX", "NullTracker", "Tracker", "best_effort", "make_mlflow_tracker", "make_tracker"]
