"""The Python API: `python -m grpo`'s one path, from a notebook or a script.

    from grpo import compose, run, sweep

    config = compose(["+env=alphabet_sort", "trainer.max_steps=20"])   # checked, as the CLI checks
    config.settings.trainer.max_steps                                   # the typed settings (grpo/config.py)
    result = run(config)                                                # every stage, in this process
    result.final, result.gain, result.per_language, result.mlflow_run_id, result.checkpoints

    results = sweep(["+env=alphabet_sort", "optimizer.lr=1e-6,3e-6", "trainer.beta=0,0.04"])

`compose` is Hydra's compose API on grpo's config tree with the preflight's checks: a bad override
raises UserError, the one line `python -m grpo` prints before exit code 2. `run` does what the
command does after composing: the run folder (outputs/runs/<date>/<time>, with the settings in
.hydra/ so that `resume=<folder>` continues it), the memory plan, the stages, MLflow; it returns a
`RunResult`. `sweep` runs a grid sweep's jobs one after the other, each one `run`, under one MLflow
parent run, as `python -m grpo -m` does. `python -m grpo` composes with Hydra's app and calls
`run_in` with the run folder Hydra made: the command and the API share everything after
composition.

Ctrl-C in a notebook finishes the step, writes a checkpoint and raises `Interrupted` (its
`.resume_command`); a generator that fails raises `GeneratorFailed`. Light to import: torch and the
other heavy libraries load when a run starts.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.config import GrpoConfig
from grpo.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from grpo.evaluation.summary import EvalResult, PairedChange
    from grpo.run.resume import ResumePlan


@dataclass
class Composed:
    """A composed, checked run: its typed settings (change them before `run` if you like: they
    are checked again), the overrides it was composed from, the config group choices, and the
    resume plan of a resume= run."""

    settings: GrpoConfig
    overrides: tuple[str, ...] = ()
    choices: dict[str, str] = field(default_factory=dict)
    resume: ResumePlan | None = None
    config: DictConfig | None = None

    def to_yaml(self) -> str:
        """The settings as the YAML a run saves (.hydra/config.yaml) and `--cfg job` prints."""
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.structured(self.settings))


@dataclass
class RunResult:
    """What a run leaves: where, what it measured, and its checkpoints."""

    run_dir: Path
    # the MLflow run (None with tracking=none)
    mlflow_run_id: str | None
    # evaluation label (baseline, final, best, eval) -> its result (mean, per_language, rewards, ...)
    evals: dict[str, EvalResult]
    # final - baseline, paired by example (None without both)
    change: PairedChange | None
    # the global step training reached, and its last logged metrics (TRL's names)
    step: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    # the complete GRPO checkpoints, oldest first; the best one by validation reward (keep_best)
    checkpoints: list[Path] = field(default_factory=list)
    best_checkpoint: Path | None = None
    settings: GrpoConfig | None = None
    # the collapses training saw and what it did about each (trainer.on_collapse), one line each
    collapses: list[str] = field(default_factory=list)

    @property
    def final(self) -> float | None:
        """The last evaluation's mean reward (the sweep objective)."""
        for label in ("final", "eval", "baseline"):
            if label in self.evals:
                return self.evals[label].mean
        return None

    @property
    def baseline(self) -> float | None:
        return self.evals["baseline"].mean if "baseline" in self.evals else None

    @property
    def best(self) -> float | None:
        """The best validation checkpoint's evaluation (trainer.keep_best), else None."""
        return self.evals["best"].mean if "best" in self.evals else None

    @property
    def gain(self) -> float | None:
        return self.change.mean if self.change is not None else None

    @property
    def per_language(self) -> dict[str, float]:
        """The last evaluation's mean reward per language."""
        for label in ("final", "eval", "baseline"):
            if label in self.evals:
                return {code: stats["mean"] for code, stats in self.evals[label].per_language.items()}
        return {}

    @property
    def final_checkpoint(self) -> Path | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def __repr__(self) -> str:
        parts = [f"run_dir={str(self.run_dir)!r}"]
        if self.baseline is not None:
            parts.append(f"baseline={self.baseline:.4f}")
        if self.final is not None:
            parts.append(f"final={self.final:.4f}")
        if self.change is not None:
            parts.append(f"gain={self.change.mean:+.4f} (SE {self.change.se:.4f})")
        if self.mlflow_run_id:
            parts.append(f"mlflow_run_id={self.mlflow_run_id!r}")
        return f"RunResult({', '.join(parts)})"


# ---- composing ---------------------------------------------------------------------------------------


def compose(overrides: Sequence[str] = ()) -> Composed:
    """The run `python -m grpo OVERRIDES` would run, composed and checked (UserError: the one line
    the command prints). A sweep's overrides (a=1,2) are `sweep`'s."""
    from grpo.cli.preflight import check_command

    overrides = [str(o) for o in overrides]
    if any(
        "," in o.partition("=")[2] and not o.partition("=")[2].startswith(("[", "{", "'", '"'))
        for o in overrides
    ):
        from grpo.cli.preflight import _checkable_overrides

        _, swept = _checkable_overrides(overrides)
        if swept:
            raise UserError(f"{', '.join(swept)}: several values are a sweep; use grpo.sweep(...)")
    checked = check_command(overrides)
    return Composed(checked.settings, tuple(overrides), _choices(overrides), checked.resume, checked.config)


def _choices(overrides: Sequence[str]) -> dict[str, str]:
    """The config group choices of these overrides (what `resume=` checks a resume against)."""
    from omegaconf import OmegaConf

    from grpo.compose import compose as compose_config

    try:
        hydra = compose_config(list(overrides), return_hydra_config=True).hydra
        choices = OmegaConf.to_container(hydra.runtime.choices, resolve=False) or {}
    except Exception:  # noqa: BLE001 - a resumed run's own choices apply; nothing to record
        return {}
    return {str(k): str(v) for k, v in choices.items() if v is not None and not str(k).startswith("hydra")}


# ---- running -----------------------------------------------------------------------------------------


def run(config: Composed | GrpoConfig | Sequence[str], *, run_dir: str | Path | None = None) -> RunResult:
    """Run every stage of `config` in this process (a Composed, settings, or overrides to compose)
    and return what it measured. `run_dir`: the run folder (None: a new one under
    <output_root>/runs/<date>/<time>, as the command makes). A start refused by a check (UserError)
    leaves no folder it made."""
    composed = _composed(config)
    from grpo.files import claim_new_dir, release_claimed_dir
    from grpo.run.layout import HYDRA_DIR, output_root

    made = run_dir is None
    if made:
        folder = (
            output_root(composed.settings) / "runs" / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")
        )
        run_dir = claim_new_dir(folder)
    run_dir = Path(run_dir)
    try:
        if made:
            save_run_config(run_dir, composed)
        return run_in(composed.settings, run_dir, composed.resume, job=_job(composed))
    except UserError:
        release_claimed_dir(run_dir, {HYDRA_DIR})
        raise


def _composed(config: Composed | GrpoConfig | Sequence[str]) -> Composed:
    if isinstance(config, Composed):
        return config
    if isinstance(config, GrpoConfig):
        return Composed(config)
    if isinstance(config, str):
        raise TypeError("run() takes a list of overrides, a Composed or settings, not one string")
    return compose(list(config))


def save_run_config(run_dir: Path, composed: Composed) -> None:
    """What Hydra saves in a run folder and a resume reads back: the settings and the group choices."""
    from omegaconf import OmegaConf

    from grpo.files import write_text_atomic
    from grpo.run.layout import RunLayout

    layout = RunLayout(run_dir)
    write_text_atomic(layout.saved_config, composed.to_yaml())
    hydra = {
        "hydra": {
            "runtime": {"choices": dict(composed.choices)},
            "overrides": {"task": list(composed.overrides)},
        }
    }
    write_text_atomic(layout.saved_hydra, OmegaConf.to_yaml(OmegaConf.create(hydra)))


def _job(composed: Composed) -> Any:
    from grpo.tracking.hydra_job import JobInfo

    return JobInfo(multirun=False, overrides=list(composed.overrides), choices=dict(composed.choices))


def run_in(
    settings: GrpoConfig,
    run_dir: Path,
    resume: ResumePlan | None = None,
    *,
    job: Any = None,
    trained: Any = None,
) -> RunResult:
    """The run after composition, in `run_dir` (the command's Hydra folder, or `run`'s): resolve a
    trained run folder given as model.path (`trained`: already resolved), check (once per
    process), plan the memory, run the stages with Ctrl-C / SIGTERM handled; `job`: what the
    tracker names the run after (None: Hydra's own job, the command's)."""
    from grpo.cli.checks import check_once
    from grpo.memory import plan_run
    from grpo.run.distributed import is_main
    from grpo.run.interrupt import handle_signals
    from grpo.run.trained import resolve_trained_model
    from grpo.stages import run_stages
    from grpo.tracking.hydra_job import job_context

    settings, trained = resolve_trained_model(settings, trained)
    check_once(settings, resume)
    if trained is not None and is_main():
        print(trained.line())
    plan_run(settings)  # before any model loads: will it fit its device?
    with job_context(job), handle_signals():
        results = run_stages(settings, run_dir, resume)
    return result_of(settings, run_dir, results)


def result_of(settings: GrpoConfig, run_dir: Path, results: Any) -> RunResult:
    """A RunResult of the stages' RunResults."""
    from grpo.run.checkpoints import checkpoint_step, checkpoints_of, is_complete_checkpoint
    from grpo.run.layout import RunLayout
    from grpo.stages import paired_change_of

    train = results.train
    complete = [c for c in checkpoints_of(RunLayout(run_dir).checkpoints) if is_complete_checkpoint(c)]
    checkpoints = sorted(complete, key=checkpoint_step)
    return RunResult(
        run_dir=Path(run_dir),
        mlflow_run_id=results.mlflow_run_id,
        evals=dict(results.evals),
        change=paired_change_of(results),
        step=results.step,
        metrics=dict(train.metrics) if train is not None else {},
        checkpoints=checkpoints,
        best_checkpoint=train.best.path if train is not None and train.best is not None else None,
        settings=settings,
        collapses=list(train.collapses) if train is not None else [],
    )


# ---- sweeping ----------------------------------------------------------------------------------------


def sweep(overrides: Sequence[str], grid: Mapping[str, Sequence[Any]] | None = None) -> list[RunResult]:
    """A grid sweep, `python -m grpo -m OVERRIDES` from Python: every combination of the values the
    sweep overrides list (a=1,2) and `grid` lists ({"optimizer.lr": [1e-6, 3e-6]}), every job
    checked before the first starts, then run one after the other, each `run` in its own folder
    <output_root>/multirun/<date>/<time>/<n> under one MLflow parent run (a child run each). A job
    that fails is a FAILED child and the sweep goes on; UserError at the end says which failed."""
    from grpo.cli.preflight import check_command, sweep_parts
    from grpo.files import claim_new_dir
    from grpo.run.layout import output_root
    from grpo.tracking.hydra_job import JobInfo
    from grpo.tracking.sweep import SweepParent

    overrides = [str(o) for o in overrides]
    overrides += [f"{key}={','.join(_value(v) for v in values)}" for key, values in (grid or {}).items()]
    plain, swept = sweep_parts(overrides)
    if not swept:
        raise UserError(
            "a sweep needs a key with several values (key=a,b or grid={key: [a, b]}); run() runs one"
        )
    check_command(overrides, multirun=True)  # every job (or each value once, past 64 jobs)
    keys = list(swept)
    jobs = [
        [f"{k}={v}" for k, v in zip(keys, combo, strict=True)] for combo in itertools.product(*swept.values())
    ]
    first = compose([*plain, *jobs[0]])
    stamp = time.strftime("%Y-%m-%d"), time.strftime("%H-%M-%S")
    sweep_dir = claim_new_dir(output_root(first.settings) / "multirun" / stamp[0] / stamp[1])
    parent = SweepParent.start(first.settings, sweep_dir, overrides, first.choices, source="grpo.sweep()")
    results: list[RunResult] = []
    failed: list[str] = []
    try:
        for number, own in enumerate(jobs):
            job = compose([*plain, *own])
            run_dir = sweep_dir / str(number)
            run_dir.mkdir(parents=True, exist_ok=True)
            save_run_config(run_dir, job)
            info = JobInfo(True, [*plain, *own], dict(job.choices), sweep_dir=sweep_dir, job_num=number)
            print(f"sweep: job {number} ({number + 1} of {len(jobs)}): {' '.join(own)}", flush=True)
            try:
                results.append(run_in(job.settings, run_dir, job.resume, job=info))
            except Exception as ex:  # noqa: BLE001 - a job's failure is the sweep's record, the rest go on
                failed.append(f"job {number} ({' '.join(own)}): {type(ex).__name__}: {ex}")
                SweepParent.record_failed_job(job.settings, run_dir, ex)
                print(f"sweep: job {number} failed: {ex}", file=sys.stderr, flush=True)
    finally:
        if parent is not None:
            parent.close(sweep_ended=len(results) + len(failed) == len(jobs))
    if failed:
        raise UserError(f"{len(failed)} of {len(jobs)} sweep jobs failed: {'; '.join(failed)}")
    return results


def _value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = ["Composed", "RunResult", "compose", "run", "sweep"]
