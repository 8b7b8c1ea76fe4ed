"""The environment API: rows, turns, parsers and rubrics.

An environment is one file in grpo/envs/ plus one YAML in conf/env/ whose `_target_` names the
class; there is no registry. It provides
  - `rows(split, n)`: deterministic dataset rows (prompt messages, info, language) from its seed;
  - `env_response(messages, state, row)`: for multi-turn envs, the environment's next user turn
    (a 1-element message list), or None when the episode is over (single-turn envs end after the
    first model turn); `messages` is the whole conversation so far;
  - `rubric`: named, weighted reward functions over a finished rollout.

Languages: an environment's `language` argument is a code from conf/language (`en`, `sv`, ...,
`mix`), a `language` config mapping (the composed group, overrides included) or a LanguageSpec;
it becomes `self.spec` and `self.language` (the code). Under language=mix every row has its own
language (`row_spec(split, index)`: exact proportions, seeded by the env seed). `rows` copies each
row's language into `info["language"]`, where the rewards read it. Prompt texts live in the
language files (`spec.prompts_for(env)`); a small table of an environment's own is read through
`localized` (an unsupported language is a UserError). Constructor arguments are checked with
`int_arg` so a bad `env.<key>` override gives a one-line error. Helpers shared by environments: tag parsing that
stays linear on any text (`tag_spans`, `last_tag_content`, `XMLParser`) and `similarity_ratio`,
an exact, faster difflib ratio.

Reward functions take keyword arguments `completion` (the assistant/user turns after the prompt),
`info` (the row's ground truth), `state` (what `env_response` kept) and `prompt`, and return a
float in [0, 1]. `Rubric.score` guarantees that range and that nothing raises, whatever the
model wrote.
"""

from __future__ import annotations

import math
import random
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from grpo.errors import UserError

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec

T = TypeVar("T")
Message = dict[str, str]
Messages = list[Message]
RewardFn = Callable[..., float]


@dataclass
class Row:
    """One task: the prompt messages, the ground truth and the language of the prompt."""

    id: int
    prompt: Messages
    info: dict[str, Any]
    language: str = "en"


@dataclass
class RewardFunc:
    name: str
    fn: RewardFn
    weight: float = 1.0
    #: scores are only ever 0 or 1 (pass/fail): the evaluator then reports pass@k
    binary: bool = False


class Rubric:
    """Named, weighted reward functions. Names are unique: they become metric names."""

    def __init__(self, funcs: list[RewardFunc]):
        names = [f.name for f in funcs]
        if len(set(names)) != len(names):
            raise ValueError(f"reward function names must be unique, got {names}")
        self.funcs = funcs

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.funcs]

    @property
    def weights(self) -> list[float]:
        return [f.weight for f in self.funcs]

    def score(self, **rollout: Any) -> dict[str, float]:
        """Each function's score for one rollout, every value a float in [0, 1]."""
        return {f.name: safe_reward(f.fn, **rollout) for f in self.funcs}

    def total(self, scores: dict[str, float]) -> float:
        """Weighted sum of the function scores: the rollout's reward."""
        return sum(f.weight * scores[f.name] for f in self.funcs)


def safe_reward(fn: RewardFn, **kwargs: Any) -> float:
    """Call a reward function; exceptions, NaN and non-numbers give 0, values clip to [0, 1]."""
    try:
        value = float(fn(**kwargs))
    except Exception:
        return 0.0
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


# ---- string similarity ------------------------------------------------------------------------


def similarity_ratio(a: str, b: str) -> float:
    """Exactly `difflib.SequenceMatcher(None, a, b).ratio()` (default autojunk), several times
    faster. difflib finds matching blocks greedily: the longest common block (earliest in a, then
    in b) made of characters b "uses" (all, or for len(b) >= 200 those at most 1% + 1 of b:
    autojunk), extended over equal neighbours, then the same left and right of it. We find that
    same block with C-speed substring searches instead of difflib's per-character dict loop;
    equal strings give 1.0 at once (difflib always matches an identical pair whole). Tests compare
    with difflib on many generated pairs."""
    if a == b:
        return 1.0
    usable = _usable_chars(b)
    # maximal runs of a made of usable characters: the only places a block can start and grow
    runs = [m.span() for m in usable.finditer(a)] if usable is not None else []
    run_starts = [start for start, _ in runs]
    matches = 0
    queue = [(0, len(a), 0, len(b))]
    while queue:
        alo, ahi, blo, bhi = queue.pop()
        i, j, k = _longest_match(a, b, runs, run_starts, alo, ahi, blo, bhi)
        if k:
            matches += k
            if alo < i and blo < j:
                queue.append((alo, i, blo, j))
            if i + k < ahi and j + k < bhi:
                queue.append((i + k, ahi, j + k, bhi))
    return 2.0 * matches / (len(a) + len(b))


@lru_cache(maxsize=4096)
def _usable_chars(b: str) -> re.Pattern[str] | None:
    """A regex matching runs of the characters difflib indexes in b (its b2j keys), or None.
    Cached: the rollouts of one row share their expected answer."""
    counts: dict[str, int] = {}
    for ch in b:
        counts[ch] = counts.get(ch, 0) + 1
    most = len(b) // 100 + 1 if len(b) >= 200 else len(b)
    usable = [ch for ch, n in counts.items() if n <= most]
    return re.compile("[" + "".join(re.escape(ch) for ch in usable) + "]+") if usable else None


def _longest_match(
    a: str, b: str, runs: list[tuple[int, int]], run_starts: list[int], alo: int, ahi: int, blo: int, bhi: int
) -> tuple[int, int, int]:
    """difflib's find_longest_match(alo, ahi, blo, bhi) without junk (see similarity_ratio)."""
    b_part = b[blo:bhi]
    besti, size = alo, 0
    # scan starts in a in order, only trying to beat the best size so far: the first start that
    # reaches the final size is the earliest longest block, as difflib picks
    for start, end in runs[max(bisect_right(run_starts, alo) - 1, 0) :]:
        if start >= ahi:
            break
        i, end = max(start, alo), min(end, ahi)
        while end - i > size:
            if a[i : i + size + 1] in b_part:
                besti, size = i, _grow(a, i, b_part, size + 1, end - i)
            i += 1
    bestj = b.find(a[besti : besti + size], blo, bhi) if size else blo
    # difflib then extends the block over equal characters (e.g. autojunk-popular ones)
    back = _common_length(a[alo:besti][::-1], b[blo:bestj][::-1])
    besti, bestj, size = besti - back, bestj - back, size + back
    return besti, bestj, size + _common_length(a[besti + size : ahi], b[bestj + size : bhi])


def _grow(a: str, i: int, b_part: str, known: int, most: int) -> int:
    """The largest n in [known, most] with a[i:i+n] in b_part, given a[i:i+known] is
    (galloping, then bisection: substring presence is monotone in n)."""
    low, high, step = known, most, 1
    while low < high:
        probe = min(high, low + step)
        if a[i : i + probe] not in b_part:
            high = probe - 1
            break
        low, step = probe, step * 2
    while low < high:
        mid = (low + high + 1) // 2
        if a[i : i + mid] in b_part:
            low = mid
        else:
            high = mid - 1
    return low


def _common_length(x: str, y: str) -> int:
    """Length of the common prefix of x and y (bisection on slice equality, C speed)."""
    low, high = 0, min(len(x), len(y))
    if x[:high] == y[:high]:
        return high
    while low < high:
        mid = (low + high + 1) // 2
        if x[:mid] == y[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


# ---- constructor-argument checks: bad env args are user errors naming the field -------------


def int_arg(key: str, value: Any, minimum: int | None = None) -> int:
    """`value` as an int (bools and non-integral numbers refused), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"env.{key}: expected an integer, got {value!r}")
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except ValueError:
        number = None
    if number is None:
        raise UserError(f"env.{key}: expected an integer, got {value!r}")
    if minimum is not None and number < minimum:
        raise UserError(f"env.{key}: must be >= {minimum}, got {number}")
    return number


def localized(table: dict[str, T], language: Any, env_name: str) -> T:
    """The entry of a per-language text table, or a UserError naming the supported codes.
    `language`: a code, a LanguageSpec or a language config mapping."""
    language = language_code(language)
    if language not in table:
        raise UserError(
            f"env.language: {env_name} does not support language {language!r} yet; "
            f"supported: {', '.join(sorted(table))}"
        )
    return table[language]


def language_code(language: Any) -> Any:
    """The code of a language given as a code, a LanguageSpec or a config mapping."""
    if isinstance(language, str):
        return language
    code = getattr(language, "code", None)
    if code is None and hasattr(language, "get"):
        code = language.get("code")
    return code if isinstance(code, str) else language


def language_spec(language: Any, env_name: str) -> LanguageSpec:
    """The LanguageSpec of an environment's `language` argument: a code of conf/language (or
    `mix`), a `language` config mapping (overrides included) or a LanguageSpec."""
    from grpo.languages.spec import MIX, LanguageSpec, available_languages, get_spec, spec_from_config

    if isinstance(language, LanguageSpec):
        return language
    if isinstance(language, str) and language:
        known = available_languages()
        if language != MIX and language not in known:
            # English first: the default
            listed = ["en", *(code for code in known if code != "en")] if "en" in known else known
            raise UserError(
                f"env.language: {env_name} does not support language {language!r}; "
                f"supported: {', '.join(listed)} (or {MIX})"
            )
        return get_spec(language)
    if hasattr(language, "keys") and hasattr(language, "get"):  # dict or DictConfig of the group
        return spec_from_config(language)
    raise UserError(f"env.language: expected a language code such as 'en', got {language!r}")


class Environment:
    """Base class. Subclasses set `name`, `max_turns`, build `self.rubric`, and implement
    `make_row(rng, index, split)`; multi-turn environments also override `env_response`."""

    name: str = "env"
    #: upper bound on model turns in one episode
    max_turns: int = 1
    #: True when env_response can continue the episode after a model turn
    multi_turn: bool = False
    #: tags whose content is the task's data (sorted names, reversed text), not prose: the
    #: language-consistency reward leaves those blocks out
    answer_tags: tuple[str, ...] = ()

    def __init__(
        self,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: Any = "en",
        name: str | None = None,
    ):
        self.seed = int_arg("seed", seed)
        self.num_examples = {
            "train": int_arg("num_train_examples", num_train_examples, minimum=1),
            "eval": int_arg("num_eval_examples", num_eval_examples, minimum=1),
        }
        if name is not None:
            self.name = name
        self.spec = language_spec(language, self.name)
        #: the language code ("mix" under language=mix, where each row carries its own)
        self.language = self.spec.code
        self._row_languages: dict[str, list[str]] = {}
        self.rubric = Rubric([])

    # ---- dataset -------------------------------------------------------------------------
    def rows(self, split: str = "train", n: int | None = None) -> list[Row]:
        """The first n rows of a split, the same for the same seed. Train and eval splits are
        drawn from different random streams."""
        if split not in self.num_examples:
            raise ValueError(f"unknown split {split!r}: use 'train' or 'eval'")
        total = self.num_examples[split]
        n = total if n is None else min(n, total)
        rng = random.Random(f"{self.name}:{split}:{self.seed}")
        rows = [self.make_row(rng, i, split) for i in range(n)]
        for row in rows:
            # rewards see info, not the Row: every row's info names its language
            if isinstance(row.info, dict) and row.info.get("language") != row.language:
                row.info = {**row.info, "language": row.language}
        return rows

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        raise NotImplementedError

    # ---- languages -------------------------------------------------------------------------
    def language_specs(self) -> list[LanguageSpec]:
        """The languages rows can be in: the env's own, or the mix members with a weight > 0."""
        if not self.spec.is_mix:
            return [self.spec]
        from grpo.languages.mix import language_shares
        from grpo.languages.spec import get_spec

        return [get_spec(code) for code in language_shares(self.spec)]

    def row_spec(self, split: str, index: int) -> LanguageSpec:
        """The language of row `index` of `split`. language=mix: the split's languages are drawn
        once with sample_languages (exact proportions over the whole split, in an order seeded by
        the env seed), so `rows(split, n)` is a prefix of `rows(split)`."""
        if not self.spec.is_mix:
            return self.spec
        from grpo.languages.mix import sample_languages
        from grpo.languages.spec import get_spec

        codes = self._row_languages.get(split)
        if codes is None:
            rng = random.Random(f"{self.name}:{split}:{self.seed}:languages")
            codes = self._row_languages[split] = sample_languages(rng, self.spec, self.num_examples[split])
        return get_spec(codes[index % len(codes)])

    # ---- interaction ----------------------------------------------------------------------
    def initial_state(self, row: Row) -> dict[str, Any]:
        return {"turn": 0}

    def env_response(self, messages: Messages, state: dict[str, Any], row: Row) -> Messages | None:
        """The environment's reply after the model's latest turn, or None: the episode is over.
        `state["turn"]` counts the model turns taken so far. Single-turn: always None."""
        return None

    def num_turns(self, row: Row) -> int:
        """Model turns this row's episode has (its own bound, at most max_turns)."""
        return int(row.info.get("num_turns", 1))

    def reference_completion(self, row: Row) -> Messages:
        """A perfect episode for this row: the ground-truth assistant turns with the
        environment's turns between them (what `rows` + `env_response` would produce).
        Used by tests and by synthetic preference data (chosen = this)."""
        raise NotImplementedError

    # ---- scoring ---------------------------------------------------------------------------
    def score(self, row: Row, completion: Messages, state: dict[str, Any] | None = None) -> dict[str, float]:
        return self.rubric.score(prompt=row.prompt, completion=completion, info=row.info, state=state or {})


# ---- parsers: small helpers shared by environments ---------------------------------------


def assistant_turns(completion: Messages) -> list[str]:
    """The text of each assistant message, in order (non-string content counts as empty)."""
    out = []
    for m in completion or []:
        if isinstance(m, dict) and m.get("role") == "assistant":
            content = m.get("content")
            out.append(content if isinstance(content, str) else "")
    return out


def tag_spans(text: str, tag: str) -> list[tuple[int, int]]:
    """(start, end) of the content of every complete <tag>...</tag>, left to right.

    Same matches as `re.findall(r"<tag>(.*?)</tag>", text, re.DOTALL)`, found with str.find in
    linear time (the regex is quadratic on many unclosed open tags)."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return spans
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            # no close after this open means none after any later open either
            return spans
        spans.append((start, end))
        pos = end + len(close_tag)


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag> in text, or None when there is none."""
    if not isinstance(text, str):
        return None
    spans = tag_spans(text, tag)
    if not spans:
        return None
    start, end = spans[-1]
    return text[start:end]


@dataclass
class XMLParser:
    """Parses answers written as <tag>...</tag> fields; `think` may precede the answer."""

    answer_tag: str = "answer"
    optional_tags: list[str] = field(default_factory=lambda: ["think"])

    def parse_answer(self, text: str) -> str | None:
        content = last_tag_content(text, self.answer_tag)
        return None if content is None else content.strip()

    def format_score(self, text: str) -> float:
        """1.0 when the text is exactly: optional fields (each at most once), then one answer
        field, separated only by whitespace and with no tag inside a field; 0.5 for a parseable
        answer in a messier layout; 0.0 otherwise. Linear time, whatever the text."""
        if not isinstance(text, str) or not text.strip():
            return 0.0
        if self._strict_layout(text):
            return 1.0
        return 0.5 if self.parse_answer(text) is not None else 0.0

    def _strict_layout(self, text: str) -> bool:
        names = [self.answer_tag, *self.optional_tags]
        tag_re = re.compile("<(/?)(" + "|".join(re.escape(t) for t in names) + ")>")
        tags = [(m.start(), m.end(), m.group(1) == "/", m.group(2)) for m in tag_re.finditer(text)]
        # tags must pair up as open/close of the same field, in sequence
        if len(tags) % 2 or not tags:
            return False
        seen: set[str] = set()
        gap_start = 0
        for opening, closing in zip(tags[::2], tags[1::2], strict=True):
            o_start, _, o_closing, o_name = opening
            _, c_end, c_closing, c_name = closing
            if o_closing or not c_closing or o_name != c_name or o_name in seen:
                return False
            if text[gap_start:o_start].strip():
                return False
            seen.add(o_name)
            gap_start = c_end
        # the answer comes last, and nothing but whitespace follows it
        return tags[-1][3] == self.answer_tag and not text[gap_start:].strip()
