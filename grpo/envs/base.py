"""The environment API: rows, turns, parsers and rubrics.

An environment is one file in grpo/envs/ plus one YAML in conf/env/ whose `_target_` names the
class; there is no registry. It provides
  - `rows(split, n)`: deterministic dataset rows (prompt messages, info, language) from its seed;
  - `env_response(messages, state)`: for multi-turn envs, the environment's next user turn, or
    None when the episode is over (single-turn envs end after the first model turn);
  - `rubric`: named, weighted reward functions over a finished rollout.

Reward functions take keyword arguments `completion` (the assistant/user turns after the prompt),
`info` (the row's ground truth), `state` (what `env_response` kept) and `prompt`, and return a
float in [0, 1]. `Rubric.score` guarantees that range and that nothing raises, whatever the
model wrote.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


class Environment:
    """Base class. Subclasses set `name`, `max_turns`, build `self.rubric`, and implement
    `make_row(rng, index, split)`; multi-turn environments also override `env_response`."""

    name: str = "env"
    #: upper bound on model turns in one episode
    max_turns: int = 1
    #: True when env_response can continue the episode after a model turn
    multi_turn: bool = False

    def __init__(
        self,
        seed: int = 0,
        num_train_examples: int = 1000,
        num_eval_examples: int = 100,
        language: str = "en",
        name: str | None = None,
    ):
        if num_train_examples < 1 or num_eval_examples < 1:
            raise ValueError("num_train_examples and num_eval_examples must be >= 1")
        self.seed = seed
        self.num_examples = {"train": num_train_examples, "eval": num_eval_examples}
        self.language = language
        if name is not None:
            self.name = name
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
        return [self.make_row(rng, i, split) for i in range(n)]

    def make_row(self, rng: random.Random, index: int, split: str) -> Row:
        raise NotImplementedError

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


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag> in text, or None when there is none."""
    if not isinstance(text, str):
        return None
    matches = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)
    return matches[-1] if matches else None


@dataclass
class XMLParser:
    """Parses answers written as <tag>...</tag> fields; `think` may precede the answer."""

    answer_tag: str = "answer"
    optional_tags: list[str] = field(default_factory=lambda: ["think"])

    def parse_answer(self, text: str) -> str | None:
        content = last_tag_content(text, self.answer_tag)
        return None if content is None else content.strip()

    def format_score(self, text: str) -> float:
        """1.0 when the text is exactly optional fields then the answer field, each once and
        balanced; partial credit for a parseable answer in a messier layout."""
        if not isinstance(text, str) or not text.strip():
            return 0.0
        tags = "|".join(re.escape(t) for t in self.optional_tags)
        opt = rf"(?:\s*<(?:{tags})>.*?</(?:{tags})>)*" if self.optional_tags else ""
        strict = rf"^{opt}\s*<{re.escape(self.answer_tag)}>.*?</{re.escape(self.answer_tag)}>\s*$"
        if re.match(strict, text, flags=re.DOTALL):
            opens = text.count(f"<{self.answer_tag}>")
            return 1.0 if opens == 1 else 0.5
        return 0.5 if self.parse_answer(text) is not None else 0.0
