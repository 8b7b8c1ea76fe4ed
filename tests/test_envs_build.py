"""build_env: the env config group (real Hydra composition) -> an Environment, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo.cli import compose
from grpo.envs import build_env
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.envs.arithmetic import ArithmeticEnv
from grpo.envs.base import Environment, Row
from grpo.envs.reverse_text import ReverseTextEnv
from grpo.errors import UserError

CONF_ENV = Path(__file__).resolve().parents[1] / "conf" / "env"


class ThirdPartyEnv(Environment):
    """An env from "another package": no language argument, one required argument."""

    name = "third_party"

    def __init__(self, level: int, seed: int = 0, num_train_examples: int = 3, num_eval_examples: int = 3):
        super().__init__(seed, num_train_examples, num_eval_examples)
        self.level = level

    def make_row(self, rng, index, split):
        return Row(id=index, prompt=[{"role": "user", "content": f"{self.level}"}], info={})


class KwargsEnv(Environment):
    def __init__(self, **kwargs):
        super().__init__(seed=kwargs.get("seed", 0), language=kwargs.get("language", "en"))
        self.kwargs = kwargs


@pytest.mark.parametrize(
    ("env_name", "cls"),
    [("alphabet_sort", AlphabetSortEnv), ("reverse_text", ReverseTextEnv), ("arithmetic", ArithmeticEnv)],
)
def test_each_env_yaml_builds_with_the_run_seed(env_name, cls):
    env = build_env(compose([f"+env={env_name}", "seed=7"]).env)
    assert type(env) is cls and env.name == env_name
    assert env.seed == 7 and env.language == "en"
    row = env.rows("eval", 1)[0]
    assert env.score(row, env.reference_completion(row)) == dict.fromkeys(env.rubric.names, 1.0)


def test_yaml_keys_are_exactly_the_constructor_arguments():
    import inspect

    for env_name, cls in [
        ("alphabet_sort", AlphabetSortEnv),
        ("reverse_text", ReverseTextEnv),
        ("arithmetic", ArithmeticEnv),
    ]:
        keys = set(OmegaConf.load(CONF_ENV / f"{env_name}.yaml")) - {"_target_"}
        assert keys == set(inspect.signature(cls).parameters), env_name


def test_overrides_reach_the_env():
    env = build_env(compose(["+env=alphabet_sort", "env.max_turns=2", "env.min_names_per_turn=2"]).env)
    assert env.max_turns == 2 and env.min_names_per_turn == 2
    env = build_env(compose(["+env=arithmetic", "env.operations=[+]"]).env)
    assert env.operations == ["+"]


def test_unknown_argument_lists_the_valid_ones():
    with pytest.raises(UserError) as err:
        build_env(compose(["+env=arithmetic", "+env.max_valeu=3"]).env)
    message = str(err.value)
    assert message.startswith("env.max_valeu: not an argument of grpo.envs.arithmetic.ArithmeticEnv")
    assert "valid arguments: operations, min_operands, max_operands, min_value, max_value" in message


def test_bad_value_names_the_field():
    with pytest.raises(UserError, match=r"^env\.min_operands: expected an integer, got 'abc'"):
        build_env(compose(["+env=arithmetic", "env.min_operands=abc"]).env)


def test_missing_required_argument():
    with pytest.raises(UserError, match=r"^env\.level: required by test_envs_build\.ThirdPartyEnv"):
        build_env({"_target_": "test_envs_build.ThirdPartyEnv"})


def test_third_party_env_without_language_argument():
    env = build_env({"_target_": "test_envs_build.ThirdPartyEnv", "level": 3}, language="de")
    assert isinstance(env, ThirdPartyEnv) and env.level == 3 and env.language == "en"


def test_var_kwargs_env_gets_everything_and_the_language():
    env = build_env({"_target_": "test_envs_build.KwargsEnv", "anything": [1, 2]}, language="sv")
    assert env.kwargs == {"anything": [1, 2], "language": "sv"}
    assert isinstance(env.kwargs["anything"], list)  # plain containers, not OmegaConf nodes


def test_standalone_yaml_language_falls_back_but_other_interpolations_fail():
    cfg = OmegaConf.load(CONF_ENV / "reverse_text.yaml")
    with pytest.raises(UserError, match=r"^env\.seed: cannot resolve"):
        build_env(cfg)
    cfg.seed = 3
    env = build_env(cfg, language="en")
    assert env.seed == 3 and env.language == "en"
    # a language the config sets wins over the argument
    cfg.language = "xx"
    with pytest.raises(UserError, match=r"^env\.language: reverse_text does not support language 'xx'"):
        build_env(cfg, language="en")


def test_bad_targets():
    with pytest.raises(UserError, match=r"^env: no environment selected"):
        build_env(None)
    with pytest.raises(UserError, match=r"^env\._target_: missing"):
        build_env({"seed": 1})
    with pytest.raises(UserError, match=r"^env\._target_: cannot import 'grpo\.envs\.nope\.Nope'"):
        build_env({"_target_": "grpo.envs.nope.Nope"})
    with pytest.raises(
        UserError, match=r"^env\._target_: argparse\.Namespace is not a grpo\.envs\.base\.Environment"
    ):
        build_env({"_target_": "argparse.Namespace"})
