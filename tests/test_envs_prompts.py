"""Prompt blocks: every packaged env's YAML has a block per language it supports, and a broken
block (a lost format token, an unknown field or key, bad brace syntax) is a one-line UserError
naming env.prompts.<code>.<key>, raised when the env is built. English texts are alphabet-sort
0.1.5's."""

from __future__ import annotations

import copy
import re

import pytest
from helpers.packaged_env import packaged_config, packaged_env

from grpo.errors import UserError
from grpo.languages.consistency import language_consistency
from grpo.languages.spec import available_languages, get_spec

LANGUAGES = available_languages()


def sv_block(env: str, **changes) -> dict:
    block = copy.deepcopy(packaged_config(env)["prompts"]["sv"])
    block.update(changes)
    return block


@pytest.mark.parametrize(
    ("env", "key", "value", "message"),
    [
        (
            "alphabet_sort",
            "first_turn",
            "Sortera: {names}\n\n{template}",
            "must keep '<alphabetical_sorted>'",
        ),
        ("alphabet_sort", "follow_up", "Nya namn: {names}", "must keep '// new name!'"),
        ("alphabet_sort", "placeholder", "Namn{n}", "must keep '{i}'"),
        ("alphabet_sort", "placeholder", "Namn{i}{n}", "unknown field(s) {n}; allowed: {i}"),
        ("arithmetic", "user", "Beräkna: {expr}", "must keep '{expression}'"),
        ("arithmetic", "reference", "{expression} = {answer}", "must keep '\\\\boxed{{{answer}}}'"),
        ("reverse_text", "user", "Vänd: {text} }", "bad {field} syntax"),
        ("reverse_text", "tone", "formal", "unknown key; allowed: faker_locale, sentence_end, system, user"),
        ("reverse_text", "system", 3, "must be a text"),
        ("reverse_text", "words", "hus bok", "expected a list of words"),
    ],
)
def test_broken_blocks_are_one_line_user_errors(env, key, value, message):
    with pytest.raises(UserError) as err:
        packaged_env(env, "sv", prompts={"sv": sv_block(env, **{key: value})})
    assert str(err.value).startswith(f"env.prompts.sv.{key}: ") and "\n" not in str(err.value)
    assert message in str(err.value)


def test_missing_keys_and_text_source():
    block = sv_block("arithmetic")
    del block["reference"]
    with pytest.raises(UserError, match=r"^env\.prompts\.sv: missing reference$"):
        packaged_env("arithmetic", "sv", prompts={"sv": block})
    block = sv_block("reverse_text")
    del block["words"]
    with pytest.raises(UserError, match=r"^env\.prompts\.sv: needs a text source: faker_locale"):
        packaged_env("reverse_text", "sv", prompts={"sv": block})
    with pytest.raises(
        UserError, match=r"^env\.prompts\.sv\.faker_locale: faker has no lorem words for 'xx_XX'"
    ):
        packaged_env("reverse_text", "sv", prompts={"sv": {**block, "faker_locale": "xx_XX"}})


def test_english_prompts_render_the_alphabet_sort_0_1_5_texts():
    p = packaged_config("alphabet_sort")["prompts"]["en"]
    names = ", ".join(["MarcoEllero", "AnnaBell"])
    template = "\n".join(p["placeholder"].format(i=i) for i in (1, 2))
    assert p["first_turn"].format(names=names, template=template) == (
        "Sort these names in alphabetical order by FIRST name: MarcoEllero, AnnaBell\n\n"
        "Use exactly this format:\n<alphabetical_sorted>\nName1\nName2\n</alphabetical_sorted>"
    )
    turn2 = p["follow_up"].format(names="ZedAlpha") + p["follow_up_template"].format(
        template="Name1\nName2\nName3 // new name!"
    )
    assert turn2 == (
        "Now sort ALL of these names alphabetically by FIRST name: ZedAlpha\n\n"
        "These are in addition to the prior list. Mark any NEW names (that weren't in the prior list) with "
        "`// new name!` at the end.\n\nUse exactly this format:\n<combined_alphabetical_sorted>\n"
        "Name1\nName2\nName3 // new name!\n</combined_alphabetical_sorted>"
    )
    turn3 = p["follow_up"].format(names="Bo") + p["same_format"]
    assert turn3.endswith("with `// new name!` at the end. Follow the same format as before.")


@pytest.mark.parametrize("env", ["alphabet_sort", "reverse_text", "arithmetic"])
def test_every_language_has_a_block(env):
    assert list(packaged_config(env)["prompts"]) == ["en", *(c for c in LANGUAGES if c != "en")]


@pytest.mark.parametrize("code", LANGUAGES)
def test_every_language_block_builds_and_is_written_in_the_language(code):
    a = packaged_env("alphabet_sort", code, max_turns=1).prompts_for(code)
    first = a["first_turn"].format(
        names=a["separator"].join(["X", "Y"]), template=a["placeholder"].format(i=1)
    )
    assert "<alphabetical_sorted>" in first and "X" in first
    assert "// new name!" in a["follow_up"] and "// new name!" in a["follow_up_by_family"]
    reference = packaged_env("arithmetic", code).prompt(code, "reference", expression="2 + 2", answer="4")
    assert reference.count("\\boxed{4}") == 1
    assert "{text}" in packaged_env("reverse_text", code).prompts_for(code)["user"]
    if code != "en":
        # written in the language: the prompt's words are mostly in its scripts
        assert language_consistency(first, get_spec(code)) > 0.6, first


def test_char_target_is_english_only_with_the_same_error():
    message = re.escape(
        "env.prompts.sv: char_target has no prompts for language 'sv'; add a `sv:` block under `prompts:` in "
        "its YAML (conf/env/char_target.yaml; its `en:` block shows the keys)"
    )
    with pytest.raises(UserError, match=f"^{message}$"):
        packaged_env("char_target", "sv")
    with pytest.raises(UserError, match=r"^env\.prompts\.sv: arithmetic has no prompts"):
        packaged_env("arithmetic", "sv", prompts={"en": packaged_config("arithmetic")["prompts"]["en"]})
