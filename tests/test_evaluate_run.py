"""Evaluating a trained run (grpo/run/trained.py): `stages=[eval] model.path=<run folder>` picks its
final or best checkpoint and says which, in one line; the evaluation headers name the model they
scored. On a real LoRA run of the tiny model (`python -m grpo`, real processes for the CLI)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers.grpo_process import CHAR_TARGET_TRAIN, run_grpo

from grpo.cli.preflight import check_command
from grpo.errors import UserError
from grpo.models import load_policy
from grpo.run.layout import HYDRA_DIR, RESULTS_FILE

# the char_target run of the process tests, evaluated on 3 examples x 2 rollouts
EVAL = [
    *CHAR_TARGET_TRAIN,
    "eval.num_examples=3",
    "eval.rollouts_per_example=2",
    "eval.show_examples=false",
    "tracking=none",
]
# 3 LoRA steps, each validated and saved: the best checkpoint is recorded (grpo_best.json)
TRAIN = [
    "stages=[train,eval]",
    "trainer.max_steps=3",
    "trainer.eval_steps=1",
    "trainer.keep_best=true",
    "trainer.save_steps=1",
    "trainer.val_num_examples=3",
    "trainer.val_rollouts_per_example=2",
    "optimizer.lr=5e-2",  # the adapter moves the policy: its checkpoint is not the base
    "model.lora.enabled=true",
]


def grpo(args: list[str], root: Path) -> subprocess.CompletedProcess:
    return run_grpo(args, root=root, cwd=root, timeout=600)


def runs(root: Path) -> list[Path]:
    return sorted(root.glob("runs/*/*"))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> tuple[Path, str]:
    """A finished LoRA run folder, and what its command printed."""
    root = tmp_path_factory.mktemp("trained")
    proc = grpo([*EVAL, *TRAIN], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = runs(root)
    return run_dir, proc.stdout


def rewards(eval_dir: Path) -> list[tuple[int, str, float]]:
    rows = [json.loads(line) for line in (eval_dir / RESULTS_FILE).read_text(encoding="utf-8").splitlines()]
    return [(r["example_id"], r["completion"], r["reward"]) for r in rows]


def header_model(stdout: str, label: str) -> str:
    """The `model:` line of the evaluation `label` in a run's output."""
    after = stdout.split(f"--- Evaluation ({label}) ---", 1)[1]
    return next(line for line in after.splitlines() if line.startswith("model: "))


@pytest.mark.slow
def test_the_final_and_best_headers_name_the_checkpoints_they_scored(lora_run):
    run_dir, stdout = lora_run
    best = json.loads((run_dir / "checkpoints" / "grpo_best.json").read_text(encoding="utf-8"))
    # not the starting weights (model: tiny): the trained policy's own checkpoints
    assert header_model(stdout, "final") == f"model: {run_dir / 'checkpoints' / 'checkpoint-3'} (hf)"
    if best["global_step"] != 3:
        assert header_model(stdout, "best") == f"model: {run_dir / 'checkpoints' / best['checkpoint']} (hf)"


@pytest.mark.slow
def test_a_run_folder_is_evaluated_at_its_final_checkpoint(lora_run, tmp_path):
    run_dir, _ = lora_run
    proc = grpo([*EVAL, "stages=[eval]", f"model.path={run_dir}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert first == (
        f"model.path={run_dir}: a grpo run folder; evaluating its final checkpoint checkpoints/checkpoint-3 "
        "(step 3, a LoRA adapter on the run's base model)"
    )
    assert header_model(proc.stdout, "eval") == f"model: {run_dir / 'checkpoints' / 'checkpoint-3'} (hf)"
    # the same rows, seeds and weights as the run's own final evaluation of its trained policy
    (evaluated,) = runs(tmp_path)
    assert rewards(evaluated / "eval") == rewards(run_dir / "eval_final")


@pytest.mark.slow
def test_the_runs_evaluation_of_its_best_checkpoint_reproduces_afresh(lora_run, tmp_path):
    """The run's own `eval_best` (in the process that trained it) and a fresh evaluation of
    `model.checkpoint=best` score the same weights: the same completions and rewards."""
    run_dir, _ = lora_run
    best = json.loads((run_dir / "checkpoints" / "grpo_best.json").read_text(encoding="utf-8"))
    assert best["global_step"] != 3  # the fixture's validation peaks before the last step
    proc = grpo([*EVAL, "stages=[eval]", f"model.path={run_dir}", "model.checkpoint=best"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (evaluated,) = runs(tmp_path)
    assert rewards(evaluated / "eval") == rewards(run_dir / "eval_best")
    assert rewards(run_dir / "eval_best") != rewards(run_dir / "eval_final")


@pytest.mark.slow
def test_model_checkpoint_best_and_a_checkpoint_dir(lora_run):
    run_dir, _ = lora_run
    best = json.loads((run_dir / "checkpoints" / "grpo_best.json").read_text(encoding="utf-8"))
    checked = check_command([*EVAL, "stages=[eval]", f"model.path={run_dir}", "model.checkpoint=best"])
    trained = checked.trained
    assert (
        trained.checkpoint == run_dir / "checkpoints" / best["checkpoint"]
        and trained.step == best["global_step"]
    )
    assert (
        f"evaluating its best checkpoint checkpoints/{best['checkpoint']} (step {best['global_step']}"
        in trained.line()
    )
    # the settings load the run's own base (model=tiny's random weights) with the adapter
    model = checked.settings.model
    assert (model.source, model.adapter, model.lora.enabled) == ("random", str(trained.checkpoint), False)
    # and the adapter is loaded: the weights are not the base's
    with_adapter, _ = load_policy(model)
    base, _ = load_policy(dataclasses.replace(model, adapter=None))
    assert any(
        not torch.equal(a, b) for a, b in zip(with_adapter.parameters(), base.parameters(), strict=True)
    )
    # a checkpoint-N dir of a run is taken as it is (a LoRA one works as the run folder does)
    direct = check_command([*EVAL, "stages=[eval]", f"model.path={run_dir / 'checkpoints' / 'checkpoint-3'}"])
    assert (
        direct.settings.model
        == check_command([*EVAL, "stages=[eval]", f"model.path={run_dir}"]).settings.model
    )
    assert direct.trained.line() == (
        f"model.path={run_dir / 'checkpoints' / 'checkpoint-3'}: checkpoint of the grpo run {run_dir} "
        "(step 3, a LoRA adapter on the run's base model)"
    )


@pytest.mark.slow
def test_a_run_folder_without_the_checkpoint_asked_for_is_one_line_and_exit_2(lora_run, tmp_path):
    run_dir, _ = lora_run
    # a run stopped before its first save: its saved config, no checkpoint
    empty = tmp_path / "stopped"
    shutil.copytree(run_dir / HYDRA_DIR, empty / HYDRA_DIR)
    proc = grpo([*EVAL, "stages=[eval]", f"model.path={empty}"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: model.path={empty}: a grpo run folder with no complete checkpoint under checkpoints/; "
        "a run writes one every trainer.save_steps steps and at the end of training"
    ]
    assert not runs(tmp_path)  # refused before any run folder was made
    with pytest.raises(UserError, match=r"model.checkpoint=best: the run recorded no best checkpoint"):
        check_command([*EVAL, "stages=[eval]", f"model.path={empty}", "model.checkpoint=best"])
    with pytest.raises(UserError, match=r"model.checkpoint=best picks a checkpoint of a trained run"):
        check_command([*EVAL, "stages=[eval]", "model.checkpoint=best"])
    with pytest.raises(UserError, match=r"model.checkpoint=last is not one of final, best"):
        check_command([*EVAL, "stages=[eval]", f"model.path={run_dir}", "model.checkpoint=last"])


def _serve(model_path: Path, cwd: Path) -> tuple[str, dict, str]:
    """`python -m grpo.serve model.path=<model_path> serve.port=0` asked one greedy chat request,
    then stopped with Ctrl-C: the line it printed first, the reply, and the rest of its output."""
    import os
    import re
    import signal
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo.serve", f"model.path={model_path}", "serve.port=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        cwd=cwd,
    )
    try:
        first = proc.stdout.readline().strip()
        listening = first if first.startswith("grpo.serve:") else proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+", listening)
        assert match, (first, listening, proc.stderr.read() if proc.poll() is not None else "")
        url = match.group(0)
        model_id = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        body = {
            "model": model_id,
            "messages": [{"role": "user", "content": "Sort: b, c, a"}],
            "max_tokens": 8,
            "temperature": 0,
        }
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
        proc.send_signal(signal.SIGINT)
        # read through the text buffers: communicate() reads the pipes below them, and would lose
        # the lines readline() has already buffered (the example request after the listening line)
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return first, reply, out


@pytest.mark.slow
def test_a_run_folder_is_served_at_its_final_checkpoint_under_the_runs_model_name(lora_run, tmp_path):
    """docs/serving.md's command: the run folder as model.path serves the checkpoint an evaluation
    of the run would load (said first), named as the run's model; the same answer as serving that
    checkpoint folder itself."""
    from grpo.run.trained import saved_model

    run_dir, _ = lora_run
    final = run_dir / "checkpoints" / "checkpoint-3"
    first, reply, out = _serve(run_dir, tmp_path)
    assert first == (
        f"model.path={run_dir}: a grpo run folder; serving its final checkpoint checkpoints/checkpoint-3 "
        "(step 3, a LoRA adapter on the run's base model)"
    )
    assert reply["model"] == saved_model(run_dir).name
    assert 1 <= reply["usage"]["completion_tokens"] <= 8
    # after its first lines, a request in the run's env's own prompt format: a prompt its evaluation asked
    line = next(x for x in out.splitlines() if "a request it knows: " in x)
    request = json.loads(line.split("a request it knows: ", 1)[1])
    first_row = json.loads(
        (run_dir / "eval_final" / RESULTS_FILE).read_text(encoding="utf-8").splitlines()[0]
    )
    assert request["messages"] == first_row["prompt"] and request["messages"][0]["role"] == "user"
    assert request["model"] == reply["model"] and request["max_tokens"] > 0
    _, direct, _ = _serve(final, tmp_path)
    assert reply["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]
