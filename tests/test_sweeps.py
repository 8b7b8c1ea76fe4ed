"""Sweeps end to end through `python -m grpo -m` on the tiny model, into a temp SQLite store:
parent and child runs, failing jobs, parallel joblib jobs, the Optuna preset, tracking=none, and
the sweep presets shipping in the package (conf/sweep -> ../sweeps)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo
from mlflow import MlflowClient

from grpo.compose import compose
from grpo.tracking.sweep_comparison import child_runs

REPO = Path(__file__).resolve().parents[1]


def tiny(
    stages: str = "[train,eval]", batch: int = 2, group: int | None = 2, tracking: str = "mlflow"
) -> list[str]:
    """One GRPO step on `batch` completions in groups of `group` (None: the sweep's choice), a
    1 x 1 evaluation, 8 tokens per turn."""
    return [
        "+env=alphabet_sort",
        f"tracking={tracking}",
        f"stages={stages}",
        "trainer.max_steps=1",
        *([f"trainer.num_generations={group}"] if group else []),
        f"trainer.per_device_batch_completions={batch}",
        "eval.num_examples=1",
        "eval.rollouts_per_example=1",
        "generation.max_tokens_per_turn=8",
        "trainer.max_completion_length=48",
    ]


def store(root: Path) -> MlflowClient:
    db = root / "mlflow.db"
    assert db.is_file(), f"no MLflow store at {db}"
    return MlflowClient(f"sqlite:///{db}")


def the_sweep(client: MlflowClient):
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(experiments, filter_string="tags.`grpo.sweep` = 'true'")
    assert len(parents) == 1
    return parents[0], child_runs(client, parents[0])


def artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for a in client.list_artifacts(run_id, path):
        found |= artifacts(client, run_id, a.path) if a.is_dir else {a.path}
    return found


@pytest.mark.slow
def test_grid_sweep_in_two_parallel_jobs_logs_one_parent_and_a_child_per_job(tmp_path):
    # two joblib worker processes train at the same time and write to the same SQLite store
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    proc = run_grpo(
        ["-m", *tiny(), "optimizer.lr=1e-6,3e-6", *parallel, f"output_root={tmp_path}"],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "database is locked" not in proc.stderr
    client = store(tmp_path)
    parent, children = the_sweep(client)

    assert parent.info.status == "FINISHED"
    assert parent.data.tags["grpo.sweep.result"] == "all 2 jobs finished"
    assert parent.data.params["sweep.optimizer.lr"] == "1e-6,3e-6"
    assert parent.info.run_name == "sweep lr=1e-6,3e-6"  # what varies, short enough for the runs list
    assert client.get_experiment(parent.info.experiment_id).name == "grpo-alphabet_sort"
    # what ran, on what, then what tells the job apart
    assert [c.info.run_name for c in children] == [
        "train alphabet_sort en · lr=1e-06",
        "train alphabet_sort en · lr=3e-06",
    ]
    for num, (child, lr) in enumerate(zip(children, ["1e-06", "3e-06"], strict=True)):
        tags, params, metrics = child.data.tags, child.data.params, child.data.metrics
        assert child.info.status == "FINISHED"
        assert child.info.experiment_id == parent.info.experiment_id
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["grpo.job_num"] == str(num) and tags["grpo.sweep_id"] == parent.data.tags["grpo.sweep_id"]
        assert tags["grpo.choice.model"] == "tiny" and tags["grpo.choice.hydra/launcher"] == "joblib"
        assert f"optimizer.lr={lr}" in tags["grpo.overrides"].split()
        assert params["cfg.optimizer.lr"] == lr and params["cfg.trainer.max_steps"] == "1"
        assert len(params) == len(children[0].data.params) > 100
        assert [m.step for m in client.get_metric_history(child.info.run_id, "train/reward")] == [1]
        assert set(metrics) == set(children[0].data.metrics)  # nothing lost in either process
        for key in ("train/loss", "train/kl", "train/rewards/alphabet_sort_reward/mean", "eval/final/mean"):
            assert key in metrics, key
        assert metrics["objective"] == metrics["eval/final/mean"]
        assert client.get_metric_history(child.info.run_id, "eval/final/mean")[0].step == 1
        assert artifacts(client, child.info.run_id) >= {
            "config.yaml",
            "eval/final/results.jsonl",
            "eval/final/metadata.json",
            "eval/final/samples.json",
            "plots/train_curves.png",
            "plots/eval_by_function.png",
        }
    assert artifacts(client, parent.info.run_id) >= {"compare/reward_curves.png", "compare/summary.txt"}
    assert "sweep lr=1e-6,3e-6" in proc.stdout and "FINISHED" in proc.stdout  # the closing table

    # the same comparison on demand; the latest sweep is found without an id
    out_png = tmp_path / "cmp.png"
    cmp = run_grpo(
        ["--uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--out", str(out_png), "--no-log"],
        cwd=tmp_path,
        timeout=600,
        module="grpo.cli.compare",
    )
    assert cmp.returncode == 0, cmp.stderr
    table = [line.split() for line in cmp.stdout.splitlines() if line.startswith(("0 ", "1 "))]
    assert [row[:3] for row in table] == [["0", "1e-06", "FINISHED"], ["1", "3e-06", "FINISHED"]]
    assert out_png.stat().st_size > 1000


@pytest.mark.slow
def test_failing_jobs_are_failed_children_and_the_sweep_exits_non_zero(tmp_path):
    # job 0 runs; the pretrained model (a hub id, offline) cannot load in jobs 2-3 (fails inside the
    # run) and the names file is missing in jobs 1 and 3 (fails while building the env, before the
    # run's tracker starts)
    overrides = tiny(stages="[eval]")
    sweep = ["model=tiny,qwen2_5_0_5b_instruct", "env.names_source=null,/nonexistent/names.txt"]
    proc = run_grpo(["-m", *overrides, *sweep, f"output_root={tmp_path}"], cwd=tmp_path, timeout=600)
    assert proc.returncode != 0
    parent, children = the_sweep(store(tmp_path))

    statuses = {c.info.run_name.removeprefix("eval alphabet_sort en · "): c.info.status for c in children}
    assert statuses == {
        "model=tiny names_source=null": "FINISHED",
        "model=tiny names_source=names.txt": "FAILED",  # a path by its last part
        "model=qwen2_5_0_5b_instruct names_source=null": "FAILED",
        "model=qwen2_5_0_5b_instruct names_source=names.txt": "FAILED",
    }
    errors = {c.info.run_name.split(" · ")[1]: c.data.tags.get("grpo.error", "") for c in children}
    assert "names.txt" in errors["model=tiny names_source=names.txt"]
    assert "Qwen/Qwen2.5-0.5B-Instruct" in errors["model=qwen2_5_0_5b_instruct names_source=null"]
    assert "eval/eval/mean" in children[0].data.metrics
    assert parent.info.status == "FAILED"
    assert parent.data.tags["grpo.sweep.failed_jobs"] == "3"
    assert parent.data.tags["grpo.sweep.result"].startswith("3 of 4 jobs failed")


@pytest.mark.slow
def test_optuna_preset_runs_trials_as_children(tmp_path):
    import optuna

    from grpo.tracking.optuna_storage import rdb_storage

    optuna_tiny = [*tiny(batch=8, group=None), "+sweep=optuna_lr_beta"]
    proc = run_grpo(
        [*optuna_tiny, "hydra.sweeper.n_trials=2", f"output_root={tmp_path}"], cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = store(tmp_path)
    parent, children = the_sweep(client)
    assert parent.info.status == "FINISHED" and parent.data.tags["grpo.choice.hydra/sweeper"] == "optuna"
    assert len(children) == 2 and all(c.info.status == "FINISHED" for c in children)
    for child in children:  # each trial's name is its sampled values
        assert child.info.run_name.startswith("train alphabet_sort en · ") and "lr=" in child.info.run_name
        assert "num_generations=" in child.info.run_name  # a sweep job's name keeps all it varies

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.load_study(study_name="grpo-alphabet_sort-lr-beta", storage=rdb_storage(url))
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(trials) == 2
    # the objective Optuna maximised is each job's final evaluation mean reward
    assert sorted(t.value for t in trials) == sorted(c.data.metrics["eval/final/mean"] for c in children)


def test_optuna_sqlite_study_resumes(tmp_path):
    """The sweeper reopens its study with load_if_exists=True: a second process sees every trial of
    the first (optuna 2.10's own RDBStorage fails here under SQLAlchemy 2 without the stamp)."""
    import optuna

    from grpo.tracking.optuna_storage import rdb_storage

    url = f"sqlite:///{tmp_path / 'sub' / 'optuna.db'}"
    study = optuna.create_study(
        study_name="s", storage=rdb_storage(url), direction="maximize", load_if_exists=True
    )
    for x in (0.2, 0.7):
        trial = study.ask()
        trial.suggest_float("lr", 1e-7, 1e-4, log=True)
        study.tell(trial, x)
    again = optuna.create_study(
        study_name="s", storage=rdb_storage(url), direction="maximize", load_if_exists=True
    )
    assert [t.value for t in again.trials] == [0.2, 0.7] and again.best_value == 0.7
    assert again.ask().number == 2


@pytest.mark.slow
def test_tracking_none_creates_no_store(tmp_path):
    proc = run_grpo(
        ["-m", *tiny(stages="[eval]", tracking="none"), "seed=0,1", f"output_root={tmp_path}"],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.rglob("mlflow.db")) and not list(tmp_path.rglob("mlartifacts"))
    assert not list(tmp_path.rglob("mlflow_*.json"))
    assert len(list(tmp_path.rglob("results.jsonl"))) == 2  # the jobs did run


def test_presets_compose_as_multirun_sweeps():
    grid = compose(["+env=alphabet_sort", "+sweep=lr_beta_grid"], return_hydra_config=True)
    assert str(grid.hydra.mode) == "RunMode.MULTIRUN"
    assert dict(grid.hydra.sweeper.params) == {"optimizer.lr": "1e-6,3e-6,1e-5", "trainer.beta": "0.0,0.04"}
    assert list(grid.stages) == ["eval", "train", "eval"]
    losses = compose(["+env=alphabet_sort", "+sweep=loss_types"], return_hydra_config=True)
    assert dict(losses.hydra.sweeper.params) == {"trainer": "grpo,dr_grpo,dapo"}
    opt = compose(["+env=alphabet_sort", "+sweep=optuna_lr_beta"], return_hydra_config=True)
    assert opt.hydra.sweeper._target_.endswith("OptunaSweeper") and opt.hydra.sweeper.direction == "maximize"
    assert set(opt.hydra.sweeper.params) == {"optimizer.lr", "trainer.beta", "trainer.num_generations"}
    assert opt.hydra.sweeper.storage.url.endswith("/optuna.db")
    for path in (REPO / "sweeps").glob("*.yaml"):  # every preset says how to run it
        assert f"+sweep={path.stem}" in path.read_text()


@pytest.mark.slow
def test_the_wheel_ships_every_module_and_sweep_preset(tmp_path):
    assert (REPO / "conf" / "sweep").resolve() == (REPO / "sweeps").resolve()
    # build from a copy: an in-tree build would write build/ and *.egg-info into the checkout
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", "outputs", "build", "*.egg-info", "__pycache__"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "-w",
            str(tmp_path),
            "--no-deps",
            "--no-build-isolation",
            "-q",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("grpo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for preset in (REPO / "sweeps").glob("*.yaml"):
        assert f"grpo/conf/sweep/{preset.name}" in names
    # every module of the package, in every subpackage (pyproject.toml lists them)
    modules = {str(f.relative_to(REPO)) for f in (REPO / "grpo").rglob("*.py")}
    assert modules and modules <= names, sorted(modules - names)


@pytest.mark.slow
def test_submitit_local_sweep_logs_children_under_one_parent_and_fails_with_a_failed_job(tmp_path):
    # each job in its own process started by submitit (+launcher=submitit_local, gpus_per_node=0);
    # the second job's model is a hub id, which cannot load offline: it fails inside its process
    # (a sweep whose jobs all finish closes its parent FINISHED: the joblib sweeps above)
    proc = run_grpo(
        [
            "-m",
            *tiny(stages="[eval]"),
            "+launcher=submitit_local",
            "model=tiny,qwen2_5_0_5b_instruct",
            f"output_root={tmp_path}",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode != 0
    parent, children = the_sweep(store(tmp_path))
    statuses = {c.info.run_name: c.info.status for c in children}
    assert statuses == {
        "eval alphabet_sort en · model=tiny": "FINISHED",
        "eval alphabet_sort en · model=qwen2_5_0_5b_instruct": "FAILED",
    }
    assert parent.info.status == "FAILED" and parent.data.tags["grpo.sweep.failed_jobs"] == "1"
    finished = next(c for c in children if c.info.status == "FINISHED")
    assert "eval/eval/mean" in finished.data.metrics
    assert len(list(tmp_path.glob("multirun/*/*/.submitit"))) == 1  # the jobs really went through submitit


@pytest.mark.parametrize("preset", ["submitit_local", "slurm", "slurm_multigpu", "ray_local", "ray_cluster"])
def test_launcher_presets_compose(preset):
    """Every launcher preset composes with the project's config (the Ray ones need the ray extra,
    which pulls ray and pins cloudpickle<3, so CI has only the submitit plugin installed)."""
    if preset.startswith("ray"):
        pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="pip install 'grpo[ray]'")
    cfg = compose(["+env=alphabet_sort", f"+launcher={preset}"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    if preset.startswith("ray"):
        assert launcher._target_.endswith("RayLauncher") and "address" in launcher.ray.init
    else:
        kind = "LocalLauncher" if preset == "submitit_local" else "SlurmLauncher"
        assert launcher._target_.endswith(kind)
        assert launcher.timeout_min > 0 and launcher.tasks_per_node >= 1
    if preset == "slurm_multigpu":
        assert launcher.tasks_per_node == launcher.gpus_per_node > 1  # one rank per GPU


@pytest.mark.slow
def test_submitit_job_of_two_tasks_trains_data_parallel(tmp_path):
    # what +launcher=slurm_multigpu does on a cluster, on CPU: each job is 2 submitit tasks, each
    # task one rank (the torch distributed environment exported from submitit's), DDP over gloo; one
    # job (several jobs through submitit: the sweep above)
    args = ["-m", *tiny(stages="[train,eval]", batch=4), "+launcher=submitit_local", "hydra.launcher.tasks_per_node=2",
            "seed=1"]  # fmt: skip
    proc = run_grpo(
        [*args, f"output_root={tmp_path}"],
        cwd=tmp_path,
        timeout=600,
        env_extra={"ACCELERATE_USE_CPU": "true"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parent, children = the_sweep(store(tmp_path))
    assert parent.info.status == "FINISHED" and len(children) == 1  # one MLflow run per job, not per task
    assert all(c.info.status == "FINISHED" for c in children)
    logs = "".join(p.read_text() for p in tmp_path.glob("multirun/*/*/.submitit/*/*_log.out"))
    sums = re.findall(r"\[train\] rank (\d)/2: weights checksum (\S+)", logs)
    assert sorted(r for r, _ in sums) == ["0", "1"]
    assert len({c for _, c in sums}) == 1  # the two ranks agree
