"""Per-language name sources: native script, given/family names only, readings for ja, no
misread zh surnames, gender-matched ru full names, deterministic draws without collation ties."""

from __future__ import annotations

import importlib
import random
import unicodedata

import pytest

from grpo.errors import UserError
from grpo.languages.collation import collation_key
from grpo.languages.names import ZH_SURNAME_READINGS, Name, draw_names, name_source, sort_name_texts
from grpo.languages.script import char_script
from grpo.languages.spec import available_languages, get_spec

PARTS = ("given", "family", "full")


def provider(spec):
    return importlib.import_module(f"faker.providers.person.{spec.name_locale}").Provider


def titles(spec) -> set[str]:
    """Every title, prefix and suffix the locale's faker provider knows."""
    out: set[str] = set()
    p = provider(spec)
    for attr in dir(p):
        if attr.startswith(("prefixes", "suffixes")):
            value = getattr(p, attr)
            out.update(value if not isinstance(value, str) else [value])
    return {t for t in out if isinstance(t, str)}


@pytest.mark.parametrize("code", available_languages())
@pytest.mark.parametrize("part", PARTS)
def test_draws_are_native_distinct_and_deterministic(code, part):
    spec = get_spec(code)
    k = 15  # alphabet_sort's largest row: 3 turns x 5 names
    names = draw_names(random.Random(7), k, spec, part)
    assert names == draw_names(random.Random(7), k, spec, part)
    assert names != draw_names(random.Random(8), k, spec, part)
    assert len(names) == k and all(isinstance(n, Name) for n in names)
    keys = {collation_key(n.sort_text, spec) for n in names}
    assert len(keys) == k, "two names collate equal: the expected order would be ambiguous"
    bad_titles = titles(spec)
    for name in names:
        pieces = name.text.split(" ") if spec.full_name_separator == " " else [name.text]
        assert len(pieces) == (2 if part == "full" and spec.full_name_separator == " " else 1)
        for piece in pieces:
            assert piece and piece not in bad_titles
            scripts = {char_script(ch) for ch in piece if ch not in "-'"} - {None}
            assert scripts and scripts <= set(spec.scripts), (name, scripts)
            assert not any(unicodedata.category(ch) == "Cf" for ch in piece)  # no ZWJ and the like


def test_ja_names_carry_their_kana_reading():
    spec = get_spec("ja")
    p = provider(spec)
    readings = {kanji: kana for kanji, kana, _ in p.first_name_pairs}
    for name in draw_names(random.Random(0), 20, spec, "given"):
        assert name.sort_text == readings[name.text]
        assert all(char_script(ch) == "Katakana" for ch in name.sort_text)
    full = draw_names(random.Random(1), 10, spec, "full")
    for name in full:
        family, given = name.text.split(" ")
        assert name.sort_text == f"{dict((k, r) for k, r, _ in p.last_name_pairs)[family]} {readings[given]}"
    # 斎藤 and 斉藤 are both サイトウ: never in one row
    for seed in range(30):
        family = {n.text for n in draw_names(random.Random(seed), 40, spec, "family")}
        assert not {"斎藤", "斉藤"} <= family


def test_zh_surnames_with_special_readings_are_left_out():
    spec = get_spec("zh")
    source = name_source(spec)
    pool = {n.text for n in source.family.names}
    assert {"曾", "单", "解", "区", "仇", "查", "乐", "朴", "盖", "覃", "翟", "缪"}.isdisjoint(pool)
    assert set(ZH_SURNAME_READINGS).isdisjoint(pool)
    assert {"王", "李", "张", "欧阳"} <= pool
    drawn = draw_names(random.Random(3), 200, spec, "full")
    assert not any(n.text.startswith(tuple(ZH_SURNAME_READINGS)) for n in drawn)
    # full names are surname then given name, with no space
    assert all(" " not in n.text for n in drawn)


def test_ru_full_names_agree_in_gender():
    spec = get_spec("ru")
    p = provider(spec)
    female_given, male_given = set(p.first_names_female), set(p.first_names_male)
    female_family, male_family = set(p.last_names_female), set(p.last_names_male)
    for name in draw_names(random.Random(5), 100, spec, "full"):
        given, family = name.text.split(" ")
        if given in female_given and given not in male_given:
            assert family in female_family, name
        if given in male_given and given not in female_given:
            assert family in male_family, name


def test_english_full_names_are_joined_without_space():
    names = draw_names(random.Random(0), 10, get_spec("en"), "full")
    assert all(
        " " not in n.text and n.text[0].isupper() and any(c.isupper() for c in n.text[1:]) for n in names
    )


def test_names_with_spaces_titles_or_foreign_script_are_filtered():
    ar = name_source(get_spec("ar"))
    assert all(" " not in n.text for n in ar.given.names + ar.family.names)
    hi = name_source(get_spec("hi"))
    assert "अनन्\u200dत" not in {n.text for n in hi.given.names}
    de = name_source(get_spec("de"))
    assert all("." not in n.text for n in de.given.names)


def test_too_many_names_for_the_pool_is_a_user_error():
    spec = get_spec("ja")
    with pytest.raises(UserError, match="distinct given names"):
        draw_names(random.Random(0), 60, spec, "given")
    with pytest.raises(ValueError):
        draw_names(random.Random(0), 3, spec, "middle")


def test_plain_string_names_sort_by_their_reading():
    ja = get_spec("ja")
    # gojūon order of the readings イトウ, カトウ, ゴトウ, サトウ (kanji code-point order would differ)
    assert sort_name_texts(["佐藤", "後藤", "伊藤", "加藤"], ja) == ["伊藤", "加藤", "後藤", "佐藤"]
    # full names: family reading, space, given reading (サトウ アキラ < サトウ ツバサ < スズキ アキラ)
    assert sort_name_texts(["鈴木 晃", "佐藤 翼", "佐藤 晃"], ja) == ["佐藤 晃", "佐藤 翼", "鈴木 晃"]
    assert name_source(ja).reading("佐藤 翼") == "サトウ ツバサ"
    assert name_source(ja).reading("未知") == "未知"
    # other languages: plain collation
    assert sort_name_texts(["Östen", "Zara", "Åsa"], get_spec("sv")) == ["Zara", "Åsa", "Östen"]
