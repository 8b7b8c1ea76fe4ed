"""The Hydra callback that gives every multirun sweep one MLflow parent run.

- on_multirun_start (the launching process): create the output root (Optuna's study database lives
  there too) and, with tracking=mlflow, the parent run; its id goes to <sweep dir>/mlflow_sweep.json,
  where every job (same process or a joblib worker) finds it and opens its own run as a child
  (tag mlflow.parentRunId, run name = the job's own overrides).
- on_job_end (the job's process): a job that failed before its tracker started gets a FAILED child.
- on_multirun_end, or at process exit when the sweeper raised: close the parent. Hydra 1.3's basic
  sweeper runs every job of a batch, then raises the first failed job's exception (and skips
  on_multirun_end); the Optuna sweeper records a failed trial and goes on while the failure rate
  allows. Either way the parent is closed from here: FINISHED when every child finished, otherwise
  FAILED with the tags grpo.sweep.failed_jobs / grpo.sweep.result; a child left RUNNING by a dead
  job process is closed as FAILED. When the sweeper did not raise but a job failed, the process
  still exits with status 1.
Registered in conf/config.yaml under hydra.callbacks; a no-op for single runs and tracking=none.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from grpo.config import GrpoConfig, to_settings
from grpo.tracking import params as P
from grpo.tracking.hydra_job import SweepInfo
from grpo.tracking.params import short_keys
from grpo.tracking.sweep_comparison import child_runs, summarize_sweep

log = logging.getLogger(__name__)

SWEEP_TAG = f"{P.TAG_PREFIX}sweep"


class SweepParent:
    """A sweep's MLflow parent run: started before its first job (its id in <sweep dir>/
    mlflow_sweep.json, where each job's tracker finds it and opens its run as a child), a FAILED
    child for a job that failed before its tracker started, and closed after the last job. Used by
    `python -m grpo -m` (SweepCallback, below) and by grpo.api.sweep."""

    def __init__(self, client: Any, run_id: str) -> None:
        self.client, self.run_id = client, run_id
        self.closed = False

    @classmethod
    def start(
        cls,
        settings: GrpoConfig,
        sweep_dir: Path,
        overrides: list[str],
        choices: dict[str, Any],
        *,
        space: dict[str, str] | None = None,
        run_name: str | None = None,
        source: str = "python -m grpo -m",
    ) -> SweepParent | None:
        """The parent run of a sweep in `sweep_dir` (None with tracking=none). `overrides`: the whole
        sweep's; `space`: what it explores (its params sweep.<key>)."""
        from grpo.run.layout import output_root
        from grpo.tracking.store import (
            artifact_location,
            experiment_name,
            experiment_url,
            get_or_create_experiment,
            make_client,
            run_url,
            tracking_uri,
            ui_hint,
            with_retry,
        )

        output_root(settings).mkdir(parents=True, exist_ok=True)
        if settings.tracking.backend != "mlflow":
            return None
        uri = tracking_uri(settings)
        client = make_client(uri)
        name = experiment_name(settings.tracking, settings.env)
        experiment_id = get_or_create_experiment(
            client, name, artifact_location(settings.tracking, uri, name)
        )
        try:
            sweep_id = str(sweep_dir.relative_to(output_root(settings)))
        except ValueError:
            sweep_id = str(sweep_dir)
        if space is None:
            space = search_space(None, overrides)
        tags = {
            SWEEP_TAG: "true",
            f"{P.TAG_PREFIX}sweep_id": sweep_id,
            f"{P.TAG_PREFIX}sweep_dir": str(sweep_dir),
            f"{P.TAG_PREFIX}overrides": " ".join(overrides),
            "mlflow.source.name": source,
            "mlflow.source.type": "LOCAL",
            "mlflow.note.content": "Sweep: `"
            + (
                " ".join(["python -m grpo", *sys.argv[1:]])
                if source.startswith("python -m")
                else f"{source[:-2]}({overrides})"
            )
            + "`",
            **P.choice_tags(choices),
        }
        commit = P.git_commit()
        if commit:
            tags[f"{P.TAG_PREFIX}git_commit"] = commit
            tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
        if run_name is None:
            run_name = " ".join(["sweep", *(f"{k}={v}" for k, v in short_keys(space).items())] or [sweep_id])
        run = with_retry(
            client.create_run,
            experiment_id,
            run_name=run_name[: P.MAX_KEY_LENGTH],
            tags={k: P.tag_value(v) for k, v in tags.items()},
        )
        parent = cls(client, run.info.run_id)
        if space:
            from mlflow.entities import Param

            items = [
                Param(P.safe_name(f"sweep.{k}"), P.tag_value(v)[: P.MAX_PARAM_VALUE_LENGTH])
                for k, v in space.items()
            ]
            with_retry(client.log_batch, parent.run_id, params=items[:100])
        SweepInfo(
            run_id=parent.run_id,
            experiment_id=experiment_id,
            tracking_uri=uri,
            sweep_id=sweep_id,
            overrides=overrides,
        ).write(sweep_dir)
        ui = settings.tracking.ui_url
        print(
            f"mlflow: sweep parent run '{run.info.run_name}' ({parent.run_id}) in experiment '{name}', {uri}"
        )
        print(
            f"mlflow: sweep page {run_url(uri, experiment_id, parent.run_id, ui)}, runs table "
            f"{experiment_url(uri, experiment_id, ui)}{ui_hint(uri, ui)}"
        )
        return parent

    @staticmethod
    def record_failed_job(settings: GrpoConfig, run_dir: Path, error: BaseException | None) -> None:
        """A job that failed before its tracker started (a rule checked per job, a bad env
        argument) still gets a FAILED child run with its error, so the sweep reads complete."""
        from grpo.run.layout import RunLayout
        from grpo.tracking import make_mlflow_tracker

        if settings.tracking.backend != "mlflow" or RunLayout(run_dir).mlflow_run.is_file():
            return  # no tracking, or the job's own tracker opened (and closed) its run
        tracker = make_mlflow_tracker(settings, run_dir)
        tracker.__enter__()
        tracker.log_config(settings)
        tracker.__exit__(type(error) if error is not None else None, error, None)

    def close(self, sweep_ended: bool) -> tuple[int, int]:
        """Close the parent run (and orphaned children); returns (failed jobs, jobs)."""
        from mlflow.entities import RunTag

        from grpo.tracking.store import with_retry

        self.closed = True
        client, run_id = self.client, self.run_id
        parent = with_retry(client.get_run, run_id)
        children = child_runs(client, parent)
        for child in children:
            if child.info.status == "RUNNING":  # its job process died before closing it
                with_retry(
                    client.set_tag,
                    child.info.run_id,
                    f"{P.TAG_PREFIX}error",
                    "the job ended without closing its run",
                )
                with_retry(client.set_terminated, child.info.run_id, status="FAILED")
        children = child_runs(client, parent)
        failed = [c for c in children if c.info.status != "FINISHED"]
        if failed:
            names = ", ".join(c.info.run_name or c.info.run_id for c in failed)
            result = f"{len(failed)} of {len(children)} jobs failed: {names}"
        elif not sweep_ended:
            result = f"stopped after {len(children)} jobs"
        else:
            result = f"all {len(children)} jobs finished"
        tags = {
            f"{P.TAG_PREFIX}sweep.jobs": str(len(children)),
            f"{P.TAG_PREFIX}sweep.failed_jobs": str(len(failed)),
            f"{P.TAG_PREFIX}sweep.result": P.tag_value(result),
        }
        with_retry(client.log_batch, run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        try:
            summarize_sweep(client, parent, children)
        except Exception as ex:  # noqa: BLE001 - the comparison is a convenience; closing the run is not
            log.warning("sweep comparison failed: %s", ex)
        status = "FINISHED" if sweep_ended and not failed else "FAILED"
        with_retry(client.set_terminated, run_id, status=status)
        return len(failed), len(children)


class SweepCallback(Callback):
    """`python -m grpo -m`'s parent run (SweepParent), from Hydra's callbacks."""

    def __init__(self) -> None:
        self._parent: SweepParent | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.utils import to_absolute_path

        settings = to_settings(config)
        overrides = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=True) or []]
        choices = OmegaConf.to_container(config.hydra.runtime.choices, resolve=True) or {}
        assert isinstance(choices, dict)
        from grpo.run.layout import output_root

        sweep_dir = Path(to_absolute_path(str(config.hydra.sweep.dir)))
        try:
            sweep_id = str(sweep_dir.relative_to(output_root(settings)))
        except ValueError:
            sweep_id = str(sweep_dir)
        self._parent = SweepParent.start(
            settings,
            sweep_dir,
            overrides,
            choices,
            space=search_space(config, overrides),
            run_name=sweep_run_name(config, overrides, sweep_id),
        )
        if self._parent is not None:
            atexit.register(self._close_at_exit)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if job_return.status != JobStatus.FAILED or job_return.cfg is None:
            return
        if (
            config.hydra.mode != RunMode.MULTIRUN
            or OmegaConf.select(job_return.cfg, "tracking.backend") != "mlflow"
        ):
            return
        run_dir = Path(str(config.hydra.runtime.output_dir))
        try:
            settings = to_settings(job_return.cfg)
        except Exception as ex:  # noqa: BLE001 - a config that cannot even resolve: nothing to log it with
            log.warning("sweep job %s failed with a config that does not resolve: %s", run_dir.name, ex)
            return
        SweepParent.record_failed_job(settings, run_dir, _job_error(job_return))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        parent = self._parent
        if parent is None or parent.closed:
            return
        failed, total = parent.close(sweep_ended=True)
        if failed:
            print(
                f"sweep: {failed} of {total} jobs failed (MLflow parent run {parent.run_id})", file=sys.stderr
            )
            # Hydra swallows exceptions raised by callbacks; SystemExit passes through
            raise SystemExit(1)

    def _close_at_exit(self) -> None:
        parent = self._parent
        if parent is not None and not parent.closed:
            try:
                parent.close(sweep_ended=False)
            except Exception as ex:  # noqa: BLE001 - at exit there is nobody left to raise to
                log.warning("MLflow: could not close sweep parent run %s: %s", parent.run_id, ex)


# ---- helpers ---------------------------------------------------------------------------------------


def _job_error(job_return: Any) -> BaseException | None:
    """A failed job's exception, through JobReturn's public getter (which raises it, after
    printing a line of its own that Hydra's launcher prints too)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            job_return.return_value  # noqa: B018 - the getter raises the job's exception
    except BaseException as ex:  # noqa: BLE001 - whatever the job raised is what to record
        return ex
    return None


def search_space(config: DictConfig | None, overrides: list[str]) -> dict[str, str]:
    """{key: values} a sweep explores: the sweeper's params (`config`: Hydra's, None without a
    sweeper) plus sweep overrides (a=1,2 / interval(...))."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    space: dict[str, str] = {}
    params = OmegaConf.select(config, "hydra.sweeper.params") if config is not None else None
    if params:
        space.update({str(k): str(v) for k, v in params.items()})
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - Hydra already accepted them; a label is not worth failing for
        return space
    for o in parsed:
        if o.is_sweep_override():
            space[o.get_key_element()] = o.input_line.split("=", 1)[1]
    return space


def sweep_run_name(config: DictConfig, overrides: list[str], sweep_id: str) -> str:
    """`sweep <preset> <key=values ...>`: what the sweep varies, readable in the runs list."""
    preset = OmegaConf.select(config, "hydra.runtime.choices.sweep")
    parts = ["sweep"]
    if preset:
        parts.append(str(preset))
    swept = search_space(config, overrides)
    parts += [f"{k}={v}" for k, v in short_keys(swept).items()] if swept else [sweep_id]
    return " ".join(parts)[: P.MAX_KEY_LENGTH]
