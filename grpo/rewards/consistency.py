"""The language-consistency reward (DeepSeek-R1): a RewardFunc named "language_consistency" that
scores the share of the model's words in the row's language (grpo.languages.consistency).

Left out of the count: the row's names (the strings under info's "names", "turn_names" and
"ignore" keys, whole and word by word: a first or family name alone), the environment's `format_tokens` (e.g. `// new name!`) and the content of its
`answer_tags` blocks (sorted names, reversed text: data, not prose).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from grpo.envs.parsers import assistant_turns
from grpo.envs.rubric import RewardFunc
from grpo.languages.consistency import MIN_ID_CONFIDENCE, consistency_counts, language_consistency
from grpo.languages.spec import MIX, LanguageSpec, get_spec

REWARD_NAME = "language_consistency"
# info keys whose (possibly nested) string lists are ignored: the row's names
INFO_IGNORE_KEYS = ("names", "turn_names", "ignore")


def consistency_reward_funcs(spec: LanguageSpec, env: Any) -> list[RewardFunc]:
    """The reward when the run's language (`spec`, its `language` group with overrides:
    grpo.languages.spec.spec_from_config) has consistency_weight > 0, else nothing, for its
    environment `env`. Each rollout is scored in its row's language (info["language"], which every
    environment row carries: the member language under language=mix)."""
    if spec.consistency_weight <= 0:
        return []
    return [make_consistency_reward(spec, ignore=env.format_tokens, tags=env.answer_tags)]


def language_monitor(spec: LanguageSpec, env: Any) -> Callable[..., float | None] | None:
    """The scorer of the wrong-language monitor (grpo/train/monitors.py) for a non-English run
    (`make_consistency_scorer` in the run's language `spec`, leaving out what the reward leaves
    out); None for an English run."""
    if spec.code == "en":
        return None
    return make_consistency_scorer(spec, ignore=env.format_tokens, tags=env.answer_tags)


def make_consistency_reward(
    spec: LanguageSpec, weight: float | None = None, ignore: Iterable[str] = (), tags: Iterable[str] = ()
) -> RewardFunc:
    """The reward (weight: the language's consistency_weight unless given). Its fn(completion=,
    info=, language=, ...) scores the assistant turns (or a plain-string completion) in the row's
    language: `language=` or info["language"] when given (language=mix needs one of them), else the
    spec's own. Left out: the strings under info's INFO_IGNORE_KEYS, `ignore` (format tokens) and
    the blocks of `tags` (an environment's `answer_tags`)."""
    fixed = tuple(ignore)
    tag_names = tuple(tags)
    weight = spec.consistency_weight if weight is None else float(weight)
    if weight > 0:
        _load_identifier(spec)

    def language_consistency_reward(
        completion: Any = None, info: dict[str, Any] | None = None, language: Any = None, **_: Any
    ) -> float:
        judged = _judged(spec, completion, info, language, fixed)
        if judged is None:
            return 0.0
        row_spec, text, ignored, names = judged
        return language_consistency(text, row_spec, ignored, tag_names, names)

    return RewardFunc(REWARD_NAME, language_consistency_reward, weight)


def make_consistency_scorer(
    spec: LanguageSpec, ignore: Iterable[str] = (), tags: Iterable[str] = ()
) -> Callable[..., float | None]:
    """fn(completion=, info=, language=) -> the reward's score of the assistant turns, or None when
    there is nothing to judge: no countable word once the names, `ignore` strings and `tags` blocks
    are left out (an alphabet-sort answer is all names), no language signal in what is left (a
    list of other names), or no known row language. For monitoring (grpo/train/monitors.py),
    where "no words" must not read as "wrong language"."""
    fixed = tuple(ignore)
    tag_names = tuple(tags)
    _load_identifier(spec)

    def score(
        completion: Any = None, info: dict[str, Any] | None = None, language: Any = None, **_: Any
    ) -> float | None:
        judged = _judged(spec, completion, info, language, fixed)
        if judged is None:
            return None
        row_spec, text, ignored, names = judged
        target, total = consistency_counts(text, row_spec, ignored, tag_names, names, MIN_ID_CONFIDENCE)
        return target / total if total > 0 else None

    return score


def _load_identifier(spec: LanguageSpec) -> None:
    """Load the language identifier now when a language of `spec` needs it: a broken install
    fails at start-up, not as silent zeros."""
    members = [get_spec(code) for code in spec.mix] if spec.is_mix else [spec]
    if any(s.needs_language_id for s in members):
        from grpo.languages.identify import predictor

        predictor()


def _judged(
    spec: LanguageSpec, completion: Any, info: Any, language: Any, fixed: tuple[str, ...]
) -> tuple[LanguageSpec, Any, tuple[str, ...], tuple[str, ...]] | None:
    """(the row's language, the assistant text, the strings left out, the row's names) of one
    rollout, or None when the row's language is unknown."""
    info = info if isinstance(info, dict) else {}
    row_spec = _row_spec(spec, language if language is not None else info.get("language"))
    if row_spec is None:
        return None
    text = completion if isinstance(completion, str) else "\n".join(assistant_turns(completion))
    names = [s for key in INFO_IGNORE_KEYS for s in _strings(info.get(key))]
    return row_spec, text, fixed + tuple(names), tuple(names)


def _strings(value: Any) -> list[str]:
    """Every string in a (nested) list/tuple, or the value itself when it is a string."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


def _row_spec(spec: LanguageSpec, code: Any) -> LanguageSpec | None:
    if code is None or code == spec.code:
        return None if spec.is_mix else spec
    if not isinstance(code, str) or code == MIX:
        return None
    try:
        return get_spec(code)
    except Exception:  # an unknown code in a row: nothing to score against
        return None
