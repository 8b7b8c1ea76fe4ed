"""The Python API (grpo/api.py), called the way docs/usage.md calls it: compose with the command's
checks (a bad override raises the line the command prints), run every stage in process and get
the results back (the run folder, the evaluations, per language, the MLflow run, the checkpoints),
the same numbers as `python -m grpo` with the same overrides, a run folder the command resumes,
a refused start that leaves no folder, and a sweep under one MLflow parent run."""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers.grpo_process import run_grpo

from grpo import Composed, RunResult, compose, run, sweep
from grpo.errors import UserError
from grpo.run.checkpoints import is_complete_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

# two GRPO steps of char_target on the tiny model, a small evaluation before and after
QUICK = [
    "+env=char_target",
    "trainer.max_steps=2",
    "trainer.save_steps=1",
    "optimizer.lr=1e-2",
    "trainer.beta=0",
    "eval.num_examples=4",
    "eval.rollouts_per_example=2",
    "trainer.max_completion_length=16",
    "generation.max_tokens_per_turn=16",
    "trainer.mask_truncated_completions=false",
    "trainer.truncated_reward=null",
]


@pytest.fixture
def root(in_process_root):
    return in_process_root


def test_compose_raises_the_line_the_command_prints(root):
    bad = ["+env=alphabet_sort", "trainer.max_stepz=4"]
    with pytest.raises(UserError) as info:
        compose(bad)
    printed = run_grpo(bad, root=root)
    assert printed.returncode == 2 and printed.stderr.strip() == f"error: {info.value}"
    with pytest.raises(UserError, match="several values are a sweep; use grpo.sweep"):
        compose(["+env=alphabet_sort", "optimizer.lr=1e-6,3e-6"])
    composed = compose(["+env=alphabet_sort", "language=sv", "trainer.max_steps=3"])
    assert isinstance(composed, Composed) and composed.settings.trainer.max_steps == 3
    assert composed.choices["language"] == "sv" and composed.choices["env"] == "alphabet_sort"


def test_run_returns_what_it_measured_and_the_command_resumes_its_folder(root):
    result = run(compose(QUICK))
    assert isinstance(result, RunResult) and result.run_dir.is_dir()
    assert result.run_dir.parent.parent == root / "runs"
    # the evaluations, as written in the run folder
    for label in ("baseline", "final"):
        rows = [json.loads(line) for line in (result.run_dir / f"eval_{label}" / "results.jsonl").open()]
        assert result.evals[label].mean == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
    assert result.final == result.evals["final"].mean and result.baseline == result.evals["baseline"].mean
    assert result.gain == pytest.approx(result.final - result.baseline) and result.change is not None
    assert set(result.per_language) == {"en"} and result.per_language["en"] == pytest.approx(result.final)
    # the checkpoints, complete, the last one the final
    assert [c.name for c in result.checkpoints] == ["checkpoint-1", "checkpoint-2"]
    assert all(is_complete_checkpoint(c) for c in result.checkpoints) and result.step == 2
    assert result.final_checkpoint == result.checkpoints[-1] and "reward" in result.metrics
    # the MLflow run, in the store
    with sqlite3.connect(root / "mlflow.db") as con:
        status, name = con.execute(
            "select status, name from runs where run_uuid = ?", (result.mlflow_run_id,)
        ).fetchone()
    assert status == "FINISHED" and name.startswith("train char_target")
    assert f"mlflow_run_id='{result.mlflow_run_id}'" in repr(result)
    # the folder is the command's: `resume=` goes on from its last checkpoint
    resumed = run_grpo([f"resume={result.run_dir}", "trainer.max_steps=3"], root=root)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "step 3/3" in resumed.stdout and "skipping the baseline evaluation" in resumed.stdout


def test_the_command_and_the_api_measure_the_same(root):
    """One path: the same overrides through `python -m grpo` and through run() evaluate the same
    rollouts (seeded sampling, the same rows) to the same reward."""
    overrides = ["+env=alphabet_sort", "stages=[eval]", "tracking=none", "eval.num_examples=4"]
    cli = run_grpo(overrides, root=root)
    assert cli.returncode == 0, cli.stderr[-2000:]
    api = run(overrides)
    line = next(line for line in cli.stdout.splitlines() if line.startswith("reward: mean"))
    assert line.split()[2] == f"{api.final:.4f}"
    assert api.mlflow_run_id is None and api.checkpoints == []


def test_a_refused_run_raises_and_leaves_no_folder(root):
    too_small = ["+env=alphabet_sort", "model=small", "memory.device_gib=0.5", "memory.reserve_gib=0"]
    with pytest.raises(UserError, match="the run does not fit a 0.5 GiB GPU"):
        run(too_small)
    assert not list((root / "runs").glob("*/*")) if (root / "runs").exists() else True
    settings = compose(["+env=alphabet_sort"]).settings
    settings.trainer.per_device_batch_completions = 6  # changed after composing: checked again
    with pytest.raises(UserError, match="per_device_batch_completions=6 is not a multiple"):
        run(settings)


def test_a_sweep_from_python_runs_each_job_under_one_parent_run(root):
    results = sweep([*QUICK, "trainer.max_steps=1", "stages=[train,eval]"], {"optimizer.lr": [1e-3, 1e-2]})
    assert [r.settings.optimizer.lr for r in results] == [1e-3, 1e-2]
    sweep_dir = results[0].run_dir.parent
    assert [r.run_dir.name for r in results] == ["0", "1"] and sweep_dir.parent.parent == root / "multirun"
    with sqlite3.connect(root / "mlflow.db") as con:
        parent = con.execute(
            "select r.run_uuid, r.status from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'grpo.sweep' and t.value = 'true'"
        ).fetchall()
        assert len(parent) == 1 and parent[0][1] == "FINISHED"
        children = con.execute(
            "select r.run_uuid, r.status from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'mlflow.parentRunId' and t.value = ?",
            (parent[0][0],),
        ).fetchall()
    assert sorted(run_id for run_id, _ in children) == sorted(r.mlflow_run_id for r in results)
    assert {status for _, status in children} == {"FINISHED"}
    with pytest.raises(UserError, match="a sweep needs a key with several values"):
        sweep(QUICK)


def test_compose_and_run_are_the_api_functions_whatever_was_imported_before():
    """`grpo.run` and `grpo.compose` are also modules of grpo: in a process that loaded them first
    (every run does), `from grpo import compose, run` must still give the functions."""
    import subprocess
    import sys

    code = (
        "import grpo.run.layout, grpo.run.checkpoints, grpo.compose\n"
        "from grpo import compose, run\n"
        "import grpo, inspect\n"
        "assert callable(run) and not inspect.ismodule(run) and grpo.run is run, run\n"
        "assert not inspect.ismodule(compose) and grpo.compose is compose, compose\n"
        "assert compose(['+env=alphabet_sort']).choices['env'] == 'alphabet_sort'\n"
        "from grpo.run.resume import ResumePlan\n"
        "from grpo.compose import load_settings\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
