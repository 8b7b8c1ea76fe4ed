"""Hostile inputs, second round: damaged files a run reads (a store file that is not a database, a
truncated store, a model folder without weights or with its weights cut short, a damaged latest
checkpoint), hostile text in a names file, malformed demonstrations, resume= on a file or an empty
folder, a sweep over keys that do not exist, non-finite numbers. Each is a one-line UserError (the
front door prints it as one line with exit 2: checked here in real processes for the preflight's
kind), odd but valid text runs normally, and nothing already written changes."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo

from grpo.cli.preflight import check_command
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.run.checkpoints import checkpoint_problem, is_complete_checkpoint, mark_checkpoint_complete
from grpo.run.resume import ResumePlan

QUICK = [
    "model=tiny",
    "stages=[eval]",
    "eval.num_examples=2",
    "eval.rollouts_per_example=1",
    "eval.show_examples=false",
    "generation.max_tokens_per_turn=16",
    "trainer.max_completion_length=48",
]
SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "grpo" / "assets" / "small_alphabet_sort_sft"


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: ")
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- damaged files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "truncated"])
def test_a_store_file_that_is_not_a_database_is_one_line_and_left_as_is(kind, tmp_path):
    from grpo.tracking.store import make_client

    db = tmp_path / "store.db"
    if kind == "text":  # refused by the preflight
        db.write_text("these are my notes, not a database\n")
        before = digest(db)
        line = one_error_line(
            run_grpo(
                ["+env=alphabet_sort", *QUICK, "tracking=mlflow", f"tracking.uri=sqlite:///{db}"],
                root=tmp_path / "outputs",
                cwd=tmp_path,
            )
        )
        assert str(db) in line and "is not an SQLite database" in line
    else:  # a real MLflow store cut short (its header survives): refused as the run opens its store
        make_client(f"sqlite:///{tmp_path / 'whole.db'}")
        db.write_bytes((tmp_path / "whole.db").read_bytes()[:5000])
        before = digest(db)
        with pytest.raises(UserError) as caught:
            make_client(f"sqlite:///{db}")
        assert str(caught.value).startswith(
            f"the MLflow store {db} is damaged (database disk image is malformed)"
        )
    assert digest(db) == before


def test_a_model_folder_without_weights_or_with_cut_weights_is_one_line(tmp_path):
    from grpo.models import load_policy

    no_weights = tmp_path / "no_weights"
    shutil.copytree(SHIPPED_MODEL, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = load_settings(["+env=alphabet_sort", "model=small_alphabet_sort", f"model.path={no_weights}"])
    with pytest.raises(UserError, match="could not be loaded.*model.safetensors"):
        load_policy(cfg.model)

    cut = tmp_path / "cut"
    shutil.copytree(SHIPPED_MODEL, cut)
    weights = cut / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    before = digest(weights)
    cfg = load_settings(["+env=alphabet_sort", "model=small_alphabet_sort", f"model.path={cut}"])
    with pytest.raises(UserError) as caught:
        load_policy(cfg.model)
    assert "\n" not in str(caught.value) and "its weights file is damaged or cut short" in str(caught.value)
    assert digest(weights) == before


def fake_checkpoint(root: Path, step: int, weights: bytes = b"w" * 64) -> Path:
    path = root / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(weights)
    (path / "optimizer.pt").write_bytes(b"o" * 32)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    mark_checkpoint_complete(path, step)
    return path


def test_a_damaged_latest_checkpoint_is_skipped_saying_so(tmp_path, capsys):
    earlier = fake_checkpoint(tmp_path, 2)
    latest = fake_checkpoint(tmp_path, 4)
    assert is_complete_checkpoint(latest)
    # the disk cut the latest weights short after the checkpoint was marked complete
    with open(latest / "model.safetensors", "r+b") as f:
        f.truncate(10)
    assert checkpoint_problem(latest) == "model.safetensors has 10 of 64 bytes (damaged or cut short)"
    plan = ResumePlan.read(tmp_path)
    err = capsys.readouterr().err
    assert plan.checkpoints["train"] == earlier
    assert err.count("\n") == 2  # the skipped checkpoint, and the missing saved config
    assert f"resume: skipping {latest} (model.safetensors has 10 of 64 bytes" in err
    assert "continuing from checkpoint-2" in err
    # a marker written before sizes were recorded is checked by names only, as before
    marker = json.loads((earlier / "grpo_checkpoint_complete.json").read_text())
    del marker["sizes"]
    (earlier / "grpo_checkpoint_complete.json").write_text(json.dumps(marker))
    assert is_complete_checkpoint(earlier)


# ---- hostile text ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_hostile_names_run_normally(tmp_path):
    names = [
        "Al\x00ice",  # NUL
        "Bo\x07b\x1b[31m",  # a bell and a terminal escape
        "Car\u200bol",  # zero-width space
        "\u202eDave",  # right-to-left override
        "\u05d0\u05d1\u05d2",  # Hebrew, right to left
        "Fr" + "a" * 5000 + "nk",  # thousands of characters
        *[f"Name{i}" for i in range(20)],
    ]
    path = tmp_path / "names.txt"
    path.write_text("\n".join(names) + "\n", encoding="utf-8")
    proc = run_grpo(
        ["+env=alphabet_sort", *QUICK, f"env.names_source={path}", "tracking=none"],
        root=tmp_path / "outputs",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "reward: mean" in proc.stdout
    # the rows carry the names as given (whitespace normalised), each a real answer to sort
    cfg = load_settings(["+env=alphabet_sort", f"env.names_source={path}"])
    rows = build_env(cfg.env, cfg.language).rows("eval", 50)
    used = {n for r in rows for turn in r.info["turn_names"] for n in turn}
    assert used and used <= {" ".join(n.split()) for n in names}


def test_binary_junk_as_names_is_one_line(tmp_path):
    junk = tmp_path / "names.txt"
    junk.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4000)))
    cfg = load_settings(["+env=alphabet_sort", f"env.names_source={junk}"])
    with pytest.raises(UserError, match=r"env.names_source .*: cannot read it"):
        build_env(cfg.env, cfg.language)


def test_malformed_demonstrations_are_one_line(tmp_path):
    from grpo.sft.data import load_demonstrations

    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{not json\n{"messages": "x"}\n')
    cfg = load_settings(["+env=alphabet_sort", "stages=[sft]", f"sft.data_path={demos}"])
    with pytest.raises(UserError) as caught:
        load_demonstrations(cfg, build_env(cfg.env, cfg.language))
    assert "3 bad row(s), nothing was trained" in str(caught.value) and "line 2: bad JSON" in str(
        caught.value
    )


# ---- resume, sweeps, numbers (the preflight: no process needed) ----------------------------------------


def test_resume_on_a_file_or_an_empty_folder(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no such directory"):
        check_command(["+env=alphabet_sort", f"resume={a_file}"])
    with pytest.raises(UserError, match="no complete checkpoint under"):
        check_command(["+env=alphabet_sort", f"resume={empty}"])
    assert a_file.read_text() == "x" and not list(empty.iterdir())


def sweep_file(root: Path, name: str, params: str) -> list[str]:
    """A sweep file of the user's (found through hydra.searchpath) and the overrides that use it."""
    (root / "sweep").mkdir(exist_ok=True)
    text = "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n" + params
    (root / "sweep" / f"{name}.yaml").write_text(text)
    return [f"hydra.searchpath=[file://{root}]", f"+sweep={name}"]


def test_a_sweep_over_keys_that_do_not_exist(tmp_path):
    typo = sweep_file(tmp_path, "typo", "      optimizer.lrr: 1e-3,1e-4\n      trainer.beta: 0.0,0.1\n")
    with pytest.raises(UserError) as caught:
        check_command(["+env=alphabet_sort", *typo])
    assert str(caught.value) == (
        "hydra.sweeper.params: the sweep searches over optimizer.lrr, which is not a config key; "
        "did you mean optimizer.lr?"
    )
    nested = sweep_file(tmp_path, "nested", "      nope.deeper: 1,2\n")
    with pytest.raises(UserError, match="searches over nope.deeper, which is not a config key$"):
        check_command(["+env=alphabet_sort", *nested])
    # Hydra takes no search space from the command line: the form that works is named
    for cli in (
        ["hydra.sweeper.params.optimizer.lr=1e-3,1e-4"],
        ["hydra/sweeper=optuna", "hydra.sweeper.params.trainer.nosuchkey=range(1,3)"],
    ):
        with pytest.raises(UserError, match="Hydra takes no search space from the command line; sweep with"):
            check_command(["+env=alphabet_sort", *cli], multirun=True)


def test_sweeps_over_real_keys_and_groups_pass(tmp_path):
    params = "      optimizer.lr: 1e-3,1e-4\n      +trainer.extra.x: 1,2\n      model: tiny,small\n"
    check_command(["+env=alphabet_sort", *sweep_file(tmp_path, "fine", params)])
    for preset in ("lr_beta_grid", "optuna_lr_beta", "loss_types"):
        check_command(["+env=alphabet_sort", f"+sweep={preset}"])


@pytest.mark.parametrize(
    "override",
    ["optimizer.lr=nan", "trainer.beta=inf", "eval.temperature=-inf", "reward_model.weight=inf",
     "env.similarity_power=nan", "+trainer.extra.top_entropy_quantile=nan"],
)  # fmt: skip
def test_non_finite_numbers_are_refused(override):
    key = override.lstrip("+").split("=")[0]
    with pytest.raises(UserError, match=rf"^{key}=-?(nan|inf): a setting must be a finite number$"):
        check_command(["+env=alphabet_sort", override])
