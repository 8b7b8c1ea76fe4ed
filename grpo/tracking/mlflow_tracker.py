"""One run in MLflow: created on enter, closed on exit (FAILED with the error if the block raised).

    tracker = make_tracker(settings, run_dir)
    with tracker:
        tracker.log_config(settings)
        tracker.log_eval("baseline", result, step=0)
        trainer = ...(callbacks=[tracker.trainer_callback()])
        tracker.finish_run(objective)

Every call goes through an explicit MlflowClient and run id (no global "active run"), so parallel
sweep jobs, the Trainer's own threads and user code cannot log into the wrong run. A sweep job
becomes a child of the sweep's parent run (see grpo.tracking.sweep); `resume=<run dir>` reopens the
run recorded in <run dir>/mlflow_run.json.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from grpo.config import GrpoConfig, TrackingConfig
from grpo.errors import UserError
from grpo.files import read_jsonl, write_json_atomic
from grpo.run.interrupt import signals_held
from grpo.run.layout import RunLayout
from grpo.tracking import params as P
from grpo.tracking.base import TRAIN_PREFIX, Tracker
from grpo.tracking.hydra_job import JobInfo, SweepInfo, current_job
from grpo.tracking.render import last_user_message, render_messages, rows_html
from grpo.tracking.spool import Spool, unreachable
from grpo.tracking.store import (
    artifact_anchor,
    artifact_location,
    artifact_url,
    experiment_url,
    get_or_create_experiment,
    local_artifact_dir,
    make_client,
    metric_curve,
    run_url,
    ui_command,
    ui_hint,
    with_retry,
)

log = logging.getLogger(__name__)

EVAL_PREFIX = "eval/"
# the tag MLflow's UI shows as a run's Description (markdown)
NOTE_TAG = "mlflow.note.content"
# curves drawn in plots/train_curves.png, when the run logged them (val/reward: trainer.eval_steps > 0)
TRAIN_CURVES = ("train/reward", "val/reward", "train/kl")
# evaluations marked on its reward panels
EVAL_MARKS = ("baseline", "final", "best")
# per-language curves: the validation mean (val/lang/<code>/mean) and each reward function's
# training mean under a language mix (train/rewards/<fn>/<code>/mean, grpo/rewards/reward_funcs.py)
VAL_LANGUAGE = "val/lang/"
TRAIN_REWARDS = "train/rewards/"
# a learned RM's score on the held-out rows: val/score/<name>/lang/<code>
VAL_SCORE = "val/score/"
_EVAL_FUNC = re.compile(r"^eval/(?P<label>[^/]+)/func/(?P<fn>[^/]+)$")
_EVAL_TOTAL = re.compile(r"^eval/(?P<label>[^/]+)/mean$")
# the weighted total reward's bar in plots/eval_by_function.png
TOTAL_BAR = "(total)"
# plot order of evaluation labels (others follow alphabetically)
_LABEL_ORDER = ("baseline", "eval", "final", "best")


class MlflowTracker(Tracker):
    """Logs one run (a single run, a sweep job, or a resumed run) to an MLflow store. Built by
    grpo.tracking.make_mlflow_tracker(settings, run_dir): `tracking` is the tracking group, `uri` the
    store, `experiment` the experiment a new run goes to, `env_name` the env's name (the dataset
    name of an evaluation that has no task), `resume` the run dir this run resumes (or None)."""

    def __init__(
        self,
        tracking: TrackingConfig,
        run_dir: Path,
        *,
        uri: str,
        experiment: str,
        env_name: str = "",
        stages: Sequence[str] = (),
        language: str = "",
        resume: str | None = None,
    ) -> None:
        self.tracking = tracking
        self.run_dir = Path(run_dir)
        self.uri = uri
        self.experiment = experiment
        self.env_name = env_name
        # what the run's name says it ran, on what (with env_name): the stages, the language code
        self.stages = list(stages)
        self.language = language
        self.resume = resume
        self.client: Any = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.resumed = False
        self._last_step = 0
        # a resumed run: metric name -> the last step the run already has a value for
        self._logged: dict[str, int] = {}
        # MLflow's SystemMetricsMonitor while the run is open (tracking.system_metrics)
        self._system: Any = None
        # the run's writes while the store is unreachable (grpo/tracking/spool.py)
        self.spool = Spool(self.run_dir, self.uri)
        # whether the run logged anything beyond its config (metrics, artifacts): a start refused
        # before that leaves no run behind (`_forget_refused`)
        self._has_results = False
        # the readable pages this run wrote (title -> artifact path): linked from the run's
        # description and from the lines the run ends with (`where`)
        self._pages: dict[str, str] = {}
        self._name = ""

    # ---- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> MlflowTracker:
        try:
            self._start()
        except KeyboardInterrupt as ex:  # a Ctrl-C as the run starts: a run created is closed KILLED
            self.__exit__(type(ex), ex, ex.__traceback__)
            raise
        return self

    def _start(self) -> None:
        job = current_job()
        sweep = self._sweep(job)
        try:
            # a Ctrl-C meanwhile is acted on once the run's id is known (so its run can be closed)
            with signals_held():
                self.client = make_client(self.uri)
                run = self._open_run(job, sweep)
                self.run_id = run.info.run_id
                self.experiment_id = run.info.experiment_id
        except Exception as ex:
            # a fresh run (or a sweep's child) whose store is away: created once it answers
            if self.run_id is not None or self.resume or not unreachable(ex):
                raise
            self._start_offline(job, sweep, ex)
            return
        self._write_run_file()
        if self.tracking.system_metrics:
            self._system = start_system_metrics(
                self.run_id, self.uri, self.tracking.system_metrics_interval, self.resumed
            )
        experiment = with_retry(self.client.get_experiment, self.experiment_id)
        self._name = run.info.run_name or ""
        verb = "resumed" if self.resumed else "logging to"
        ui = self.tracking.ui_url
        print(
            f"mlflow: {verb} run '{run.info.run_name}' ({self.run_id}) in experiment '{experiment.name}', {self.uri}"
        )
        print(
            f"mlflow: run page {run_url(self.uri, self.experiment_id, self.run_id, ui)}, runs table "
            f"{experiment_url(self.uri, self.experiment_id, ui)}{ui_hint(self.uri, ui)}"
        )

    def _open_run(self, job: JobInfo | None, sweep: SweepInfo | None) -> Any:
        """The resumed run reopened, or a new run (a sweep job: under its parent)."""
        run_id = self._resumable_run_id()
        if run_id is not None:
            with_retry(self.client.update_run, run_id, status="RUNNING")
            with_retry(self.client.set_tag, run_id, f"{P.TAG_PREFIX}resumed_in", str(self.run_dir))
            self.resumed = True
            run = with_retry(self.client.get_run, run_id)
            self._logged = self._last_logged_steps(run)
            return run
        if sweep is not None:  # the children of a sweep live in their parent's experiment
            experiment_id = sweep.experiment_id
        else:
            name = self.experiment
            location = artifact_location(self.tracking, self.uri, name)
            experiment_id = get_or_create_experiment(self.client, name, location)
        return with_retry(
            self.client.create_run,
            experiment_id,
            run_name=self._run_name(job, sweep),
            tags=self._start_tags(job, sweep),
        )

    def _start_offline(self, job: JobInfo | None, sweep: SweepInfo | None, ex: BaseException) -> None:
        """The store is away as the run starts: the run's creation is the first kept call (in its
        experiment, or under the sweep's parent, whose ids are on disk), so it exists with all its
        calls once the store answers (or `python -m grpo.tracking.sync` sends them). No system
        metrics meanwhile: MLflow's monitor needs the run."""
        name = self.experiment
        self.experiment_id = sweep.experiment_id if sweep is not None else None
        self.spool.keep_run_creation(
            ex,
            experiment_id=self.experiment_id,
            experiment_name=name,
            artifact_location=artifact_location(self.tracking, self.uri, name),
            run_name=self._run_name(job, sweep),
            tags=self._start_tags(job, sweep),
            start_time=int(time.time() * 1000),
        )

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self.run_id is None and not self.spool.pending:
            return False
        if self._forget_refused(exc):
            return False
        status = _status(exc)
        cut: KeyboardInterrupt | None = None
        try:
            self._end_of_run(exc, status)
        except KeyboardInterrupt as ex:  # a further Ctrl-C: skip the rest, but close the run
            cut = ex
            status = status if exc is not None else "KILLED"
        except Exception as ex:  # noqa: BLE001 - never hide the run's own error behind a logging one
            log.warning("MLflow: could not log the end-of-run plots: %s", ex)
        try:
            self._write("status", status=status, end_time=int(time.time() * 1000))
            self.spool.close(self.client, self.run_id, f"python -m grpo.tracking.sync {self.run_dir}")
        except KeyboardInterrupt:  # the status went in (a store write is never cut: signals_held)
            if exc is None:
                raise
        except Exception as ex:  # noqa: BLE001
            if exc is None:
                raise
            log.warning("MLflow: could not close run %s as %s: %s", self.run_id, status, ex)
        if cut is not None and exc is None:
            raise cut
        return False

    def _description(self) -> str:
        """Markdown for the run page's Description: a link to each readable page of the run."""
        links = [
            f"- [{title}]({artifact_anchor(str(self.experiment_id), str(self.run_id), path)})"
            for title, path in self._pages.items()
        ]
        return "Readable pages of this run (also under Artifacts):\n\n" + "\n".join(links)

    def where(self) -> list[str]:
        """The lines a run ends with: its run page, its readable pages, and how to open them."""
        if self.run_id is None:
            return []
        ui = self.tracking.ui_url
        lines = [f"mlflow: run '{self._name}': {run_url(self.uri, str(self.experiment_id), self.run_id, ui)}"]
        for title, path in self._pages.items():
            if "evaluation" not in title or title.startswith("final"):  # the final samples, the last step's
                url = artifact_url(self.uri, str(self.experiment_id), self.run_id, path, ui)
                lines.append(f"mlflow: {title}: {url}")
        command = ui_command(self.uri, ui)
        if command is not None:
            lines.append(f"mlflow: open them with: {command} (another host / port: tracking.ui_url=URL)")
        return lines

    def _forget_refused(self, exc: BaseException | None) -> bool:
        """A new run (not resumed, not a sweep's job) refused with a UserError before it logged any
        result: its MLflow run is deleted and its run file removed, so the refusal leaves no FAILED
        run in the runs table (the refusal's line says why). Returns whether it was forgotten."""
        if not isinstance(exc, UserError) or self._has_results or self.resumed or self.run_id is None:
            return False
        job = current_job()
        if job is not None and job.multirun:
            return False  # a sweep's failed job stays visible beside the others
        if self._system is not None:
            system, self._system = self._system, None
            best_effort_finish(system)
        try:
            artifacts = with_retry(self.client.get_run, self.run_id).info.artifact_uri
            with_retry(self.client.delete_run, self.run_id)
        except Exception as ex:  # noqa: BLE001 - the store is away: the run is closed as usual
            log.warning("MLflow: could not remove the refused run %s: %s", self.run_id, ex)
            return False
        local = local_artifact_dir(artifacts)
        if local is not None:  # its config.yaml (a server's artifacts are the server's to collect)
            shutil.rmtree(local.parent if local.name == "artifacts" else local, ignore_errors=True)
        RunLayout(self.run_dir).mlflow_run.unlink(missing_ok=True)
        print(f"mlflow: run {self.run_id} removed (the start was refused before it logged anything)")
        return True

    def _end_of_run(self, exc: BaseException | None, status: str) -> None:
        """What a run logs as it ends, before its status: the system metrics' last samples, how
        it ended (interrupted at a step, its error), what the spool kept, the plots."""
        if self._system is not None:  # its last samples go in before the run is closed
            system, self._system = self._system, None
            best_effort_finish(system)
        step = getattr(exc, "step", None)
        if isinstance(exc, KeyboardInterrupt) and step is not None:  # grpo.run.interrupt.Interrupted
            tags = {"interrupted_at_step": step, "interrupted_by": str(exc).split()[0]}
            self._log_tags({f"{P.TAG_PREFIX}{k}": str(v) for k, v in tags.items()})
        elif status != "FINISHED" and exc is not None:
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            self._log_tags({f"{P.TAG_PREFIX}error": P.tag_value(message)})
        if self.spool.pending:
            self._adopt(self.spool.replay(self.client, self.run_id))
        if self._pages and self.run_id is not None:
            # the run page's Description: the readable pages (the JSON tables cut long completions)
            self._log_tags({NOTE_TAG: self._description()})
        # with calls still kept, the store lacks the run's metrics: no plots (the spool's last
        # line says the store is away)
        if self.tracking.log_plots and not self.spool.pending:
            self.log_plots()

    # ---- what a run logs ---------------------------------------------------------------------------

    def log_config(self, settings: GrpoConfig) -> None:
        """Params = the flattened resolved config (`cfg.` keys); the resolved config.yaml artifact.
        A resumed run keeps its params (MLflow params are immutable); a value changed on resume is
        recorded as the tag grpo.resumed.<key>."""
        params = P.config_params(settings)
        if self.resumed:
            existing = with_retry(self.client.get_run, self.run_id).data.params
            changed = {k: v for k, v in params.items() if k in existing and existing[k] != v}
            self._log_tags({f"{P.TAG_PREFIX}resumed.{k}"[: P.MAX_KEY_LENGTH]: v for k, v in changed.items()})
            params = {k: v for k, v in params.items() if k not in existing}
        self._log_params(params)
        tags = {f"{P.TAG_PREFIX}env": str((settings.env or {}).get("name", ""))}
        tags[f"{P.TAG_PREFIX}model"] = str(settings.model.path or settings.model.name)
        self._log_tags(tags)
        name = "config.resumed.yaml" if self.resumed else "config.yaml"
        self._write("text", text=P.resolved_yaml(settings), artifact_file=name)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Metrics at `step`, in batches (one database transaction per batch)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        entities = [
            Metric(P.safe_name(k), float(v), now, int(step))
            for k, v in metrics.items()
            if v is not None and not isinstance(v, bool)
        ]
        # one value per step: a resumed run replays the steps after its checkpoint; the values the
        # interrupted process logged for them stay (MLflow cannot delete metric points)
        entities = [m for m in entities if m.step > self._logged.get(m.key, -1)]
        if entities:
            self._has_results = True
            self._write("metrics", metrics=[[m.key, m.value, m.timestamp, m.step] for m in entities])
        self._last_step = max(self._last_step, int(step))

    def log_eval(self, label: str, result: Any, step: int = 0) -> None:
        """An evaluation (grpo.evaluation.summary.EvalResult): metrics eval/<label>/..., its results.jsonl and
        metadata.json under eval/<label>/, and a table of sample completions with their rewards."""
        self.log_metrics(result.to_metrics(prefix=f"{EVAL_PREFIX}{label}/"), step)
        # tags, not params: a resumed run may evaluate again with another duration
        self._log_tags(result.to_tags(prefix=f"{EVAL_PREFIX}{label}/"))
        for path in (result.results_path, result.metadata_path):
            if path is not None and Path(path).is_file():
                self.log_artifact(Path(path), f"eval/{label}")
        if result.results_path is not None and Path(result.results_path).is_file():
            try:
                self._log_eval_input(label, result)
            except Exception as ex:  # noqa: BLE001 - a description of the data; the results are logged
                log.warning("MLflow: could not log the %s evaluation's dataset input: %s", label, ex)
        limit = self.tracking.log_samples
        table_file = f"eval/{label}/samples.json"
        # a resumed run re-running an evaluation: log_table would append duplicate rows (with its
        # store away, whether it has them cannot be asked)
        if self.resumed and (
            self.spool.pending
            or any(a.path == table_file for a in self.client.list_artifacts(self.run_id, f"eval/{label}"))
        ):
            limit = 0
        if limit > 0 and result.results_path is not None and Path(result.results_path).is_file():
            table = sample_table(Path(result.results_path), list(result.per_function), limit)
            if table["reward"]:
                self._write("table", data=table, artifact_file=table_file)
                page = rows_html(table, f"{label} evaluation: {len(table['reward'])} sample rollouts")
                self._write("text", text=page, artifact_file=f"eval/{label}/samples.html")
                self._pages[f"{label} evaluation: sample rollouts"] = f"eval/{label}/samples.html"

    def _log_eval_input(self, label: str, result: Any) -> None:
        """The examples an evaluation ran on, as the run's dataset input (mlflow.data, context =
        the evaluation label): the UI's Dataset column shows what each run was evaluated on, and
        runs evaluated on the same rows share the dataset's digest. Built here (no store needed),
        sent through the spool as any other call: kept while the store is away."""
        import warnings

        import mlflow.data
        import pandas as pd

        task = result.task or self.env_name
        rows = result.input_rows()
        source = result.dataset_path or result.results_path
        with warnings.catch_warnings():
            # a local path matches two equivalent MLflow source kinds; example ids are never missing
            # (the schema, and its hint, come when the entity is built)
            warnings.filterwarnings("ignore", message="The specified dataset source")
            warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
            dataset = mlflow.data.from_pandas(pd.DataFrame(rows), source=str(source), name=f"{task}-eval")
            entity = dataset._to_mlflow_entity()
        fields = ("name", "digest", "source_type", "source", "schema", "profile")
        self._write("inputs", dataset={f: getattr(entity, f) for f in fields}, context=label)

    def completions_callback(self) -> Any:
        n = int(self.tracking.log_completions)
        if n <= 0:
            return None
        from grpo.tracking.completions import completions_callback

        return completions_callback(self.log_completions, n)

    def log_completions(self, table: Mapping[str, list[Any]], step: int) -> None:
        """Append a logging step's rows to the run's completions table (train/completions.json), and
        write them as the step's readable page (train/completions/step-<step>.html). A resumed run
        skips the steps its MLflow run already has (redone after the checkpoint)."""
        from grpo.tracking.completions import TABLE_FILE, completions_page, page_file

        if self.resumed and step <= self._logged.get(f"{TRAIN_PREFIX}reward", -1):
            return
        self._write("table", data=dict(table), artifact_file=TABLE_FILE)
        self._write("text", text=completions_page(table, step), artifact_file=page_file(step))
        self._pages["training: completions of the last logged step"] = page_file(step)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A file or a directory (its contents) as artifacts of the run."""
        self._has_results = True
        self._write("artifact", path=str(Path(path)), artifact_path=artifact_path)

    def log_tags(self, tags: Mapping[str, Any]) -> None:
        self._log_tags({k: P.tag_value(v) for k, v in tags.items()})

    def finish_run(self, objective: float | None) -> None:
        """Record the run's objective (the last evaluation's mean reward, what a sweeper optimises)."""
        if objective is None:
            return
        self.log_metrics({"objective": float(objective)}, self._last_step)
        self._log_tags({f"{P.TAG_PREFIX}objective": repr(float(objective))})

    def log_policy(self, model: Any, tokenizer: Any, model_path: str | None) -> None:
        """The trained policy as an MLflow model of this run (grpo/tracking/models.py), registered
        under tracking.register_as."""
        from grpo.tracking.models import log_policy

        if self._store_away("the policy"):
            return
        register_as = self.tracking.register_as
        info = log_policy(
            self.uri, self.experiment_id, self.run_id, model, tokenizer, model_path, self.run_dir, register_as
        )
        print(f"mlflow: logged the policy as {info.model_uri}{_registered(register_as, info)}")

    def log_reward_model(self, rm_dir: Path) -> None:
        """The trained reward model's dir as an MLflow model of this run, registered as
        <tracking.register_as>-reward-model."""
        from grpo.tracking.models import REWARD_MODEL_SUFFIX, log_reward_model

        if self._store_away("the reward model"):
            return
        register_as = self.tracking.register_as
        info = log_reward_model(self.uri, self.experiment_id, self.run_id, Path(rm_dir), register_as)
        name = f"{register_as}{REWARD_MODEL_SUFFIX}" if register_as else None
        print(f"mlflow: logged the reward model as {info.model_uri}{_registered(name, info)}")

    def log_plots(self) -> None:
        """plots/train_curves.png (training and validation reward, KL over steps), plots/eval_by_function.png
        (each evaluation's mean per reward function) and, when the run logged more than one language,
        plots/val_by_language.png (val/lang/<code>/mean, one line per language) and
        plots/rewards_by_language.png (per language, each reward function's training mean: with a
        learned RM, its score against the rubric) and, when a learned RM was validated,
        plots/rm_vs_gold_by_language.png (per language, the RM's score and the rubric on the held-out
        rows: where they part, the RM is being hacked), from what the run holds in the store."""
        from grpo.tracking.plots import (
            RM_REWARD,
            by_language,
            plot_eval_by_function,
            plot_reward_curves,
            plot_rewards_by_language,
            plot_train_curves,
        )

        curves = {key: metric_curve(self.client, self.run_id, key) for key in TRAIN_CURVES}
        metrics = with_retry(self.client.get_run, self.run_id).data.metrics
        evals = eval_scores(metrics)
        val = {
            lang: names[""] for lang, names in by_language(list(metrics), VAL_LANGUAGE).items() if "" in names
        }
        rewards = by_language(list(metrics), TRAIN_REWARDS)
        rm_val = by_language(list(metrics), f"{VAL_SCORE}{RM_REWARD}/lang/", "")

        def fetch(name: str) -> list[tuple[int, float]]:
            return metric_curve(self.client, self.run_id, name)

        with tempfile.TemporaryDirectory(prefix="grpo-plots-") as tmp:
            files = []
            if any(curves.values()):
                marks = {
                    label: points[-1]
                    for label in EVAL_MARKS
                    if (points := metric_curve(self.client, self.run_id, f"{EVAL_PREFIX}{label}/mean"))
                }
                files.append(
                    plot_train_curves(
                        curves, Path(tmp) / "train_curves.png", title=self._title(), evals=marks
                    )
                )
            if evals:
                files.append(
                    plot_eval_by_function(evals, Path(tmp) / "eval_by_function.png", title=self._title())
                )
            if len(val) > 1:
                files.append(
                    plot_reward_curves(
                        {lang: fetch(name) for lang, name in val.items()},
                        Path(tmp) / "val_by_language.png",
                        "val/lang/<code>/mean",
                        title=self._title(),
                    )
                )
            if len(rewards) > 1:
                panels = {lang: {fn: fetch(n) for fn, n in names.items()} for lang, names in rewards.items()}
                files.append(
                    plot_rewards_by_language(
                        panels, Path(tmp) / "rewards_by_language.png", title=self._title()
                    )
                )
            if rm_val:
                panels = {
                    lang: {
                        RM_REWARD: fetch(names[""]),
                        "rubric (gold)": fetch(val[lang]) if lang in val else [],
                    }
                    for lang, names in rm_val.items()
                }
                files.append(
                    plot_rewards_by_language(
                        panels, Path(tmp) / "rm_vs_gold_by_language.png", title=self._title()
                    )
                )
            for f in files:
                self._write("artifact", path=str(f), artifact_path="plots")

    # ---- helpers ---------------------------------------------------------------------------------

    def _store_away(self, what: str) -> bool:
        """Whether the store is away (calls are kept): a model is not kept in the spool (MLflow
        logs it through its own calls), so one line says `what` is not logged and where it is."""
        if not self.spool.pending:
            return False
        print(f"mlflow: {what} is not logged as an MLflow model: the tracking store is unreachable "
              f"(its files are in {self.run_dir})")  # fmt: skip
        return True

    def _last_logged_steps(self, run: Any) -> dict[str, int]:
        """Per metric of a run being resumed, the last step it has a value for."""
        return {
            key: max(
                (m.step for m in with_retry(self.client.get_metric_history, run.info.run_id, key)), default=-1
            )
            for key in run.data.metrics
        }

    def _sweep(self, job: JobInfo | None) -> SweepInfo | None:
        """The parent run of this sweep job, if the sweep callback created one in the same store."""
        if job is None or not job.multirun or job.sweep_dir is None:
            return None
        sweep = SweepInfo.read(job.sweep_dir)
        if sweep is None or sweep.tracking_uri != self.uri:
            return None
        return sweep

    def _resumable_run_id(self) -> str | None:
        """The run recorded by the run being resumed, when it lives in this store."""
        resume = self.resume
        if not resume:
            return None
        from hydra.utils import to_absolute_path

        path = RunLayout(to_absolute_path(str(resume))).mlflow_run
        if not path.is_file():
            log.warning("resume: %s has no %s; logging to a new MLflow run", path.parent, path.name)
            return None
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if recorded.get("tracking_uri") != self.uri:
            log.warning(
                "resume: the run was logged to %s, not %s; logging to a new run",
                recorded.get("tracking_uri"),
                self.uri,
            )
            return None
        from mlflow.exceptions import MlflowException

        try:
            with_retry(self.client.get_run, recorded["run_id"])
        except MlflowException:
            log.warning("resume: run %s is not in %s; logging to a new run", recorded["run_id"], self.uri)
            return None
        return str(recorded["run_id"])

    def _run_name(self, job: JobInfo | None, sweep: SweepInfo | None) -> str:
        """tracking.run_name, else what ran, on what, and the overrides that tell it apart (a sweep
        job: those that vary between its jobs); see grpo.tracking.params.run_name."""
        if self.tracking.run_name:
            return self.tracking.run_name
        overrides, limit = (job.overrides if job is not None else []), P.MAX_RUN_NAME
        if sweep is not None and job is not None:
            overrides = P.varied_overrides(job.overrides, sweep.overrides) or [f"job={job.job_num}"]
            limit = P.MAX_KEY_LENGTH  # all that tells the job from its siblings
        return P.run_name(self.stages, self.env_name, self.language, overrides, limit)

    def _start_tags(self, job: JobInfo | None, sweep: SweepInfo | None) -> dict[str, str]:
        tags = {
            f"{P.TAG_PREFIX}run_dir": str(self.run_dir),
            "mlflow.source.name": "python -m grpo",
            "mlflow.source.type": "LOCAL",
            "mlflow.user": _user(),
        }
        commit = P.git_commit()
        if commit:
            tags[f"{P.TAG_PREFIX}git_commit"] = commit
            tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
        if job is not None:
            tags.update(P.choice_tags(job.choices))
            tags[f"{P.TAG_PREFIX}overrides"] = " ".join(job.overrides)
        if job is not None and job.multirun:
            tags[f"{P.TAG_PREFIX}job_num"] = str(job.job_num)
        if sweep is not None and job is not None:
            tags["mlflow.parentRunId"] = sweep.run_id
            tags[f"{P.TAG_PREFIX}sweep_id"] = sweep.sweep_id
            tags[f"{P.TAG_PREFIX}varied"] = json.dumps(P.varied_overrides(job.overrides, sweep.overrides))
        if self.resume:
            tags[f"{P.TAG_PREFIX}resumed_from"] = self.resume
        return {k: P.tag_value(v) for k, v in tags.items()}

    def _log_params(self, params: Mapping[str, str]) -> None:
        if params:
            self._write("params", params=dict(params))

    def _log_tags(self, tags: Mapping[str, str]) -> None:
        if tags:
            self._write("tags", tags=dict(tags))

    def _write(self, op: str, **args: Any) -> None:
        """One write to the run, kept in the spool while the store is unreachable."""
        self._adopt(self.spool.write(self.client, self.run_id, op, **args))

    def _adopt(self, _: Any = None) -> None:
        """A run created late (its store was away as it started) takes the id its kept creation got."""
        if self.run_id is None and self.spool.run_id is not None:
            self.run_id, self.experiment_id = self.spool.run_id, self.spool.experiment_id
            self.client = self.spool.client or self.client
            print(f"mlflow: the run was created as {self.run_id} once the store answered")

    def _write_run_file(self) -> None:
        record = {"run_id": self.run_id, "experiment_id": self.experiment_id, "tracking_uri": self.uri}
        write_json_atomic(RunLayout(self.run_dir).mlflow_run, record)

    def _title(self) -> str:
        run = with_retry(self.client.get_run, self.run_id)
        return run.info.run_name or self.run_id or ""


# ---- pure helpers (tested directly) ------------------------------------------------------------------


def start_system_metrics(run_id: str, uri: str, interval: float, resumed: bool) -> Any:
    """MLflow's own system-metrics monitor on `run_id` (a thread sampling CPU, memory, disk, network
    and, with pynvml and a GPU, the GPU every `interval` seconds; metrics system/<name>, or
    system/<node>/<name> when the run spans several machines: node = this host's name), or None
    when it cannot start (said in one warning line). A resumed run continues its steps."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # its start / stop / no-GPU notes are INFO lines on every run: not the user's business
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        monitor = SystemMetricsMonitor(
            run_id,
            sampling_interval=interval,
            resume_logging=resumed,
            node_id=_node_id(),
            tracking_uri=uri,
        )
        monitor.start()
        return monitor
    except Exception as ex:  # noqa: BLE001 - system metrics must never stop a run
        log.warning("MLflow: system metrics not logged (%s)", " ".join(str(ex).split()))
        return None


def best_effort_finish(monitor: Any) -> None:
    try:
        monitor.finish()
    except Exception as ex:  # noqa: BLE001
        log.warning("MLflow: the system metrics monitor did not stop cleanly: %s", ex)


def _node_id() -> str | None:
    """This host's name when the launch spans several machines (torchrun: WORLD_SIZE processes,
    LOCAL_WORLD_SIZE per machine), else None: one machine needs no node in the metric names."""
    try:
        world, local = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        return None
    return socket.gethostname() if local and world > local else None


def _status(exc: BaseException | None) -> str:
    """MLflow run status for how the `with` block ended."""
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return "FINISHED"
    if isinstance(exc, KeyboardInterrupt):
        return "KILLED"
    return "FAILED"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def eval_scores(metrics: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """{label: {reward function: mean, "(total)": weighted total mean}} from a run's
    eval/<label>/func/<fn> and eval/<label>/mean metrics, labels in baseline, eval, final, best order."""
    scores: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        m = _EVAL_FUNC.match(key)
        if m:
            scores.setdefault(m["label"], {})[m["fn"]] = value
        elif t := _EVAL_TOTAL.match(key):
            scores.setdefault(t["label"], {})[TOTAL_BAR] = value
    order = {label: i for i, label in enumerate(_LABEL_ORDER)}
    return {k: scores[k] for k in sorted(scores, key=lambda x: (order.get(x, len(order)), x))}


def _registered(name: str | None, info: Any) -> str:
    version = getattr(info, "registered_model_version", None)
    return f", registered as {name} version {version}" if name and version is not None else ""


def sample_table(results_path: Path, functions: list[str], limit: int) -> dict[str, list[Any]]:
    """The first `limit` rollouts of results.jsonl as table columns: the prompt's last user message,
    the completion, the total reward and each reward function's score."""
    columns = ["example_id", "rollout_index", "language", "prompt", "completion", "reward", *functions]
    columns += ["num_turns", "truncated"]
    table: dict[str, list[Any]] = {c: [] for c in columns}
    for record in read_jsonl(results_path, limit):
        table["example_id"].append(str(record.get("example_id", "")))
        table["rollout_index"].append(record.get("rollout_index"))
        table["language"].append(record.get("language"))
        table["prompt"].append(last_user_message(record.get("prompt")))
        table["completion"].append(render_messages(record.get("completion")))
        table["reward"].append(record.get("reward"))
        for fn in functions:
            table[fn].append(record.get(fn))
        table["num_turns"].append(record.get("num_turns"))
        table["truncated"].append(record.get("truncated"))
    return table
