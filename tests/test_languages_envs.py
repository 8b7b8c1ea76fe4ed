"""Every environment in every language: the run's language reaches the env through build_env,
names follow each language's collation (checked against the hand-written orders of
test_languages_collation and pairwise with ICU's compare), prompts are native with machine-readable
tags, language=mix rows carry their own language in exact proportions, the language-consistency
reward scores each row in its language, and the evaluator's results.jsonl / per-language table
agree on the tiny model."""

from __future__ import annotations

import json
import random
import re
import statistics
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from helpers.packaged_env import packaged_config, packaged_env
from test_languages_collation import EXPECTED, JA_EXPECTED

from grpo.compose import compose
from grpo.envs import build_env
from grpo.envs.alphabet_sort import NEW_NAME_SUFFIX, AlphabetSortEnv
from grpo.envs.reverse_text import ReverseTextEnv, reverse
from grpo.errors import UserError
from grpo.languages.mix import language_counts
from grpo.languages.names import ZH_SURNAME_READINGS
from grpo.languages.spec import available_languages, get_spec, spec_from_config
from grpo.rewards import build_rewards

LANGUAGES = available_languages()
# which name each language sorts by, and how its prompt says so (written by hand, not read from
# the language files): family-name-first languages sort by family name
SORT_BY = {
    "en": "by FIRST name",
    "sv": "efter FÖRNAMN",
    "de": "nach dem VORNAMEN",
    "es": "según el NOMBRE de pila",
    "fr": "par ordre alphabétique du PRÉNOM",
    "ru": "в алфавитном порядке по имени",
    "ar": "حسب الاسم الأول",
    "hi": "पहले नाम के अनुसार",
    "zh": "按姓氏的汉语拼音顺序",
    "ja": "名字の読みの五十音順",
    "ko": "성을 기준으로 가나다순",
}


@cache
def collator(code: str) -> Any:
    import icu

    spec = get_spec(code)
    coll = icu.Collator.createInstance(icu.Locale(spec.icu_locale))
    coll.setStrength(getattr(icu.Collator, spec.collation_strength.upper()))
    return coll


def strictly_ordered(a: str, b: str, code: str) -> bool:
    """a comes strictly before b in the language (never equal: rows hold no collation ties)."""
    if code == "en":
        return a < b  # 0.1.5: plain code-point order
    return collator(code).compare(a, b) < 0


@cache
def alphabet_env(code: str) -> AlphabetSortEnv:
    return packaged_env("alphabet_sort", code, seed=3, num_train_examples=40, num_eval_examples=40)


def strip_marker(line: str) -> str:
    return line.removesuffix(NEW_NAME_SUFFIX)


# ---- alphabet_sort: the order of each language ------------------------------------------------------


@pytest.mark.parametrize("code", LANGUAGES)
def test_generated_ground_truths_follow_the_language_order(code):
    env = alphabet_env(code)
    for row in env.rows("train"):
        assert row.language == code and row.info["language"] == code
        turns = row.info["turn_names"]
        readings = dict(
            zip(
                [n for t in turns for n in t],
                [r for t in row.info.get("turn_readings", turns) for r in t],
                strict=True,
            )
        )
        seen: list[str] = []
        for turn, (names, truth) in enumerate(zip(turns, row.info["ground_truths"], strict=True), 1):
            seen += names
            plain = [strip_marker(line) for line in truth]
            assert sorted(plain) == sorted(seen)
            marked = {strip_marker(line) for line in truth if line.endswith(NEW_NAME_SUFFIX)}
            assert marked == (set(names) if turn > 1 else set())
            for a, b in zip(plain, plain[1:], strict=False):
                assert strictly_ordered(readings[a], readings[b], code), (code, a, b, plain)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_hand_written_orders_become_the_expected_answers(code):
    env = alphabet_env(code)
    names = list(EXPECTED[code])
    random.Random(1).shuffle(names)
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    truths = env.ground_truths([first, second], get_spec(code))
    assert [strip_marker(line) for line in truths[1]] == EXPECTED[code]
    assert {strip_marker(line) for line in truths[1] if line.endswith(NEW_NAME_SUFFIX)} == set(second)


def test_japanese_expected_answers_follow_the_kana_reading():
    env = alphabet_env("ja")
    shuffled = list(reversed(JA_EXPECTED))
    assert env.ground_truths([shuffled])[0] == [n.text for n in JA_EXPECTED]
    # given as plain strings, the names' readings come from the built-in source
    assert env.sort_names(["佐藤", "後藤", "伊藤", "加藤"]) == ["伊藤", "加藤", "後藤", "佐藤"]


def test_chinese_rows_never_use_misread_surnames():
    env = packaged_env("alphabet_sort", "zh", num_train_examples=200, max_names_per_turn=7)
    names = {n for row in env.rows("train") for turn in row.info["turn_names"] for n in turn}
    assert len(names) > 500
    assert not any(n.startswith(tuple(ZH_SURNAME_READINGS)) for n in names)


def write_pool(tmp_path: Path, names: list[str]) -> str:
    path = tmp_path / "names.txt"
    path.write_text("\n".join(names) + "\n", encoding="utf-8")
    return str(path)


def test_swedish_rows_put_asa_after_zara(tmp_path):
    pool = write_pool(tmp_path, ["Zara Holm", "Åsa Lind"])
    one_turn = {"min_turns": 1, "max_turns": 1, "min_names_per_turn": 2, "max_names_per_turn": 2}
    sv = packaged_env("alphabet_sort", "sv", names_source=pool, num_eval_examples=6, **one_turn)
    for row in sv.rows("eval"):
        assert sorted(row.info["turn_names"][0]) == ["Zara Holm", "Åsa Lind"]
        assert row.info["ground_truths"] == [["Zara Holm", "Åsa Lind"]]
        assert "Zara Holm" in row.prompt[0]["content"] and "Åsa Lind" in row.prompt[0]["content"]
        assert sv.score(row, sv.reference_completion(row)) == {"alphabet_sort_reward": 1.0}
    # German files Å with A; English (0.1.5) joins the names and compares code points (Z < Å)
    de = packaged_env("alphabet_sort", "de", names_source=pool, num_eval_examples=2, **one_turn)
    assert de.rows("eval", 1)[0].info["ground_truths"] == [["Åsa Lind", "Zara Holm"]]
    en = packaged_env("alphabet_sort", names_source=pool, num_eval_examples=2, **one_turn)
    assert en.rows("eval", 1)[0].info["ground_truths"] == [["ZaraHolm", "ÅsaLind"]]
    # the same pool under language=mix: every row sorts by its own language
    cfg = compose(["+env=alphabet_sort", "language=mix", "language.members=[sv,de]", "language.balance=true"])
    mix = packaged_env("alphabet_sort", cfg.language, names_source=pool, num_eval_examples=10, **one_turn)
    expected = {"sv": ["Zara Holm", "Åsa Lind"], "de": ["Åsa Lind", "Zara Holm"]}
    rows = mix.rows("eval")
    assert Counter(r.language for r in rows) == {"sv": 5, "de": 5}
    for row in rows:
        assert row.info["ground_truths"] == [expected[row.language]]


def test_a_names_pool_drops_names_that_collate_equal(tmp_path):
    # أحمد and احمد differ only in the hamza of the alef: one name in Arabic collation
    pool = write_pool(tmp_path, ["أحمد سالم", "احمد سالم", "باسل عمر"])
    small = {"min_turns": 1, "max_turns": 1, "min_names_per_turn": 2, "max_names_per_turn": 2}
    env = packaged_env("alphabet_sort", "ar", names_source=pool, num_eval_examples=5, **small)
    for row in env.rows("eval"):
        assert row.info["ground_truths"] == [["أحمد سالم", "باسل عمر"]]
    with pytest.raises(UserError, match="has 2 distinct names but a row can need 3"):
        packaged_env("alphabet_sort", "ar", names_source=pool, max_turns=1, max_names_per_turn=3)
    # in Swedish the two spellings are different names
    assert packaged_env("alphabet_sort", "sv", names_source=pool, max_turns=1, max_names_per_turn=3)


# ---- prompts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", LANGUAGES)
def test_alphabet_sort_prompts_are_native_with_machine_readable_tags(code):
    env = packaged_env("alphabet_sort", code, min_turns=3, max_turns=3, num_eval_examples=2)
    row = env.rows("eval", 1)[0]
    first, second, third = row.prompt[0]["content"], *row.info["follow_ups"]
    for text in (first, second, third):
        assert SORT_BY[code] in text, (code, text)
    assert "<alphabetical_sorted>" in first and "</alphabetical_sorted>" in first
    assert "<combined_alphabetical_sorted>" in second and "</combined_alphabetical_sorted>" in second
    assert "<combined_alphabetical_sorted>" not in third  # turn 3 refers to the format before
    for text in (second, third):
        assert "`// new name!`" in text
    # the format block holds one placeholder line per name, numbered with ASCII digits
    count = len(row.info["ground_truths"][0])
    block = first[first.index("<alphabetical_sorted>\n") : first.index("</alphabetical_sorted>")]
    assert re.findall(r"\d+", block) == [str(i) for i in range(1, count + 1)]
    # the names are shown as written in the language
    for name in row.info["turn_names"][0]:
        assert name in first


@pytest.mark.parametrize("code", LANGUAGES)
def test_reverse_text_and_arithmetic_prompts_per_language(code):
    spec = get_spec(code)
    rt_env = packaged_env("reverse_text", code, num_eval_examples=5)
    block = rt_env.prompts_for(code)
    rt = rt_env.rows("eval", 3)
    ar = packaged_env("arithmetic", code, num_eval_examples=5, decimal_places=1).rows("eval", 3)
    for row in rt:
        system, user = row.prompt[0]["content"], row.prompt[1]["content"]
        assert system == block["system"]
        assert user == block["user"].format(text=row.info["text"])
        for tag in ("<think>", "</think>", "<answer>", "</answer>"):
            assert tag in system
        assert (
            row.info["answer"] == reverse(row.info["text"])
            and reverse(row.info["answer"]) == row.info["text"]
        )
        assert row.info["text"].endswith(block["sentence_end"])
    for row in ar:
        system, user = row.prompt[0]["content"], row.prompt[1]["content"]
        assert "\\boxed{" in system and row.info["expression"] in user
        # expression and answer stay machine-readable: ASCII digits, a decimal point, p/q
        assert re.fullmatch(r"[0-9.()+\-*/ ]+", row.info["expression"])
        assert re.fullmatch(r"-?[0-9]+(?:\.[0-9]+|/[0-9]+)?", row.info["answer"])
    if code != "en":
        from grpo.languages.consistency import language_consistency

        # written in the language: most of the instruction's words are in it
        assert language_consistency(rt[0].prompt[0]["content"], spec) > 0.6
        assert language_consistency(ar[0].prompt[0]["content"], spec) > 0.6


def test_texts_join_words_the_language_way():
    zh = packaged_env("reverse_text", "zh", num_eval_examples=3).rows("eval", 1)[0].info["text"]
    assert " " not in zh and zh.endswith("。")
    hi = packaged_env("reverse_text", "hi", num_eval_examples=3).rows("eval", 1)[0].info["text"]
    assert " " in hi and hi.endswith("।")


def test_reversal_keeps_user_perceived_characters_whole():
    # हि = ह + vowel sign i; क्ष = क + virama + ष: reversed as units, never split
    assert reverse("हिन्दी क्षमा") == "मा" + "क्ष" + " " + "न्दी" + "हि"
    assert reverse("Åsa Zoë.") == ".ëoZ asÅ"
    assert reverse("Hello, world.") == ".dlrow ,olleH"


# ---- the language reaches the env through the composed config ---------------------------------------


def test_composed_language_overrides_reach_the_env():
    cfg = compose(
        [
            "+env=arithmetic",
            "language=sv",
            "env.prompts.sv.user='Räkna ut: {expression}'",
        ]
    )
    env = build_env(cfg.env, cfg.language)
    assert env.language == "sv" and env.spec == spec_from_config(cfg.language)
    row = env.rows("eval", 1)[0]
    assert row.prompt[1]["content"] == f"Räkna ut: {row.info['expression']}"
    # a mix with overridden members and balance: the env samples exactly those languages
    cfg = compose(["+env=arithmetic", "language=mix", "language.members=[en,zh]", "language.balance=true"])
    env = build_env(cfg.env, cfg.language)
    assert env.language == "mix" and Counter(r.language for r in env.rows("eval")) == {"en": 50, "zh": 50}


def test_english_rows_are_the_same_through_the_composed_config():
    for name, cls in [("alphabet_sort", AlphabetSortEnv), ("reverse_text", ReverseTextEnv)]:
        composed = build_env(compose([f"+env={name}"]).env, "en")
        direct = cls(num_eval_examples=100, prompts=packaged_config(name)["prompts"])
        assert composed.rows("eval", 20) == direct.rows("eval", 20)


# ---- language=mix ----------------------------------------------------------------------------------


def test_mix_rows_follow_the_weights_and_carry_their_language():
    cfg = compose(["+env=arithmetic", "language=mix", "env.num_train_examples=1000"])
    spec = spec_from_config(cfg.language)
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("train")
    counts = Counter(r.language for r in rows)
    assert counts == language_counts(spec, 1000)
    total = sum(spec.mix.values())
    for code, weight in spec.mix.items():
        assert abs(counts[code] / 1000 - weight / total) <= 1 / 1000
    for row in rows[:200]:
        assert row.info["language"] == row.language
        assert row.prompt[0]["content"] == env.prompts_for(row.language)["system"]
    # deterministic, a prefix for fewer rows, and seeded
    assert env.rows("train", 30) == rows[:30]
    assert build_env(cfg.env, cfg.language).rows("train", 50) == rows[:50]
    other = build_env(compose(["+env=arithmetic", "seed=1"]).env, "mix").rows("train", 50)
    assert [r.language for r in other] != [r.language for r in rows[:50]]


def test_mix_alphabet_sort_rows_use_their_own_language():
    cfg = compose(["+env=alphabet_sort", "language=mix", "env.num_eval_examples=60"])
    env = build_env(cfg.env, cfg.language)
    rows = env.rows("eval")
    assert len({r.language for r in rows}) >= 8
    for row in rows:
        assert SORT_BY[row.language] in row.prompt[0]["content"]
        plain = [strip_marker(line) for line in row.info["ground_truths"][-1]]
        readings = dict(
            zip(
                [n for t in row.info["turn_names"] for n in t],
                [r for t in row.info.get("turn_readings", row.info["turn_names"]) for r in t],
                strict=True,
            )
        )
        for a, b in zip(plain, plain[1:], strict=False):
            assert strictly_ordered(readings[a], readings[b], row.language)


# ---- the language-consistency reward ---------------------------------------------------------------------


def consistency(cfg: Any, env: Any) -> Any:
    funcs = {f.name: f for f in build_rewards(cfg, env).extra}
    return funcs.get("language_consistency")


def test_consistency_reward_scores_each_row_in_its_language():
    en = compose(["+env=alphabet_sort"])
    assert consistency(en, build_env(en.env, en.language)) is None  # en: weight 0
    cfg = compose(["+env=alphabet_sort", "language=zh", "language.consistency_weight=0.3"])
    env = build_env(cfg.env, cfg.language)
    reward = consistency(cfg, env)
    assert reward.weight == 0.3
    row = env.rows("eval", 1)[0]
    answer = env.reference_completion(row)[0]["content"]
    names = "、".join(row.info["turn_names"][0])
    chinese = [{"role": "assistant", "content": f"我先比较每个名字的拼音，然后排序：{names}\n{answer}"}]
    english = [{"role": "assistant", "content": f"First I compare the names: {names}\n{answer}"}]
    assert reward.fn(completion=chinese, info=row.info) == 1.0  # the names and tags do not count
    assert reward.fn(completion=english, info=row.info) == 0.0
    assert (
        consistency(compose(["+env=alphabet_sort", "language=zh", "language.consistency_weight=0"]), env)
        is None
    )


def test_consistency_reward_under_mix_reads_the_row_language():
    cfg = compose(["+env=reverse_text", "language=mix", "language.members=[de,ja]", "language.balance=true"])
    env = build_env(cfg.env, cfg.language)
    reward = consistency(cfg, env)
    prose = {
        "de": "Ich drehe den Text jetzt Zeichen für Zeichen um.",
        "ja": "文字を一つずつ逆の順番に並べます。",
    }
    rows = {r.language: r for r in env.rows("eval", 10)}
    assert set(rows) == {"de", "ja"}
    for code, row in rows.items():
        other = prose["ja" if code == "de" else "de"]
        answer = env.reference_completion(row)[0]["content"]
        # the reversed text inside <answer> is data, not prose: left out of the count
        right = [{"role": "assistant", "content": f"<think>{prose[code]}</think>\n{answer}"}]
        wrong = [{"role": "assistant", "content": f"<think>{other}</think>\n{answer}"}]
        assert reward.fn(completion=right, info=row.info) == 1.0, code
        assert reward.fn(completion=wrong, info=row.info) == 0.0, code


# ---- the evaluator on the tiny model --------------------------------------------------------------------

TINY_EVAL = [
    "model=tiny",
    "tracking=none",
    "stages=[eval]",
    "generation.max_tokens_per_turn=16",
    "trainer.max_completion_length=64",
    "eval.num_examples=2",
    "eval.rollouts_per_example=1",
]


def run_eval(overrides: list[str], tmp_path: Path) -> tuple[Any, list[dict[str, Any]], dict[str, Any], str]:
    from grpo.stages import run_stages

    cfg = compose([*TINY_EVAL, *overrides])
    run_stages(cfg, tmp_path)
    out = tmp_path / "eval"
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    meta = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    return cfg, records, meta, str(out)


def check_per_language(records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    assert set(meta["per_language"]) == {r["language"] for r in records}
    for code, stats in meta["per_language"].items():
        values = [r["reward"] for r in records if r["language"] == code]
        assert stats["count"] == len(values)
        assert stats["mean"] == pytest.approx(statistics.fmean(values))
        assert stats["std"] == pytest.approx(statistics.pstdev(values))


@pytest.mark.slow
def test_evaluator_zh_on_the_tiny_model(tmp_path, capsys):
    cfg, records, meta, _ = run_eval(["+env=alphabet_sort", "language=zh"], tmp_path)
    rows = build_env(cfg.env, cfg.language).rows("eval", 2)
    assert [r["language"] for r in records] == ["zh", "zh"]
    assert [r["prompt"] for r in records] == [row.prompt for row in rows]
    assert all("language_consistency" in r and r["info"]["language"] == "zh" for r in records)
    check_per_language(records, meta)
    assert meta["reward_weights"]["language_consistency"] == 0.1
    assert "per language" not in capsys.readouterr().out  # one language: no table


@pytest.mark.slow
def test_evaluator_mix_on_the_tiny_model(tmp_path, capsys):
    # two eval rows, balanced over two languages: exactly one row of each
    mix = ["language=mix", "language.members=[en,zh]", "language.balance=true", "env.num_eval_examples=2"]
    cfg, records, meta, _ = run_eval(["+env=alphabet_sort", *mix], tmp_path)
    rows = build_env(cfg.env, cfg.language).rows("eval")
    assert sorted(r.language for r in rows) == ["en", "zh"]
    assert [r["language"] for r in records] == [row.language for row in rows]
    for record, row in zip(records, rows, strict=True):
        assert record["prompt"] == row.prompt and record["info"]["language"] == row.language
    check_per_language(records, meta)
    out = capsys.readouterr().out
    table = out[out.index("per language:") :].splitlines()
    shown = {line.split()[0]: line.split()[1:] for line in table[2:4]}
    for code, stats in meta["per_language"].items():
        assert shown[code] == [
            f"{stats['mean']:.4f}",
            f"{stats['std']:.4f}",
            str(stats["count"]),
            f"{stats['truncated']:.1%}",
        ]
