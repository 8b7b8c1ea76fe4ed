"""The one safe-reward policy (grpo/envs/rubric.py), shared by training and evaluation: what a
reward function's return value scores, how a None (not applicable) counts, and one check of
reward-name uniqueness."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from grpo.envs.base import Environment, Row
from grpo.envs.rubric import RewardFunc, Rubric, score_reward
from grpo.errors import UserError
from grpo.evaluation.evaluator import _record, combined_rubric
from grpo.evaluation.summary import summarize
from grpo.files import to_json
from grpo.rewards import RubricReward, rubric_reward_funcs


def raises(**_):
    raise ValueError("garbage")


@pytest.mark.parametrize(
    ("value", "score"),
    [
        (0.25, 0.25),
        (None, None),  # not applicable
        (float("nan"), 0.0),
        (7.0, 1.0),
        (-1.0, 0.0),
        (float("inf"), 1.0),
        (float("-inf"), 0.0),
        (True, 1.0),
        (3, 1.0),
        ("0.5", 0.0),  # a string is no number
        (b"1", 0.0),
        (object(), 0.0),
        ([0.5], 0.0),
    ],
)
def test_score_reward_policy(value, score):
    assert score_reward(lambda **_: value) == score


def test_an_exception_scores_zero():
    assert score_reward(raises, completion=[]) == 0.0


def test_training_and_evaluation_score_alike():
    values = [0.25, None, float("nan"), 7.0, -1.0, "x", "raise"]

    def fn(info=None, **_):
        return raises() if info["v"] == "raise" else info["v"]

    func = RewardFunc("f", fn)
    trl = RubricReward(func)(
        prompts=["p"] * len(values), completions=["c"] * len(values), row_info=[{"v": v} for v in values]
    )
    rubric = Rubric([func])
    assert trl == [rubric.score(info={"v": v})["f"] for v in values] == [0.25, None, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_reward_names_are_checked_once_by_rubric():
    f = RewardFunc("x", raises)
    expected = r"^reward function names must be unique \(they become metric names\), repeated: x; rename one$"
    with pytest.raises(UserError, match=expected):
        Rubric([f, RewardFunc("y", raises), f])
    with pytest.raises(UserError, match=expected):
        rubric_reward_funcs([f, f])

    class One(Environment):
        def __init__(self):
            super().__init__()
            self.rubric = Rubric([f])

    with pytest.raises(UserError, match=expected):
        combined_rubric(One(), [("x", raises)])
    with pytest.raises(UserError, match="clash with results.jsonl fields"):
        combined_rubric(One(), [("reward", raises)])


class EvenOnly(Environment):
    """`exact` scores the rollout's state["hit"]; `even_only` (weight 2) does not apply to odd rows."""

    def __init__(self):
        super().__init__()
        self.rubric = Rubric(
            [
                RewardFunc("exact", lambda state=None, **_: state["hit"], binary=True),
                RewardFunc(
                    "even_only", lambda info=None, **_: None if info["odd"] else 1.0, 2.0, binary=True
                ),
            ]
        )


def test_evaluation_counts_none_as_trl_does():
    env = EvenOnly()
    rubric = combined_rubric(env, None)
    hits = {0: [1.0, 0.0], 1: [1.0, 1.0]}  # row -> hit of rollout 0, 1
    records = []
    for index, row_hits in hits.items():
        row = Row(index, [{"role": "user", "content": "q"}], {"odd": bool(index % 2)})
        for k, hit in enumerate(row_hits):
            rollout = SimpleNamespace(
                row=row,
                completion=[],
                state={"hit": hit},
                rollout_index=k,
                messages=[],
                num_turns=1,
                truncated=False,
            )
            records.append(_record(env, rubric, [], rollout))
    # a None counts 0 in the total; results.jsonl stores it as null
    assert [r["reward"] for r in records] == [3.0, 2.0, 1.0, 1.0]
    assert [r["even_only"] for r in records] == [1.0, 1.0, None, None]
    assert json.loads(to_json(records[2]))["even_only"] is None
    result = summarize(records, rubric, "eval", 2, "r.jsonl", "m.json", 0.0)
    # a function's mean / std leave its Nones out (TRL: nanmean); the total's mean counts them 0
    assert result.per_function == {"exact": 0.75, "even_only": 1.0}
    assert result.per_function_std == {"exact": pytest.approx(math.sqrt(3 / 16)), "even_only": 0.0}
    assert result.mean == 7 / 4
    # pass@k: a None is no pass (row 1 passes `exact` but `even_only` does not apply): c = 1, 0
    assert result.pass_at_k == {1: 0.25, 2: 0.5}
