"""The environment API: the environment and row types.

An environment is one file (a subclass of `Environment`) plus one YAML in conf/env/ whose
`_target_` names the class and whose other keys are its constructor's arguments; there is no
registry. It provides
  - `rows(split, n)`: deterministic dataset rows (prompt messages, info, language) from its seed;
  - `env_response(messages, state, row)`: for multi-turn envs, the environment's next user turn
    (a 1-element message list), or None when the episode is over (single-turn envs end after the
    first model turn); `messages` is the whole conversation so far;
  - `rubric`: named, weighted reward functions over a finished rollout (grpo/envs/rubric.py).

Languages: the `language` argument is a LanguageSpec or a code of conf/language (`en`, `sv`,
..., `mix`); build_env passes the run's `language` group as a LanguageSpec, overrides included.
It becomes `self.spec` and `self.language` (the code). Under language=mix every row has its own
language (`row_spec(split, index)`: exact proportions, seeded by the env seed). `rows` copies each
row's language into `info["language"]`, where the rewards read it.

Prompts: the `prompts` argument holds the environment's texts per language (`{code: {key:
text}}`, the `prompts:` mapping of its YAML); the class declares what a block holds as
`prompt_spec` (grpo/envs/prompts.py). The block of every language rows can be in is checked at
construction; `prompt(language, key, **fields)` and `prompts_for(language)` read them.
Constructor arguments are checked with `int_arg` so a bad `env.<key>` override gives a one-line
error. Shared helpers: grpo/envs/parsers.py (tags, assistant turns), grpo/envs/similarity.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from grpo.envs.prompts import PromptSpec
from grpo.envs.rubric import Rubric
from grpo.errors import UserError
from grpo.generation.base import Messages

if TYPE_CHECKING:
    from grpo.languages.spec import LanguageSpec


@dataclass
class Row:
    """One task: the prompt messages, the ground truth and the language of the prompt."""

    id: int
    prompt: Messages
    info: dict[str, Any]
    language: str = "en"


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


def bool_arg(key: str, value: Any) -> bool:
    """`value` as a bool: true/false only (YAML and Hydra overrides give real bools)."""
    if not isinstance(value, bool):
        raise UserError(f"env.{key}: expected true or false, got {value!r}")
    return value


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
    #: format tokens the texts keep verbatim in every language (e.g. `// new name!`): the
    #: language-consistency reward does not count them
    format_tokens: tuple[str, ...] = ()
    #: what each language's block of `prompts` holds (grpo/envs/prompts.py)
    prompt_spec: PromptSpec = PromptSpec()

    def __init__(
        self,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: LanguageSpec | str = "en",
        name: str | None = None,
        prompts: Mapping[str, Any] | None = None,
    ):
        from grpo.languages.spec import as_spec

        self.seed = int_arg("seed", seed)
        self.num_examples = {
            "train": int_arg("num_train_examples", num_train_examples, minimum=1),
            "eval": int_arg("num_eval_examples", num_eval_examples, minimum=1),
        }
        if name is not None:
            self.name = name
        self.spec = as_spec(language)
        #: the language code ("mix" under language=mix, where each row carries its own)
        self.language = self.spec.code
        self._row_languages: dict[str, list[str]] = {}
        #: the checked prompt block of every language rows can be in, by code
        self.prompts = self._checked_prompts(prompts)
        self.rubric = Rubric([])

    def _checked_prompts(self, prompts: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
        if not self.prompt_spec.texts and not prompts:
            return {}  # the environment uses no prompt texts
        prompts = {} if prompts is None else prompts
        if not isinstance(prompts, Mapping):
            raise UserError(
                "env.prompts: expected a mapping of language codes to prompt blocks, e.g. {en: {...}}"
            )
        checked = {}
        for spec in self.language_specs():
            if spec.code not in prompts:
                self._no_prompts(spec.code, prompts)
            checked[spec.code] = self.prompt_spec.check(prompts[spec.code], f"env.prompts.{spec.code}")
        return checked

    def _no_prompts(self, code: str, given: Mapping[str, Any]) -> NoReturn:
        """Raise the UserError of a language without a prompt block."""
        example = f"its `{next(iter(given))}:` block shows the keys" if given else "see its prompt_spec"
        raise UserError(
            f"env.prompts.{code}: {self.name} has no prompts for language {code!r}; add a `{code}:` "
            f"block under `prompts:` in its YAML (conf/env/{self.name}.yaml; {example})"
        )

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

    # ---- languages and prompts -------------------------------------------------------------
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

    def prompts_for(self, language: LanguageSpec | str) -> dict[str, Any]:
        """The prompt block of a language rows can be in (a LanguageSpec or a code)."""
        code = language if isinstance(language, str) else language.code
        if code not in self.prompts:
            self._no_prompts(code, self.prompts)
        return self.prompts[code]

    def prompt(self, language: LanguageSpec | str, key: str, **fields: Any) -> str:
        """One prompt text of a language, with its {fields} filled in (a text without fields is
        returned verbatim)."""
        text = self.prompts_for(language)[key]
        return text.format(**fields) if fields else text

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
    def score(
        self, row: Row, completion: Messages, state: dict[str, Any] | None = None
    ) -> dict[str, float | None]:
        return self.rubric.score(prompt=row.prompt, completion=completion, info=row.info, state=state or {})

    def has_answer(self, row: Row, completion: Messages) -> bool | None:
        """Whether the completion holds an answer the rubric's parser can read (False: a format
        failure, which training monitors as monitor/format_failure). None: this environment does
        not say, and the monitor is left out. Never raises on any model output."""
        return None

    def short_answer(self, row: Row, completion: Messages) -> bool | None:
        """Whether an answer the parser can read holds fewer items than the row asks for (a name of
        a list left out): a score that pays partial answers can be gamed that way, which training
        monitors as monitor/short_answer. None: this environment does not say. Never raises."""
        return None

    def pays_short_answers(self) -> bool | None:
        """Whether the score can pay an answer that leaves an item out more than the full answer
        with that item misplaced (what makes a climb of short answers a hack the policy is paid
        for, rather than a drift the score pushes back on). None: this environment does not say."""
        return None


def reference_of(env: Any) -> Callable[[Row], Messages] | None:
    """`env.reference_completion` when the env has reference episodes (it answers for its first train
    row), else None: the reward guards and the preference rounds of a learned RM use them."""
    try:
        rows = env.rows("train", 1)
        if not rows:
            return None
        env.reference_completion(rows[0])
    except NotImplementedError:
        return None
    return env.reference_completion
