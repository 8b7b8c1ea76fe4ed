"""The language-consistency reward function: named, weighted, scoring the model's turns in each
row's language, leaving out the row's names and the environment's format tokens, never raising."""

from __future__ import annotations

import pytest
from test_languages_consistency import TEXTS

from grpo.compose import compose
from grpo.envs import build_env
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.envs.rubric import Rubric
from grpo.languages.spec import get_spec, spec_from_config
from grpo.rewards.consistency import REWARD_NAME, consistency_reward_funcs, make_consistency_reward


def test_reward_function_scores_assistant_turns_in_the_row_language():
    sv = get_spec("sv")
    reward = make_consistency_reward(sv, ignore=AlphabetSortEnv.format_tokens)
    assert reward.name == REWARD_NAME == "language_consistency"
    assert reward.weight == sv.consistency_weight == 0.1
    assert make_consistency_reward(sv, weight=0.5).weight == 0.5
    completion = [
        {"role": "assistant", "content": "<alphabetical_sorted>\nÅsa\nZara\n</alphabetical_sorted>"},
        {"role": "user", "content": "Now sort ALL of these names alphabetically by FIRST name: Bo"},
        {"role": "assistant", "content": TEXTS["sv"] + "\n<combined_alphabetical_sorted>\nBo // new name!"},
    ]
    info = {"turn_names": [["Åsa", "Zara"], ["Bo"]]}
    # the user turn (English) is not the model's; names and the env's format token are ignored
    assert reward.fn(completion=completion, info=info) == 1.0
    assert reward.fn(completion=TEXTS["sv"], info=None) == 1.0  # plain-text completions too
    assert reward.fn(completion=[{"role": "assistant", "content": TEXTS["en"]}], info=info) == 0.0
    rubric = Rubric([reward])
    assert rubric.score(prompt=[], completion=completion, info=info, state={}) == {REWARD_NAME: 1.0}


def test_reward_function_for_a_mix_uses_each_row_language():
    reward = make_consistency_reward(get_spec("mix"))
    zh = [{"role": "assistant", "content": TEXTS["zh"]}]
    assert reward.fn(completion=zh, info={"language": "zh"}) == 1.0
    assert reward.fn(completion=zh, info={}, language="zh") == 1.0
    assert reward.fn(completion=zh, info={"language": "de"}) == 0.0
    # no row language, or an unknown one: nothing to score against
    assert reward.fn(completion=zh, info={}) == 0.0
    assert reward.fn(completion=zh, info={"language": "xx"}) == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        None,
        [],
        [{"role": "assistant", "content": None}],
        [{"role": "assistant"}],
        ["text"],
        [None],
        3.5,
        {"a": 1},
    ],
)
def test_reward_function_never_raises(completion):
    reward = make_consistency_reward(get_spec("de"))
    assert reward.fn(completion=completion, info={"names": [None, 3, ["x", None]]}) == 0.0


def test_consistency_reward_funcs_take_the_env_tokens_and_tags():
    cfg = compose(["+env=alphabet_sort", "language=sv"])
    (reward,) = consistency_reward_funcs(spec_from_config(cfg.language), build_env(cfg.env, cfg.language))
    assert reward.weight == 0.1
    marked = "\n".join(f"{name} // new name!" for name in ("Bo", "Eva", "Ali"))
    completion = [
        {"role": "assistant", "content": f"{TEXTS['sv']}\n{marked}"},
        {"role": "assistant", "content": "<alphabetical_sorted>\nZara Holm\nThe End\n</alphabetical_sorted>"},
    ]
    info = {"language": "sv", "turn_names": [["Bo", "Eva", "Ali"]]}
    assert reward.fn(completion=completion, info=info) == 1.0
    # without the env's format token and answer tags, `new name` and `The End` count as English
    assert make_consistency_reward(get_spec("sv")).fn(completion=completion, info=info) < 0.7
    assert (
        consistency_reward_funcs(spec_from_config(compose(["+env=alphabet_sort"]).language), None) == []
    )  # en: weight 0
