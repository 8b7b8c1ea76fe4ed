"""Language specs: every conf/language option composes through Hydra and validates; unknown
codes and broken language files are one-line user errors; language files hold only what differs
from the schema's defaults."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
from helpers.grpo_process import run_grpo
from omegaconf import OmegaConf

from grpo.compose import compose
from grpo.errors import UserError
from grpo.languages.spec import available_languages, get_spec, spec_from_config

LANGUAGES = ["ar", "de", "en", "es", "fr", "hi", "ja", "ko", "ru", "sv", "zh"]


def test_available_languages():
    assert available_languages() == LANGUAGES


@pytest.mark.parametrize("code", [*LANGUAGES, "mix"])
def test_composed_config_gives_the_same_spec(code):
    cfg = compose(["+env=alphabet_sort", f"language={code}"])
    spec = spec_from_config(cfg.language)
    assert spec == get_spec(code)
    assert spec.code == code


def test_overrides_reach_the_spec():
    cfg = compose(["+env=alphabet_sort", "language=sv", "language.consistency_weight=0.5"])
    assert spec_from_config(cfg.language).consistency_weight == 0.5
    # a dict override merges into the default weights; `members` picks the languages
    cfg = compose(["+env=alphabet_sort", "language=mix", "language.mix.zh=3", "language.members=[en,zh,sv]"])
    spec = spec_from_config(cfg.language)
    assert spec.mix == {"en": 4.0, "zh": 3.0, "sv": 1.0} and not spec.balance
    cfg = compose(["+env=alphabet_sort", "language=mix", "language.balance=true"])
    spec = spec_from_config(cfg.language)
    assert set(spec.mix) == set(LANGUAGES) and spec.balance
    with pytest.raises(UserError, match="members"):
        spec_from_config(compose(["+env=alphabet_sort", "language=sv", "language.members=[en]"]).language)


def test_unknown_language_lists_the_available_ones():
    with pytest.raises(UserError) as err:
        get_spec("xx")
    message = str(err.value)
    assert "\n" not in message and "'xx'" in message
    for code in LANGUAGES:
        assert code in message


def test_unknown_language_on_the_command_line_is_one_line():
    proc = run_grpo(["+env=alphabet_sort", "language=xx", "--cfg", "job"], timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "xx" in lines[0] and "sv" in lines[0] and "zh" in lines[0], proc.stderr


def test_unknown_mix_member_is_a_user_error():
    cfg = compose(["+env=alphabet_sort", "language=mix", "language.members=[en,xx]"])
    with pytest.raises(UserError, match=r"language\.mix\.xx.*available: ar, de, en"):
        spec_from_config(cfg.language)
    cfg = compose(["+env=alphabet_sort", "language=mix", "language.members=[en]", "language.mix.en=0"])
    with pytest.raises(UserError, match="weight > 0"):
        spec_from_config(cfg.language)


@functools.lru_cache(maxsize=1)
def _sv_config() -> dict:
    return OmegaConf.to_container(compose(["+env=alphabet_sort", "language=sv"]).language)


def _sv_dict() -> dict:
    return copy.deepcopy(_sv_config())


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("sort_key",), "alphabetical", "sort_key"),
        (("collation_strength",), "strong", "collation_strength"),
        (("scripts",), ["Latin", "Klingon"], "Klingon"),
        (("consistency_weight",), -1.0, "consistency_weight"),
    ],
)
def test_broken_language_files_are_user_errors(path, value, message):
    data = _sv_dict()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(UserError, match=message.replace("{", r"\{").replace("|", r"\|")):
        spec_from_config(data)


def test_typo_in_a_language_field_fails_at_composition():
    with pytest.raises(Exception, match="sortkey"):
        compose(["+env=alphabet_sort", "language=sv", "language.sortkey=icu"])


def test_language_files_hold_only_what_differs_from_the_schema():
    from dataclasses import asdict

    from grpo.config import LanguageConfig

    defaults = asdict(LanguageConfig())
    root = Path(__file__).resolve().parents[1] / "conf" / "language"
    for code in [*LANGUAGES, "mix"]:
        data = OmegaConf.to_container(OmegaConf.load(root / f"{code}.yaml"))
        assert data, code
        for key, value in data.items():
            assert value != defaults[key], f"conf/language/{code}.yaml: {key} repeats the default"


def test_specs_and_names_pickle():
    """Specs travel to dataloader workers and sweep jobs: no ICU or model objects inside."""
    import pickle

    from grpo.languages.names import Name

    for code in [*LANGUAGES, "mix"]:
        spec = get_spec(code)
        assert pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(Name("佐藤", "サトウ"))) == Name("佐藤", "サトウ")
