"""What Hydra knows about the current job: single run or sweep job, overrides, group choices.

Light module (no mlflow): the sweep callback and the tracker both read it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.files import write_json_atomic

# written by the sweep callback into the sweep dir; every job of the sweep reads it
SWEEP_FILE = "mlflow_sweep.json"


@dataclass
class JobInfo:
    multirun: bool
    overrides: list[str]
    choices: dict[str, Any]
    sweep_dir: Path | None = None
    job_num: int | None = None


@dataclass
class SweepInfo:
    """The sweep's parent run, as every job finds it in <sweep dir>/mlflow_sweep.json."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    sweep_id: str
    # the overrides given to the whole sweep (command line), to tell each job's own ones apart
    overrides: list[str] = field(default_factory=list)

    def write(self, sweep_dir: Path) -> None:
        write_json_atomic(sweep_dir / SWEEP_FILE, self.__dict__)

    @classmethod
    def read(cls, sweep_dir: Path) -> SweepInfo | None:
        path = sweep_dir / SWEEP_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# the job of a run started through the Python API (grpo/api.py), where Hydra's app is not running
_api_job: contextvars.ContextVar[JobInfo | None] = contextvars.ContextVar("grpo_api_job", default=None)


@contextlib.contextmanager
def job_context(job: JobInfo | None) -> Iterator[None]:
    """`current_job()` is `job` in this block when Hydra's app is not running (a run or a sweep
    job of the Python API); None changes nothing."""
    token = _api_job.set(job) if job is not None else None
    try:
        yield
    finally:
        if token is not None:
            _api_job.reset(token)


def current_job() -> JobInfo | None:
    """The running Hydra job; else the Python API's job (`job_context`); None when neither (code
    called directly)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from hydra.utils import to_absolute_path
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return _api_job.get()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    choices = OmegaConf.to_container(hc.runtime.choices, resolve=True) if hc.runtime.choices else {}
    overrides = list(OmegaConf.to_container(hc.overrides.task, resolve=True) or [])
    sweep_dir = Path(to_absolute_path(str(hc.sweep.dir))) if multirun else None
    job_num = hc.job.get("num") if multirun else None
    assert isinstance(choices, dict)
    return JobInfo(
        multirun=multirun,
        overrides=[str(o) for o in overrides],
        choices=choices,
        sweep_dir=sweep_dir,
        job_num=int(job_num) if job_num is not None else None,
    )
