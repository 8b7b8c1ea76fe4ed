"""The Environment base: constructor-argument checks, and the per-language prompt blocks an
environment declares (checked at construction for every language its rows can be in)."""

from __future__ import annotations

from collections import Counter

import pytest

from grpo.envs.base import Environment, Row, int_arg
from grpo.envs.prompts import PromptSpec, Text
from grpo.errors import UserError
from grpo.languages.spec import spec_from_config


class EchoEnv(Environment):
    name = "echo"
    prompt_spec = PromptSpec({"user": Text(("word",), ("{word}",))}, settings=("style",))

    def make_row(self, rng, index, split):
        spec = self.row_spec(split, index)
        return Row(
            index, [{"role": "user", "content": self.prompt(spec, "user", word=str(index))}], {}, spec.code
        )


PROMPTS = {"en": {"user": "Say {word}"}, "sv": {"user": "Säg {word}", "style": "kort"}}


def test_int_arg():
    assert int_arg("k", 3) == 3 and int_arg("k", "4") == 4 and int_arg("k", 5.0) == 5
    for bad in [True, 2.5, "x", None, [1]]:
        with pytest.raises(UserError, match=r"^env\.k: expected an integer"):
            int_arg("k", bad)
    with pytest.raises(UserError, match=r"^env\.k: must be >= 1, got 0"):
        int_arg("k", 0, minimum=1)


def test_rows_use_the_block_of_their_language():
    assert EchoEnv(prompts=PROMPTS).rows("eval", 2)[1].prompt == [{"role": "user", "content": "Say 1"}]
    sv = EchoEnv(language="sv", prompts=PROMPTS)
    assert sv.rows("eval", 1)[0].prompt[0]["content"] == "Säg 0" and sv.rows("eval", 1)[0].language == "sv"
    assert sv.prompts_for("sv")["style"] == "kort" and sv.prompt("sv", "user") == "Säg {word}"
    mix = spec_from_config({"code": "mix", "mix": {"en": 1, "sv": 1}})
    rows = EchoEnv(language=mix, prompts=PROMPTS, num_eval_examples=10).rows("eval")
    assert Counter(r.language for r in rows) == {"en": 5, "sv": 5}
    for row in rows:
        assert row.prompt[0]["content"] == PROMPTS[row.language]["user"].format(word=row.id)


def test_a_language_without_a_block_is_one_line_naming_the_env_language_and_yaml():
    expected = (
        "env.prompts.de: echo has no prompts for language 'de'; add a `de:` block under `prompts:` in "
        "its YAML (conf/env/echo.yaml; its `en:` block shows the keys)"
    )
    with pytest.raises(UserError) as err:
        EchoEnv(language="de", prompts=PROMPTS)
    assert str(err.value) == expected
    # language=mix checks every member at construction, not when a row first needs it
    with pytest.raises(UserError, match=r"^env\.prompts\.de: echo has no prompts"):
        EchoEnv(language=spec_from_config({"code": "mix", "mix": {"en": 1, "de": 1}}), prompts=PROMPTS)
    with pytest.raises(UserError, match=r"^env\.prompts\.en: echo has no prompts .*see its prompt_spec\)$"):
        EchoEnv()
    with pytest.raises(UserError, match=r"^env\.prompts: expected a mapping of language codes"):
        EchoEnv(prompts=["Say {word}"])
    # only the blocks rows can use are checked (a broken de block does not stop an en run)
    assert EchoEnv(prompts={**PROMPTS, "de": {"user": "Sag"}}).prompts == {"en": PROMPTS["en"]}


def test_an_env_without_prompt_texts_needs_no_prompts():
    class Plain(Environment):
        pass

    assert Plain(language="sv").prompts == {} and Plain().language == "en"
    # but prompts it does not declare are refused, not silently ignored
    with pytest.raises(
        UserError, match=r"^env\.prompts\.en\.user: unknown key; allowed: none \(its prompt_spec is empty\)$"
    ):
        Plain(prompts={"en": {"user": "hi"}})
