"""Language-consistency score on crafted texts, and its contract: a float in [0, 1] for any
input, never an exception (the reward function built on it: test_rewards_consistency.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo.languages.consistency import MIN_ID_CONFIDENCE, consistency_counts, language_consistency
from grpo.languages.spec import available_languages, get_spec

# Two sentences per language, written for these tests.
TEXTS = {
    "en": "First, I compare the first letters of every name. The sorted list is below.",
    "de": "Zuerst vergleiche ich die Anfangsbuchstaben aller Namen. Die sortierte Liste steht unten.",
    "es": "Primero comparo las primeras letras de cada nombre. La lista ordenada está abajo.",
    "fr": "D'abord, je compare les premières lettres de chaque nom. La liste triée se trouve en dessous.",
    "sv": "Först jämför jag de första bokstäverna i varje namn. Den sorterade listan står nedan.",
    "zh": "我们先比较每个名字的拼音。排序以后，答案就在下面。",
    "ja": "まず、それぞれの名前の読みを比べます。並べ替えた結果は下のとおりです。",
    "ko": "먼저 각 이름의 첫 글자를 비교합니다. 정렬한 결과는 아래와 같습니다.",
    "ar": "أولًا نقارن الحرف الأول من كل اسم. النتيجة المرتبة موجودة أدناه.",
    "hi": "पहले हम हर नाम का पहला अक्षर देखते हैं। क्रम से लगाई गई सूची नीचे है।",
    "ru": "Сначала сравним первые буквы каждого имени. Отсортированный список приведён ниже.",
}
# sentence pairs for "half English": same number of words on both sides (counted by hand)
HALVES = {
    "de": [
        (
            "Ich überprüfe die Reihenfolge noch einmal, damit nichts fehlt.",
            "Let me check the order again to make sure.",
        ),
        ("Die Antwort ist die Summe der beiden Ergebnisse.", "The answer is the sum of both results."),
        ("Wir müssen den Text Zeichen für Zeichen umkehren.", "We must reverse this text letter by letter."),
    ],
    "es": [
        (
            "Voy a revisar el orden otra vez para estar seguro.",
            "I will check the order once again to be sure.",
        ),
        ("La respuesta es la suma de los dos resultados.", "The answer is the sum of the two results."),
        (
            "Tenemos que invertir el texto carácter por carácter.",
            "We must reverse this text letter by letter.",
        ),
    ],
    "fr": [
        (
            "Je vérifie encore l'ordre pour être sûr que rien ne manque.",
            "I check the order again to be sure nothing is missing.",
        ),
        ("La réponse est la somme des deux résultats.", "The answer is the sum of both results."),
        (
            "Il faut inverser le texte caractère par caractère.",
            "We must reverse the text character by character.",
        ),
    ],
    "sv": [
        (
            "Jag kontrollerar ordningen en gång till så att inget saknas.",
            "I check the order once more so nothing is missing.",
        ),
        ("Svaret är summan av de två resultaten.", "The answer is the sum of both."),
        ("Vi ska vända på texten tecken för tecken.", "We should reverse the text character by character."),
    ],
    "en": [
        (
            "I check the order again so nothing is missing.",
            "Ich prüfe die Reihenfolge noch einmal, damit nichts fehlt.",
        ),
        ("The answer is the sum of both results.", "Die Antwort ist die Summe beider Ergebnisse hier."),
    ],
}


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_pure_target_language_scores_one(code):
    assert language_consistency(TEXTS[code], get_spec(code)) == 1.0


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_another_language_scores_zero(code):
    other = "en" if code != "en" else "de"
    assert language_consistency(TEXTS[other], get_spec(code)) == 0.0


@pytest.mark.parametrize("code", sorted(HALVES))
def test_half_english_latin_scores_about_half(code):
    spec = get_spec(code)
    for target, english in HALVES[code]:
        assert len(target.split()) == len(english.split())
    text = " ".join(f"{t} {e}" for t, e in HALVES[code])
    assert language_consistency(text, spec) == pytest.approx(0.5, abs=0.05)
    # the order of the sentences does not matter
    text = "\n".join(f"{e}\n{t}" for t, e in HALVES[code])
    assert language_consistency(text, spec) == pytest.approx(0.5, abs=0.05)


def test_half_english_by_script():
    # 7 Han characters, 7 English words
    assert language_consistency("我们先比较名字。First we compare the names here now.", get_spec("zh")) == 0.5
    # 4 Hangul words, 4 English words
    assert language_consistency("먼저 각 이름을 비교합니다. Then sort them all.", get_spec("ko")) == 0.5
    # 5 Cyrillic words, 5 English words
    assert (
        language_consistency("Сначала сравним первые буквы имён. Then we sort the list.", get_spec("ru"))
        == 0.5
    )
    # 3 Arabic words, 3 Devanagari words: Hindi is not Arabic
    assert language_consistency("نقارن الحرف الأول. हम नाम देखते", get_spec("ar")) == 0.5


def test_japanese_in_a_chinese_answer_counts_against_it():
    ja_sentence = "今日は天気がいいです。"
    assert language_consistency(ja_sentence, get_spec("zh")) == 0.0
    assert language_consistency(ja_sentence, get_spec("ja")) == 1.0
    # the Chinese sentence still counts: its 13 Han characters of 13 + 10 (今日天気 and 6 kana)
    mixed = "我们先比较每个名字的拼音吧。" + "今日は天気がいいです。"
    assert language_consistency(mixed, get_spec("zh")) == pytest.approx(13 / 23)


def test_tags_names_numbers_code_and_urls_do_not_count():
    de = get_spec("de")
    names = ["MarcoEllero", "AnnaBell", "JohnSmith"]
    answer = (
        "<think>Zuerst vergleiche ich die Anfangsbuchstaben aller Namen.</think>\n"
        "<answer>\nAnnaBell\nJohnSmith // new name!\nMarcoEllero\n</answer>\n"
        "Ergebnis: 42, 3.5 und \\boxed{7/8}. Siehe `sorted(names, key=str.lower)` und https://example.com/list.\n"
        "```python\nprint('the quick brown fox jumps over the lazy dog')\n```"
    )
    assert language_consistency(answer, de, ignore=names) == 1.0
    # the names themselves are Latin words the identifier cannot place: they would count against
    assert language_consistency(answer, de) < 1.0
    # for the wrong-language monitor they carry no language signal: no vote either way
    target, total = consistency_counts(answer, de, min_confidence=MIN_ID_CONFIDENCE)
    assert 0 < total == target  # the German sentences alone are counted
    assert consistency_counts("AnnaBell\nMarcoEllero\nJohnSmith", de, min_confidence=MIN_ID_CONFIDENCE) == (
        0,
        0,
    )
    # a name alone (first or family name of a listed one) is left out as a word, not counted
    sentence = "Anna, Marco und John sind hier."
    assert consistency_counts(sentence, de) == (6, 6)
    assert consistency_counts(sentence, de, names=["Anna Bell", "Marco Ellero", "John Smith"]) == (3, 3)
    # names are also removed when the model lower-cases them
    assert language_consistency(answer.replace("AnnaBell", "annabell"), de, ignore=names) == 1.0


def test_empty_and_garbage_stay_in_range():
    for code in available_languages():
        spec = get_spec(code)
        for text in ["", "   \n\t", "!!!???...", "12345 678", "<a><b></b>", None, 42, b"bytes", ["list"]]:
            assert language_consistency(text, spec) == 0.0
        for text in [
            "qwxz vbnm kjhg",
            "aaaa" * 500,
            "\u200b\u200d\ufeff",
            "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ ☃ 🙂",
            "a" + "\u0301" * 50,
        ]:
            value = language_consistency(text, spec)
            assert isinstance(value, float) and 0.0 <= value <= 1.0


SCRIPT_SAMPLES = st.sampled_from(
    list(TEXTS.values()) + ["<answer>", "</think>", "```", "`", "\\boxed{", "://", "\n", "。"]
)
ANY_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(SCRIPT_SAMPLES, st.text(max_size=20)), max_size=12).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=ANY_TEXT,
    code=st.sampled_from([*available_languages(), "mix"]),
    ignore=st.lists(st.text(max_size=8), max_size=4),
)
def test_property_never_raises_and_stays_in_range(text, code, ignore):
    value = language_consistency(text, get_spec(code), ignore=ignore)
    assert isinstance(value, float) and not math.isnan(value) and 0.0 <= value <= 1.0


# ---- garbage pays nothing -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_model_answers():
    """The tiny random model's answers to alphabet-sort's prompts in every language (sampled,
    48 tokens each): byte-level noise from every script of the tokenizer's corpus."""
    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.generation import GenRequest, Sampling, make_backend

    torch.manual_seed(0)
    base = load_settings(["+env=alphabet_sort", "model=tiny"])
    backend = make_backend(base.generation, None, None, base.model)
    answers = {}
    for code in sorted(TEXTS):
        settings = load_settings(["+env=alphabet_sort", "model=tiny", f"language={code}"])
        rows = build_env(settings.env, settings.language).rows("eval", 8)
        requests = [
            GenRequest(prompt_ids=backend.encode(backend.render(list(r.prompt), True)), max_new_tokens=48)
            for r in rows
            for _ in range(3)
        ]
        answers[code] = [
            o.text
            for o in backend.generate(requests, Sampling(temperature=1.0, max_tokens_per_turn=48, seed=1))
        ]
    return answers


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_a_random_models_garbage_earns_nothing_in_any_language(code, random_model_answers):
    """What a random model writes (the v1 example's German runs earned 0.02-0.03 for it before)
    is no answer in any language: 0 for all 24 of them, while a sentence in the language still
    earns its share and a text with one foreign word a little less."""
    spec = get_spec(code)
    assert [language_consistency(text, spec) for text in random_model_answers[code]] == [0.0] * 24
    assert language_consistency(TEXTS[code], spec) == 1.0
    # the check is not a cap on unusual text: a formula's symbols or a name in Latin letters pass
    assert language_consistency(TEXTS[code] + " x = 2π, Anna.", spec) > 0.5


@pytest.mark.parametrize(
    "text",
    [
        "aaaaaaaaaaaaaaaaaaaa",
        "ja ja ja ja ja ja ja",
        "The sorted list \x00\x01\x02 is below.",
        "The sorted list is below.\ufffd",
        "Les noms сортированы ordnungsgemäß ב-σειρά 按顺序 排列 ほど",
    ],
    ids=["one character", "one word", "control bytes", "replacement character", "script soup"],
)
def test_implausible_text_earns_nothing(text):
    for code in ("en", "de", "fr", "ru", "zh"):
        assert language_consistency(text, get_spec(code)) == 0.0
