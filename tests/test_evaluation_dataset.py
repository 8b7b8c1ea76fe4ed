"""Evaluations as datasets: eval.save_dataset round-trips results.jsonl, eval.push_to_hub fails in
one line offline with the local files kept, and MLflow records what each run was evaluated on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from datasets import load_from_disk
from helpers.grpo_process import run_grpo
from mlflow import MlflowClient
from test_evaluation import ScriptedBackend, read_results

from grpo.cli.checks import check
from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.errors import UserError
from grpo.evaluation.dataset import DATASET_DIR, eval_input_rows
from grpo.evaluation.evaluator import RESULTS_FILE, evaluate
from grpo.evaluation.setup import EvalSetup


def _wrong(reference: str) -> str:
    return reference[::-1] + " <answer>"


@pytest.mark.parametrize(
    "env_args",
    [
        # one turn, a ground-truth answer in info
        ["+env=arithmetic"],
        # several turns, nested ground truth (lists of lists), no info["answer"]
        ["+env=alphabet_sort", "env.min_turns=2", "env.max_turns=3", "language=de"],
    ],
)
def test_saved_dataset_round_trips_results_jsonl(tmp_path: Path, env_args: list[str], capsys) -> None:
    cfg = load_settings(
        [*env_args, "eval.num_examples=3", "eval.rollouts_per_example=2", "eval.save_dataset=true"]
    )
    env = build_env(cfg.env, cfg.language)
    plan = [[True, False], [False, False], [True, True]]
    result = evaluate(
        EvalSetup.of(cfg), env, ScriptedBackend(env, env.rows("eval", 3), plan, _wrong), tmp_path
    )

    records = read_results(tmp_path / RESULTS_FILE)
    dataset = load_from_disk(str(tmp_path / DATASET_DIR))
    assert result.dataset_path == tmp_path / DATASET_DIR
    assert f"dataset: {tmp_path / DATASET_DIR}" in capsys.readouterr().out
    assert set(dataset.column_names) == set(records[0]) | {"answer", "task"}
    assert len(dataset) == len(records) == 6
    for record, row in zip(records, dataset, strict=True):
        assert json.loads(row["info"]) == record["info"]
        assert row["answer"] == str(record["info"].get("answer", ""))
        assert row["task"] == env.name
        for key, value in record.items():
            if key != "info":
                assert row[key] == value, key
    # the scripted plan went through: right answers score 1 on the env's main reward
    assert [row["reward"] > 0.5 for row in dataset] == [True, False, False, False, True, True]
    meta = json.loads((tmp_path / "metadata.json").read_text(encoding="utf-8"))
    assert meta["dataset_dir"] == DATASET_DIR


def test_eval_input_rows_are_the_examples_once_each() -> None:
    records = [
        {
            "example_id": i // 2,
            "prompt": [{"role": "user", "content": f"q{i // 2}"}],
            "info": {"answer": i // 2},
            "language": "sv",
            "reward": float(i),
        }
        for i in range(4)
    ]
    rows = eval_input_rows(records, "arithmetic")
    assert [r["example_id"] for r in rows] == [0, 1]
    assert rows[1] == {
        "example_id": 1,
        "prompt": '[{"role": "user", "content": "q1"}]',
        "answer": "1",
        "info": '{"answer": 1}',
        "task": "arithmetic",
        "language": "sv",
    }


EVAL_ARITHMETIC = [
    "+env=arithmetic",
    "eval.num_examples=2",
    "eval.rollouts_per_example=2",
    "generation.max_tokens_per_turn=16",
    "trainer.max_completion_length=16",
]


@pytest.mark.slow
def test_push_offline_is_one_line_and_keeps_the_local_files(tmp_path: Path) -> None:
    proc = run_grpo(
        ["stages=[eval]", "model=tiny", *EVAL_ARITHMETIC, "eval.push_to_hub=someone/grpo-eval"],
        root=tmp_path,
        env_extra={"HF_TOKEN": "hf_not_a_token"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "eval.push_to_hub=someone/grpo-eval: could not push the eval evaluation" in last, proc.stderr[
        -2000:
    ]
    (eval_dir,) = tmp_path.glob("runs/*/*/eval")
    assert f"it is saved in {eval_dir / DATASET_DIR}" in last
    records = read_results(eval_dir / RESULTS_FILE)
    assert len(records) == 4 and len(load_from_disk(str(eval_dir / DATASET_DIR))) == 4

    # MLflow has the evaluation, and what it ran on as the run's dataset input
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("grpo-arithmetic").experiment_id])
    assert run.data.metrics["eval/eval/mean"] == pytest.approx(sum(r["reward"] for r in records) / 4)
    (entry,) = run.inputs.dataset_inputs
    assert entry.dataset.name == "arithmetic-eval"
    assert {t.key: t.value for t in entry.tags}["mlflow.data.context"] == "eval"
    schema = json.loads(entry.dataset.schema)["mlflow_colspec"]
    assert [c["name"] for c in schema] == ["example_id", "prompt", "answer", "info", "task", "language"]
    assert json.loads(entry.dataset.profile)["num_rows"] == 2
    assert str(eval_dir / DATASET_DIR) in entry.dataset.source


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.push_to_hub=no-namespace", "expected a Hub dataset repo id"),
        ("eval.push_to_hub=someone/repo", "no Hub token: set $GRPO_TEST_UNSET_TOKEN"),
    ],
)
def test_push_settings_are_checked_before_anything_runs(monkeypatch, override: str, message: str) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("GRPO_TEST_UNSET_TOKEN", raising=False)
    settings = load_settings(["+env=arithmetic", override, "eval.hub_token_env=GRPO_TEST_UNSET_TOKEN"])
    from huggingface_hub import get_token

    if get_token() is not None:
        pytest.skip("this machine has a saved Hub login")
    with pytest.raises(UserError, match=message.replace("$", r"\$")) as info:
        check(settings)
    assert "\n" not in str(info.value)


def test_dataset_rows_keep_a_missing_answer_empty() -> None:
    from grpo.evaluation.dataset import dataset_rows

    rows: list[dict[str, Any]] = dataset_rows([{"info": {"names": [["a"]]}, "reward": 0.0}], "alphabet_sort")
    assert rows == [{"info": '{"names": [["a"]]}', "reward": 0.0, "answer": "", "task": "alphabet_sort"}]
