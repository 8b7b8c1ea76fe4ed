"""GRPO's completions table in MLflow (grpo/tracking/completions.py): a real TRL trainer on the tiny
model logs, every logging step, train/completions.json to a real MLflow SQLite store; its rows are
the rollouts of that step, with each reward function's score, the weighted total, TRL's advantage
and the model's token count; a few rows per language under a mix."""

from __future__ import annotations

import html
import json
import statistics

import pytest
from helpers.random_model import TRAIN_ON_CUT_COMPLETIONS
from mlflow import MlflowClient
from test_train_monitors import SMALL
from transformers import TrainerCallback

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.rubric import RewardFunc
from grpo.rewards import RunRewards
from grpo.tracking import make_tracker
from grpo.tracking.completions import TABLE_FILE, balanced_rows, completions_table, page_file
from grpo.tracking.mlflow_tracker import render_messages
from grpo.tracking.render import rows_html
from grpo.tracking.store import make_client, tracking_uri
from grpo.train.trainer import build_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_balanced_rows_take_each_language_in_turn():
    languages = ["en"] * 6 + ["ja"] * 2 + ["sv"] * 4
    assert balanced_rows(languages, 6) == [0, 1, 6, 7, 8, 9]  # en, ja, sv, en, ja, sv
    assert balanced_rows(languages, 100) == list(range(12))
    assert balanced_rows(["en"] * 5, 3) == [0, 1, 2]
    assert balanced_rows([], 3) == []


def test_table_columns_scores_and_totals():
    record = {
        "prompt": [
            [{"role": "system", "content": "s"}, {"role": "user", "content": f"q{i}"}] for i in range(3)
        ],
        "completion": [[{"role": "assistant", "content": f"trl {i}"}] for i in range(3)],
        "rewards": {"a": [1.0, 0.5, float("nan")], "step": [0.0, 1.0, 1.0]},
        "advantages": [0.25, -0.25, 0.0],
        "extra": {"language": ["en", "en", "sv"], "model_tokens": [3, 4, 5]},
    }
    table = completions_table(record, ["a", "step"], [2.0, 1.0], step=7, n=2)
    assert list(table) == [
        "step", "language", "prompt", "completion", "reward", "a", "step (score)", "advantage", "model_tokens"
    ]  # fmt: skip
    # one en row, one sv row; the episode column missing: TRL's own completion text
    assert table["step"] == [7, 7] and table["language"] == ["en", "sv"]
    assert table["prompt"] == ["q0", "q2"] and table["completion"] == ["trl 0", "trl 2"]
    assert table["a"] == [1.0, None]  # NaN: the function does not apply
    assert table["reward"] == [2.0, 1.0]  # weighted, a None counting 0
    assert table["advantage"] == [0.25, 0.0] and table["model_tokens"] == [3, 5]


def test_the_readable_page_holds_every_text_whole_and_escaped():
    long_completion = "Ana / Björn / Chen\n" * 40 + "<b>not markup</b> & done"
    table = {
        "step": [3, 3],
        "language": ["sv", "en"],
        "prompt": ["Sortera namnen: Östen, Åsa, Anna", ""],
        "completion": [long_completion, "a b"],
        "reward": [0.8125, None],
        "alphabetical": [0.8125, None],
        "advantage": [0.5, -0.5],
    }
    page = rows_html(table, "Training step 3")
    assert f"<pre>{html.escape(long_completion)}</pre>" in page  # whole: 800 characters, none cut
    assert "<b>not markup</b>" not in page
    assert "<pre>Sortera namnen: Östen, Åsa, Anna</pre>" in page and "<pre>(empty)</pre>" in page
    assert "<h3>#1 · sv · reward 0.8125</h3>" in page and "<h3>#2 · en · reward n/a</h3>" in page
    assert "alphabetical 0.8125 · advantage 0.5" in page
    assert page.startswith("<!DOCTYPE html>") and page.count("<section>") == 2


class LastBatch(TrainerCallback):
    """What the rollout function produced for each logging step (the step's last generation batch)."""

    def __init__(self) -> None:
        self.rollouts: dict[int, list] = {}
        self.bundle = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.rollouts[state.global_step] = list(self.bundle.rollout.last_rollouts)


def test_training_logs_the_completions_of_each_logging_step(tmp_path):
    db = tmp_path / "mlflow.db"
    make_client(f"sqlite:///{db}")
    cfg = load_settings(
        [
            "+env=char_target",
            "tracking=mlflow",
            f"output_root={tmp_path}",
            "tracking.log_completions=8",  # the whole batch: every row checked
            *SMALL,  # 2 steps of 8 completions, 4 per prompt
            "trainer.max_completion_length=16",
            *TRAIN_ON_CUT_COMPLETIONS,  # the rows show the rubric's own scores
        ]
    )
    env = build_env(cfg.env, cfg.language)
    (fraction,) = env.rubric.funcs
    # a second function with known values: 1 for an even number of characters, else 0
    parity = RewardFunc(
        "even_length", lambda completion, **_: float(len(completion[0]["content"]) % 2 == 0), 0.5
    )
    rewards = RunRewards(rubric=[fraction, parity])
    seen = LastBatch()
    tracker = make_tracker(cfg, tmp_path / "run")
    with tracker:
        bundle = build_trainer(cfg, env, tmp_path / "run", rewards=rewards, tracker=tracker, callbacks=[seen])
        seen.bundle = bundle
        tables = [
            cb
            for cb in bundle.trainer.callback_handler.callbacks
            if type(cb).__name__ == "CompletionsCallback"
        ]
        assert len(tables) == 1 and tables[0].trainer is bundle.trainer
        bundle.trainer.train()

    client = MlflowClient(tracking_uri(cfg))
    path = client.download_artifacts(tracker.run_id, TABLE_FILE, str(tmp_path / "dl"))
    with open(path, encoding="utf-8") as f:
        payload = json.load(f)
    rows = [dict(zip(payload["columns"], values, strict=True)) for values in payload["data"]]
    assert payload["columns"] == [
        "step", "language", "prompt", "completion", "reward", "target_char_fraction", "even_length",
        "advantage", "model_tokens",
    ]  # fmt: skip
    assert [r["step"] for r in rows] == [1] * 8 + [2] * 8
    for step in (1, 2):
        logged = [r for r in rows if r["step"] == step]
        rollouts = seen.rollouts[step]
        assert len(rollouts) == 8
        for row, ro in zip(logged, rollouts, strict=True):
            scores = env.score(ro.row, ro.completion, ro.state)
            assert row["completion"] == render_messages(ro.completion)
            assert row["prompt"] == ro.row.prompt[-1]["content"]
            assert row["language"] == "en"
            assert row["model_tokens"] == sum(ro.env_mask)
            assert row["target_char_fraction"] == pytest.approx(scores["target_char_fraction"])
            assert row["even_length"] == float(len(ro.completion[0]["content"]) % 2 == 0)
            assert row["reward"] == pytest.approx(row["target_char_fraction"] + 0.5 * row["even_length"])
        # the step's readable page: every row's prompt and completion in full, in the table's order
        page = open(
            client.download_artifacts(tracker.run_id, page_file(step), str(tmp_path / "pages"))
        ).read()
        assert page.count("<section>") == 8
        at = 0
        for r in logged:
            for text in (r["prompt"], r["completion"]):
                found = page.find(f"<pre>{html.escape(text) or '(empty)'}</pre>", at)
                assert found >= 0, text
                at = found
        # TRL's advantage: the total minus its group's mean, over the group's std (scale=group)
        for g in range(2):
            group = logged[4 * g : 4 * g + 4]
            totals = [r["reward"] for r in group]
            mean, std = statistics.fmean(totals), statistics.stdev(totals)
            for r in group:
                assert r["advantage"] == pytest.approx((r["reward"] - mean) / (std + 1e-4), abs=1e-4)
