"""build_env: the env config group (real Hydra composition) and the run's language -> an
Environment, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo.compose import compose
from grpo.config import LanguageConfig
from grpo.envs import build_env
from grpo.envs.alphabet_sort import AlphabetSortEnv
from grpo.envs.arithmetic import ArithmeticEnv
from grpo.envs.base import Environment, Row
from grpo.envs.char_target import CharTargetEnv
from grpo.envs.reverse_text import ReverseTextEnv
from grpo.errors import UserError
from grpo.languages.spec import get_spec, spec_from_config

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


ENVS = [
    ("alphabet_sort", AlphabetSortEnv),
    ("reverse_text", ReverseTextEnv),
    ("arithmetic", ArithmeticEnv),
    ("char_target", CharTargetEnv),
]


def build(overrides: list[str]):
    cfg = compose(overrides)
    return build_env(cfg.env, cfg.language)


@pytest.mark.parametrize(("env_name", "cls"), ENVS)
def test_each_env_yaml_builds_with_the_run_seed(env_name, cls):
    env = build([f"+env={env_name}", "seed=7"])
    assert type(env) is cls and env.name == env_name
    assert env.seed == 7 and env.language == "en"
    row = env.rows("eval", 1)[0]
    assert env.score(row, env.reference_completion(row)) == dict.fromkeys(env.rubric.names, 1.0)


@pytest.mark.parametrize(("env_name", "cls"), ENVS)
def test_yaml_keys_are_the_constructor_arguments_but_language(env_name, cls):
    import inspect

    keys = set(OmegaConf.load(CONF_ENV / f"{env_name}.yaml")) - {"_target_"}
    assert keys == set(inspect.signature(cls).parameters) - {"language"}


def test_overrides_reach_the_env():
    env = build(["+env=alphabet_sort", "env.max_turns=2", "env.min_names_per_turn=2"])
    assert env.max_turns == 2 and env.min_names_per_turn == 2
    env = build(
        [
            "+env=arithmetic",
            "env.operations=[+]",
            "language=sv",
            "env.prompts.sv.user='Räkna ut: {expression}'",
        ]
    )
    assert env.operations == ["+"]
    row = env.rows("eval", 1)[0]
    assert row.prompt[1]["content"] == f"Räkna ut: {row.info['expression']}"


def test_the_language_is_explicit_in_any_form():
    cfg = compose(["+env=arithmetic", "language=mix", "language.members=[en,zh]", "language.balance=true"])
    spec = spec_from_config(cfg.language)
    forms = [spec, cfg.language, OmegaConf.to_container(cfg.language), OmegaConf.to_object(cfg.language)]
    assert isinstance(forms[-1], LanguageConfig)
    for language in forms:
        env = build_env(cfg.env, language)
        assert env.spec == spec and [r.language for r in env.rows("eval", 6)] == [
            r.language for r in build_env(cfg.env, spec).rows("eval", 6)
        ]
    assert build_env(cfg.env, "zh").spec == get_spec("zh")
    with pytest.raises(UserError, match=r"^language: unknown language 'xx'; available: ar, de, en"):
        build_env(cfg.env, "xx")
    with pytest.raises(UserError, match=r"^language: expected a language code such as 'en'"):
        build_env(cfg.env, 3)


def test_an_env_config_that_sets_its_language_is_a_user_error():
    with pytest.raises(UserError) as err:
        build(["+env=arithmetic", "+env.language=sv"])
    assert str(err.value) == (
        "env.language: the language is the run's, not the env's; use language=sv instead (and drop env.language)"
    )


def test_unknown_argument_lists_the_valid_ones():
    with pytest.raises(UserError) as err:
        build(["+env=arithmetic", "+env.max_valeu=3"])
    message = str(err.value)
    assert message.startswith("env.max_valeu: not an argument of grpo.envs.arithmetic.ArithmeticEnv")
    assert "valid arguments: operations, min_operands, max_operands, min_value, max_value" in message


def test_bad_value_names_the_field():
    with pytest.raises(UserError, match=r"^env\.min_operands: expected an integer, got 'abc'"):
        build(["+env=arithmetic", "env.min_operands=abc"])


def test_missing_required_argument():
    with pytest.raises(UserError, match=r"^env\.level: required by test_envs_build\.ThirdPartyEnv"):
        build_env({"_target_": "test_envs_build.ThirdPartyEnv"}, "en")


def test_third_party_env_without_language_argument():
    env = build_env({"_target_": "test_envs_build.ThirdPartyEnv", "level": 3}, "de")
    assert isinstance(env, ThirdPartyEnv) and env.level == 3 and env.language == "en"


def test_var_kwargs_env_gets_everything_and_the_language():
    env = build_env({"_target_": "test_envs_build.KwargsEnv", "anything": [1, 2]}, "sv")
    assert env.kwargs == {"anything": [1, 2], "language": get_spec("sv")}
    assert isinstance(env.kwargs["anything"], list)  # plain containers, not OmegaConf nodes


def test_standalone_yaml_needs_its_interpolations():
    cfg = OmegaConf.load(CONF_ENV / "reverse_text.yaml")
    with pytest.raises(UserError, match=r"^env\.seed: cannot resolve"):
        build_env(cfg, "en")
    cfg.seed = 3
    env = build_env(cfg, "sv")
    assert env.seed == 3 and env.language == "sv"


def test_bad_targets():
    with pytest.raises(UserError, match=r"^env: no environment selected"):
        build_env(None, "en")
    with pytest.raises(UserError, match=r"^env\._target_: missing"):
        build_env({"seed": 1}, "en")
    with pytest.raises(UserError, match=r"^env\._target_: cannot import 'grpo\.envs\.nope\.Nope'"):
        build_env({"_target_": "grpo.envs.nope.Nope"}, "en")
    with pytest.raises(
        UserError, match=r"^env\._target_: argparse\.Namespace is not a grpo\.envs\.base\.Environment"
    ):
        build_env({"_target_": "argparse.Namespace"}, "en")
