"""alphabet_sort: a multi-turn name-sorting task (Environments Hub alphabet-sort 0.1.5 semantics),
in every language of conf/language.

Each row has 1..max_turns turns; every turn introduces new names and the model answers with all
names so far, in alphabetical order, inside <alphabetical_sorted> (turn 1) or
<combined_alphabetical_sorted> (later turns), marking the names new in that turn with
`// new name!`. A turn scores difflib.SequenceMatcher(None, pred, expected).ratio() ** power over
the stripped, lower-cased, non-empty lines of the turn's last tag block; the rollout reward is the
mean over the row's turns (an unanswered turn counts 0).
The Hub's later versions are options, off by default (0.1.5's behaviour), and presets
(conf/env/alphabet_sort_v0_1_{6,7,8}.yaml): `sort_by` first / last / random (0.1.6: by given or
family name, English split at the second capital), `multi_attempt` (0.1.6: several blocks in a turn
must each improve on the one before, else the turn scores 0), `random_template_count` (0.1.7) and
`power_per_turn=false` (0.1.8's flag: the power applies to the mean of the turns' raw ratios).
`count_names` (grpo's, off by default: the seed's 0.1.5 scoring stays the default; grpo's own
recipes turn it on by name): a turn is scored on its first n distinct lines (n = the names
expected), their similarity times the share of the n names they fill, times n / (n + its surplus
lines), so an answer never gains by repeating a name or listing more names than it was given
(`counted_lines`), and leaving a name out costs; off, every line of the block counts in the
similarity, as in 0.1.5, padding can raise a score and leaving out a name the policy cannot place
can pay more than guessing its place.

Names, order and prompts follow the row's language (grpo.languages):
- English is 0.1.5 byte for byte: faker en_US "FirstLast" names in plain code-point order, sorted
  "by FIRST name".
- Every other language: full names in its own script, in its real collation (ICU: sv puts å ä ö
  after z, es ñ after n, de ä with a, ru ё with е, zh in pinyin order, ar ignoring the hamza forms
  of alef; ja by the kana reading). Languages that write the family name first (zh ja ko) sort by
  family name, the others by given name; either way that name leads the full name, so the order is
  the collation of the whole name. The prompt says which name and which order, in the language.
- A row never holds two names that collate equal, so its expected order is unique.
- `collation=codepoint` sorts every language by plain code point instead (Python's sorted(), the order
  an English-centric tool gives): the demonstrator of sft.demonstrator.env that is wrong in zh, ja
  and fr, while the run's env keeps the language's rule.
Tags and `// new name!` are format tokens, the same in every language. The prompt texts are the
`prompts.<code>` blocks of conf/env/alphabet_sort.yaml (keys: PROMPTS).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grpo.envs.base import Environment, Messages, Row, bool_arg, int_arg
from grpo.envs.names import NAME_PARTS, NameSource, as_names, load_names, make_name_source, name_part
from grpo.envs.parsers import assistant_turns, tag_spans
from grpo.envs.prompts import PromptSpec, Text
from grpo.envs.rubric import RewardFunc, Rubric
from grpo.envs.similarity import similarity_ratio
from grpo.errors import UserError
from grpo.languages.collation import collation_key, sort_key
from grpo.languages.collation import sort_names as collation_sorted
from grpo.languages.names import Name

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec

FIRST_TAG = "alphabetical_sorted"
COMBINED_TAG = "combined_alphabetical_sorted"
# env.sort_by: null = the name the language writes first (0.1.5: FIRST in English, the family name
# in zh ja ko); first / last = the given / family name (0.1.6 on); random = first or last per row
SORT_BY = (None, "first", "last", "random")
# env.collation: null = the language's own order (conf/language: sort_key, icu_locale); codepoint =
# plain code-point order of the names, whatever the language (Python's sorted(): what an
# English-centric tool gives; e.g. a demonstrator's order, sft.demonstrator.env)
COLLATIONS = (None, "codepoint")
# draws of a row's names before giving up on distinct given / family names (sort_by set)
MAX_REDRAWS = 1000
# marks a name introduced in the current turn (turn 2 on); a format token, never translated
NEW_NAME_MARKER = "// new name!"
NEW_NAME_SUFFIX = " " + NEW_NAME_MARKER
_FIRST_TURN = Text(("names", "template"), (f"<{FIRST_TAG}>", f"</{FIRST_TAG}>", "{template}", "{names}"))
_FOLLOW_UP = Text(("names",), (NEW_NAME_MARKER, "{names}"))
# a language's prompt block: {names} is the turn's names, shuffled and joined by `separator`;
# {template} the `placeholder` lines of the format block ({i} = 1, 2, ...)
PROMPTS = PromptSpec(
    {
        "first_turn": _FIRST_TURN,
        "first_turn_by_family": _FIRST_TURN,
        "follow_up": _FOLLOW_UP,
        "follow_up_by_family": _FOLLOW_UP,
        # appended to follow_up in turn 2 only
        "follow_up_template": Text(("template",), (f"<{COMBINED_TAG}>", f"</{COMBINED_TAG}>", "{template}")),
        # appended to follow_up from turn 3 on (instead of the template)
        "same_format": Text(),
        "placeholder": Text(("i",), ("{i}",)),
        "separator": Text(),
    }
)


def answer_block(tag: str, lines: Sequence[str]) -> str:
    """An assistant answer: the lines inside <tag>...</tag>, one per line."""
    return f"<{tag}>\n" + "\n".join(lines) + f"\n</{tag}>"


def turn_tag(turn: int) -> str:
    """The answer tag of 1-based turn `turn`."""
    return FIRST_TAG if turn == 1 else COMBINED_TAG


def attempt_lines(text: Any, tag: str) -> list[list[str]]:
    """Every complete <tag> block of one assistant message, left to right, as its stripped,
    lower-cased, non-empty lines (an empty block gives an empty list)."""
    if not isinstance(text, str):
        return []
    return [
        [stripped.lower() for line in text[start:end].split("\n") if (stripped := line.strip())]
        for start, end in tag_spans(text, tag)
    ]


def answer_lines(text: Any, tag: str) -> list[str]:
    """The answer of one assistant message: the last <tag> block's lines (none without a block)."""
    attempts = attempt_lines(text, tag)
    return attempts[-1] if attempts else []


def counted_lines(lines: Sequence[str], expected_count: int) -> tuple[list[str], int]:
    """The lines an answer is scored on, and its surplus: the first `expected_count` distinct
    lines (a repeated line dropped where it repeats), and how many lines the answer has beyond
    them (repeats and lines past the names given)."""
    seen: set[str] = set()
    distinct = [line for line in lines if not (line in seen or seen.add(line))]
    kept = distinct[:expected_count]
    return kept, len(lines) - len(kept)


def _lines_score(lines: Sequence[str], expected: str, power: float, count_names: bool = False) -> float:
    """similarity ** power of the lines (0.1.5). `count_names`: (similarity of the counted lines
    (`counted_lines`) x the share of the n expected names they fill) ** power, times the format
    part n / (n + surplus): a repeated or extra name never raises the score, and each one lowers
    it; a name left out costs as much as the similarity lost, again: one of two names scores
    (0.67 x 1/2) ** 4 = 0.012, below the two swapped (0.5 ** 4 = 0.06), where the similarity alone
    paid it 0.20 and GRPO learned to leave out the names it could not place (docs/results.md)."""
    if not lines:
        return 0.0
    if not count_names:
        return similarity_ratio("\n".join(lines), expected) ** power
    n = expected.count("\n") + 1
    kept, surplus = counted_lines(lines, n)
    filled = len(kept) / n
    return (similarity_ratio("\n".join(kept), expected) * filled) ** power * n / (n + surplus)


def turn_score(
    text: Any, tag: str, expected: str, power: float, multi_attempt: bool = False, count_names: bool = False
) -> float:
    """Score of one assistant message against `expected` (the expected lines prepared the same
    way, see `expected_text`): similarity ** power of its last block (0.1.5). `multi_attempt`
    (0.1.6 on): every block is an attempt, each must score strictly above the one before (else
    the turn scores 0), and the turn scores its last attempt. `count_names`: see `_lines_score`."""
    if not multi_attempt:
        return _lines_score(answer_lines(text, tag), expected, power, count_names)
    scores = [_lines_score(lines, expected, power, count_names) for lines in attempt_lines(text, tag)]
    if not scores:
        return 0.0
    if any(later <= earlier for earlier, later in itertools.pairwise(scores)):
        return 0.0
    return scores[-1]


def expected_text(lines: Sequence[str]) -> str:
    """Expected answer lines as the scorer compares them: stripped, lower-cased, newline-joined."""
    return "\n".join(line.strip().lower() for line in lines)


def turn_scores(
    completion: Any,
    info: dict[str, Any],
    power: float,
    multi_attempt: bool = False,
    count_names: bool = False,
) -> list[float]:
    """Per-turn scores of a rollout; turns the model never answered score 0."""
    ground_truths = info["ground_truths"]
    num_turns = int(info["num_turns"])
    answers = assistant_turns(completion)
    scores = []
    for turn in range(1, num_turns + 1):
        if turn > len(answers) or turn > len(ground_truths):
            scores.append(0.0)
        else:
            scores.append(
                turn_score(
                    answers[turn - 1],
                    turn_tag(turn),
                    expected_text(ground_truths[turn - 1]),
                    power,
                    multi_attempt,
                    count_names,
                )
            )
    return scores


class AlphabetSortEnv(Environment):
    name = "alphabet_sort"
    multi_turn = True
    # the name lists are data, not prose (see Environment.answer_tags)
    answer_tags = (FIRST_TAG, COMBINED_TAG)
    format_tokens = (NEW_NAME_MARKER,)
    prompt_spec = PROMPTS

    def __init__(
        self,
        min_turns: int = 1,
        max_turns: int = 3,
        min_names_per_turn: int = 1,
        max_names_per_turn: int = 5,
        similarity_power: float = 4,
        multi_attempt: bool = False,
        power_per_turn: bool = True,
        sort_by: str | None = None,
        random_template_count: bool = False,
        collation: str | None = None,
        count_names: bool = False,
        names_source: str | None = None,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: LanguageSpec | str = "en",
        name: str | None = None,
        prompts: dict[str, Any] | None = None,
    ):
        super().__init__(seed, num_train_examples, num_eval_examples, language, name, prompts)
        self.min_turns = int_arg("min_turns", min_turns, minimum=1)
        self.max_turns = int_arg("max_turns", max_turns, minimum=self.min_turns)
        self.min_names_per_turn = int_arg("min_names_per_turn", min_names_per_turn, minimum=1)
        self.max_names_per_turn = int_arg(
            "max_names_per_turn", max_names_per_turn, minimum=self.min_names_per_turn
        )
        if (
            isinstance(similarity_power, bool)
            or not isinstance(similarity_power, (int, float))
            or similarity_power <= 0
        ):
            raise UserError(f"env.similarity_power: expected a positive number, got {similarity_power!r}")
        self.similarity_power = similarity_power
        self.multi_attempt = bool_arg("multi_attempt", multi_attempt)
        self.power_per_turn = bool_arg("power_per_turn", power_per_turn)
        if sort_by not in SORT_BY:
            raise UserError(
                f"env.sort_by: expected one of null, {', '.join(str(v) for v in SORT_BY if v)}, got {sort_by!r}"
            )
        self.sort_by = sort_by
        self.random_template_count = bool_arg("random_template_count", random_template_count)
        if collation not in COLLATIONS:
            raise UserError(
                f"env.collation: expected null (the language's order) or codepoint, got {collation!r}"
            )
        self.collation = collation
        self.count_names = bool_arg("count_names", count_names)
        needed = self.max_turns * self.max_names_per_turn
        # a names file is read once, whatever the number of languages (language=mix)
        pool = load_names(names_source) if isinstance(names_source, str) and names_source.strip() else None
        # every language rows can be in, checked now: a too small pool fails at start-up, not in
        # the middle of a run
        self.name_sources: dict[str, NameSource] = {
            spec.code: make_name_source(names_source, spec, needed, pool) for spec in self.language_specs()
        }
        self.rubric = Rubric([RewardFunc("alphabet_sort_reward", self._reward, 1.0)])

    # ---- dataset -----------------------------------------------------------------------------
    def _language(self, language: LanguageSpec | None) -> LanguageSpec:
        if language is not None:
            return language
        if self.spec.is_mix:
            raise ValueError("language=mix: pass the row's language (env.row_spec(split, index))")
        return self.spec

    def sort_names(
        self, names: Sequence[str | Name], language: LanguageSpec | None = None, by: str | None = None
    ) -> list[str]:
        """Names in the language's alphabetical order (English: code-point order of the whole
        joined name, as 0.1.5; ja: the kana reading in gojūon order); `by` first / last: of the
        given / family name only (0.1.6 on)."""
        spec = self._language(language)
        return [n.text for n in self._sorted(self._as_names(names, spec), spec, by)]

    def _sorted(self, names: Sequence[Name], spec: LanguageSpec, by: str | None) -> list[Name]:
        if self.collation == "codepoint":
            return sorted(names, key=lambda n: n.text if by is None else name_part(n, spec, by).text)
        if by is None:
            return collation_sorted(names, spec)
        key = sort_key(spec)
        return sorted(names, key=lambda n: key(name_part(n, spec, by).sort_text))

    @staticmethod
    def _as_names(names: Sequence[str | Name], spec: LanguageSpec) -> list[Name]:
        """Drawn names keep their reading; plain strings look theirs up (ja) or are their own."""
        texts = [n for n in names if not isinstance(n, Name)]
        looked_up = iter(as_names(texts, spec))
        return [n if isinstance(n, Name) else next(looked_up) for n in names]

    def _draw(self, rng: random.Random, spec: LanguageSpec, k: int, by: str | None) -> list[Name]:
        """k names for a row, pairwise distinct in the collation; sorted by one part, no two may
        share that part either (the order must be unique), so such names are drawn one at a time
        and a repeat of a given / family name is drawn again."""
        source = self.name_sources[spec.code]
        if by is None:
            return source.draw(rng, k)
        out: list[Name] = []
        keys: set[Any] = set()
        for _ in range(MAX_REDRAWS + 100 * k):
            (name,) = source.draw(rng, 1)
            key = collation_key(name_part(name, spec, by).sort_text, spec)
            if key not in keys and all(name.text != n.text for n in out):
                keys.add(key)
                out.append(name)
                if len(out) == k:
                    return out
        raise UserError(
            f"env.sort_by={self.sort_by}: could not draw {k} names with distinct {by} names in "
            f"{spec.code}; lower env.max_names_per_turn or env.max_turns"
        )

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        spec = self.row_spec(split, index)
        num_turns = rng.randint(self.min_turns, self.max_turns)
        counts = [rng.randint(self.min_names_per_turn, self.max_names_per_turn) for _ in range(num_turns)]
        by = rng.choice(NAME_PARTS) if self.sort_by == "random" else self.sort_by
        pool = self._draw(rng, spec, sum(counts), by)
        turn_names, start = [], 0
        for count in counts:
            turn_names.append(pool[start : start + count])
            start += count
        shown = []
        for names in turn_names:
            shuffled = list(names)
            rng.shuffle(shuffled)
            shown.append(shuffled)
        templates = self._random_templates(rng, counts) if self.random_template_count else None
        prompts = self.turn_prompts(turn_names, shown, spec, by, templates)
        info: dict[str, Any] = {
            "turn_names": [[n.text for n in names] for names in turn_names],
            "ground_truths": self.ground_truths(turn_names, spec, by),
            "follow_ups": prompts[1:],
            "num_turns": num_turns,
        }
        if by is not None:
            info["sort_by"] = by
        if any(n.sort_text != n.text for n in pool):
            # what the order follows when it is not the names themselves (ja: the kana readings)
            info["turn_readings"] = [[n.sort_text for n in names] for names in turn_names]
        return Row(id=index, prompt=[{"role": "user", "content": prompts[0]}], info=info, language=spec.code)

    def _random_templates(self, rng: random.Random, counts: Sequence[int]) -> list[tuple[int, int]]:
        """0.1.7 on: the format blocks of turns 1 and 2 show a random number of placeholder lines
        (turn 1: min..max names per turn; turn 2: min..all names so far), and turn 2 marks the
        lines after a random one as new."""
        first = rng.randint(self.min_names_per_turn, self.max_names_per_turn)
        if len(counts) < 2:
            return [(first, first)]
        second = rng.randint(self.min_names_per_turn, counts[0] + counts[1])
        return [(first, first), (second, rng.randint(0, second - 1))]

    def ground_truths(
        self,
        turn_names: Sequence[Sequence[str | Name]],
        language: LanguageSpec | None = None,
        by: str | None = None,
    ) -> list[list[str]]:
        """Expected answer lines of every turn: all names so far, in the language's order (`by`:
        of their first / last name); from turn 2 on, the names introduced in that turn end with
        ` // new name!`."""
        spec = self._language(language)
        out: list[list[str]] = []
        seen: list[Name] = []
        for turn, names in enumerate(turn_names, 1):
            named = self._as_names(names, spec)
            seen.extend(named)
            new = {n.text for n in named} if turn > 1 else set()
            out.append(
                [n.text + NEW_NAME_SUFFIX if n.text in new else n.text for n in self._sorted(seen, spec, by)]
            )
        return out

    def turn_prompts(
        self,
        turn_names: Sequence[Sequence[str | Name]],
        shown: Sequence[Sequence[str | Name]],
        language: LanguageSpec | None = None,
        by: str | None = None,
        templates: Sequence[tuple[int, int]] | None = None,
    ) -> list[str]:
        """The user message of every turn, in the language; `shown` is each turn's names in
        display order. `by` first / last asks for given / family name order; by default
        family-name-first languages (zh ja ko) ask for family-name order, the others for given.
        `templates`: (placeholder lines, lines up to which no `// new name!`) of turns 1 and 2;
        by default the real counts (0.1.5)."""
        spec = self._language(language)
        p = self.prompts_for(spec)
        by_family = spec.family_first if by is None else by == "last"
        first_turn, follow_up = (
            ("first_turn_by_family", "follow_up_by_family") if by_family else ("first_turn", "follow_up")
        )
        prompts: list[str] = []
        previous = 0
        for turn, names in enumerate(shown, 1):
            listed = p["separator"].join(str(n) for n in names)
            count = previous + len(turn_names[turn - 1])
            lines, old = templates[turn - 1] if templates and turn <= len(templates) else (count, previous)
            if turn == 1:
                template = "\n".join(p["placeholder"].format(i=i) for i in range(1, lines + 1))
                prompts.append(p[first_turn].format(names=listed, template=template))
            elif turn == 2:
                template = "\n".join(
                    p["placeholder"].format(i=i) + (NEW_NAME_SUFFIX if i > old else "")
                    for i in range(1, lines + 1)
                )
                prompts.append(
                    p[follow_up].format(names=listed) + p["follow_up_template"].format(template=template)
                )
            else:
                prompts.append(p[follow_up].format(names=listed) + p["same_format"])
            previous = count
        return prompts

    # ---- interaction -------------------------------------------------------------------------
    def initial_state(self, row: Row) -> dict[str, Any]:
        return {"turn": 0, "num_turns": self.num_turns(row)}

    def env_response(self, messages: Messages, state: dict[str, Any], row: Row) -> Messages | None:
        answered = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        state["turn"] = answered
        if answered < 1:
            raise ValueError("env_response is called after a model turn; the conversation has none")
        if answered >= self.num_turns(row):
            return None
        return [{"role": "user", "content": row.info["follow_ups"][answered - 1]}]

    def reference_completion(self, row: Row) -> Messages:
        completion: Messages = []
        for turn, lines in enumerate(row.info["ground_truths"], 1):
            completion.append({"role": "assistant", "content": answer_block(turn_tag(turn), lines)})
            if turn < row.info["num_turns"]:
                completion.append({"role": "user", "content": row.info["follow_ups"][turn - 1]})
        return completion

    # ---- scoring -----------------------------------------------------------------------------
    def has_answer(self, row: Row, completion: Messages) -> bool:
        """Every turn of the row answered with a non-empty block of its turn's tag."""
        answers = assistant_turns(completion)
        turns = self.num_turns(row)
        return len(answers) >= turns and all(
            answer_lines(answers[turn - 1], turn_tag(turn)) for turn in range(1, turns + 1)
        )

    def short_answer(self, row: Row, completion: Messages) -> bool:
        """Some answered turn lists fewer lines than the names it was to sort: a name left out.
        The Hub's similarity score pays for that where the order is hard for the policy (one of
        two names: 0.67 ** 4 = 0.20; the two swapped: 0.5 ** 4 = 0.06), and GRPO learns it
        (measured: 92% of a run's ja answers against the SFT model's 0.5%, docs/results.md);
        `count_names` makes it cost (one of two: 0.012)."""
        answers = assistant_turns(completion)
        truths = row.info["ground_truths"]
        return any(
            0 < len(answer_lines(answers[turn - 1], turn_tag(turn))) < len(truths[turn - 1])
            for turn in range(1, min(len(answers), len(truths)) + 1)
        )

    def pays_short_answers(self) -> bool:
        """The Hub's scoring does; `count_names` does not (tests/test_envs_alphabet_sort.py: a
        name left out scores below that name at its worst place, in every language)."""
        return not self.count_names

    def turn_scores(self, completion: Messages, info: dict[str, Any]) -> list[float]:
        """Per-turn scores (for logging): similarity ** power each, or (power_per_turn=false) the
        raw similarities, whose mean the power then applies to."""
        power = self.similarity_power if self.power_per_turn else 1
        return turn_scores(completion, info, power, self.multi_attempt, self.count_names)

    def _reward(
        self,
        completion: Any = None,
        info: dict[str, Any] | None = None,
        state: dict[str, Any] | None = None,
        **_: Any,
    ) -> float:
        info = dict(info or {})
        if "num_turns" not in info and state:
            info["num_turns"] = state.get("num_turns", 0)
        scores = self.turn_scores(completion, info)
        total = 0.0
        for score in scores:
            total += score
        mean = total / len(scores) if scores else 0.0
        return mean if self.power_per_turn else mean**self.similarity_power
