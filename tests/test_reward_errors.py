"""A reward function that raises is never silent: the completion scores 0 (the safe-reward policy),
the error is counted per function (evaluation: `EvalResult.errors`, metadata.json, the report;
training: `rewards/<name>/errors` in TRL's log), the first one of each function is logged in one
warning line with its type and message, and when every completion of a step raised, the
zero-signal hint names the function instead of blaming the model."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from test_evaluation import ScriptedBackend
from test_train_monitors import SMALL, Logs

from grpo.compose import load_settings
from grpo.envs import build_env
from grpo.envs.rubric import RewardErrors, RewardFunc, Rubric, checked_score, score_reward
from grpo.evaluation.evaluator import evaluate
from grpo.evaluation.setup import EvalSetup
from grpo.rewards import RunRewards
from grpo.run.layout import METADATA_FILE
from grpo.train.progress import reward_error_hint, zero_signal_hint
from grpo.train.trainer import build_trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Broken:
    """A third-party reward function with a bug: raises on every call, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completion: Any = None, **_: Any) -> float:
        self.calls += 1
        raise ValueError(f"answer\nmissing in call {self.calls}")


def test_checked_score_hands_back_the_error_and_scores_zero():
    broken = Broken()
    value, error = checked_score(broken, {"completion": []})
    assert value == 0.0 and isinstance(error, ValueError)
    assert score_reward(broken, completion=[]) == 0.0  # the policy itself is unchanged
    assert checked_score(lambda **_: 0.5, {}) == (0.5, None)
    assert checked_score(lambda **_: float("nan"), {}) == (0.0, None)  # garbage, not an error
    assert checked_score(lambda **_: None, {}) == (None, None)


def test_rubric_counts_each_functions_errors_and_warns_once(caplog):
    broken = Broken()
    rubric = Rubric([RewardFunc("broken", broken, 1.0), RewardFunc("fine", lambda **_: 1.0, 1.0)])
    with caplog.at_level(logging.WARNING, logger="grpo.envs.rubric"):
        for _ in range(3):
            assert rubric.score(completion=[]) == {"broken": 0.0, "fine": 1.0}
    assert rubric.errors.counts == {"broken": 3}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # the first error only
    # one line: the type and the message (its newline folded), the metric that counts the rest
    assert "\n" not in warnings[0]
    assert "broken raised ValueError: answer missing in call 1" in warnings[0]
    assert "rewards/broken/errors" in warnings[0]
    assert rubric.errors.take() == {"broken": 3} and rubric.errors.take() == {}


def test_evaluation_reports_the_errors_per_function(tmp_path, capsys):
    cfg = load_settings(["+env=alphabet_sort", "eval.num_examples=3", "eval.rollouts_per_example=2"])
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("eval", 3)
    backend = ScriptedBackend(env, rows, [[True, True]] * 3, str)
    broken = Broken()
    result = evaluate(
        EvalSetup.of(cfg), env, backend, tmp_path, extra_reward_funcs=[RewardFunc("broken", broken, 1.0)]
    )
    out = capsys.readouterr().out

    assert broken.calls == 6
    assert result.errors == {"broken": 6}
    assert result.per_function == {"alphabet_sort_reward": 1.0, "broken": 0.0}
    assert result.to_metrics()["func/broken/errors"] == 6.0
    assert "func/alphabet_sort_reward/errors" not in result.to_metrics()
    assert json.loads((tmp_path / METADATA_FILE).read_text())["reward_errors"] == {"broken": 6}
    assert "raised on 6 of 6 rollouts (scored 0)" in out

    # the env's own rubric function raising is counted too, and a second evaluation counts its own
    env.rubric.funcs[0] = RewardFunc("alphabet_sort_reward", Broken(), 1.0)
    again = evaluate(EvalSetup.of(cfg), env, backend, tmp_path / "again")
    assert again.errors == {"alphabet_sort_reward": 6} and again.mean == 0.0


# the real trainer on char_target: 2 steps of 8 completions (4 per prompt), 16 tokens
TRAIN = ["+env=char_target", *SMALL, "trainer.max_completion_length=16"]


def test_training_logs_errors_and_the_hint_names_the_function(tmp_path, capsys):
    cfg = load_settings(TRAIN)
    env = build_env(cfg.env, cfg.language)
    broken = Broken()
    rewards = RunRewards(rubric=[RewardFunc("broken", broken, 1.0)])
    logs = Logs()
    build_trainer(cfg, env, tmp_path, rewards=rewards, callbacks=[logs]).trainer.train()
    out = capsys.readouterr().out

    assert broken.calls == 16  # 2 steps x 8 completions
    assert [log["rewards/broken/errors"] for log in logs.logs] == [8.0, 8.0]
    assert all(log["frac_reward_zero_std"] == 1.0 for log in logs.logs)
    assert out.count("hint:") == 1
    assert reward_error_hint(1, "broken") in out and zero_signal_hint(1) not in out
    assert "reward function broken raised on every completion" in reward_error_hint(1, "broken")


def test_a_function_that_raises_sometimes_is_counted_and_the_model_keeps_its_hint(tmp_path, capsys):
    # char_target's own reward is dense; the extra one raises on every other completion only
    cfg = load_settings([*TRAIN, "trainer.max_steps=1"])
    env = build_env(cfg.env, cfg.language)
    calls = []

    def flaky(completion: Any = None, **_: Any) -> float:
        calls.append(1)
        if len(calls) % 2:
            raise ValueError("flaky")
        return 0.5

    rewards = RunRewards(rubric=list(env.rubric.funcs) + [RewardFunc("flaky", flaky, 1.0)])
    logs = Logs()
    build_trainer(cfg, env, tmp_path, rewards=rewards, callbacks=[logs]).trainer.train()
    assert logs.logs[0]["rewards/flaky/errors"] == 4.0
    assert logs.logs[0]["rewards/target_char_fraction/errors"] == 0.0
    assert "reward function flaky raised" not in capsys.readouterr().out


def test_reward_errors_counts_since_the_last_take():
    errors = RewardErrors()
    errors.record("a", ValueError())
    errors.record("a", ValueError())
    assert errors.take() == {"a": 2}
    errors.record("b", RuntimeError("x"))
    assert errors.take() == {"b": 1} and errors.counts == {"a": 2, "b": 1}
