"""Who says which of two answers is better, for the preference rounds (grpo/reward_model/rounds.py).

    labeler = make_labeler(settings, env)       # reward_model.rounds.labeler
    labeler.prefer(row, a, b)                  # 1: a is better, -1: b is, 0: a tie / no answer

A labeler is one small piece with one method; it is called once per pair, and a round stops
asking at reward_model.rounds.label_budget calls (each call is one label, whatever its answer).

    rubric   the environment's rubric scores both episodes; the higher one wins, equal scores tie.
             It stands in for human annotators (the log says so): the RM then learns the rubric's
             judgments on the policy's own samples, at a label budget far below what GRPO with the
             rubric as reward consumes.
    judge    a model behind an OpenAI-compatible chat endpoint (reward_model.rounds.judge) reads
             the prompt and the two answers, shown in a seeded random order (against position
             bias), with the instruction naming the pair's language, and answers A or B; anything
             else counts as a tie (garbage output is no label). An endpoint that cannot be reached
             is one UserError line.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError
from grpo.generation.base import Messages


class Labeler:
    """Says which of two episodes of a row is better (see the module docstring)."""

    name = "labeler"
    # one line for the logs: who the labels stand for
    description = ""

    def prefer(self, row: Any, a: Messages, b: Messages) -> int:
        """1 when `a` is the better episode for `row`, -1 when `b` is, 0 for a tie or no answer."""
        raise NotImplementedError


class RubricLabeler(Labeler):
    """The environment's rubric as the annotator: the higher total wins."""

    name = "rubric"
    description = "the env's rubric labels the pairs, standing in for human annotators"

    def __init__(self, env: Any):
        self.env = env

    def total(self, row: Any, episode: Messages) -> float:
        return float(self.env.rubric.total(self.env.score(row, episode)))

    def prefer(self, row: Any, a: Messages, b: Messages) -> int:
        sa, sb = self.total(row, a), self.total(row, b)
        return 1 if sa > sb + 1e-9 else -1 if sb > sa + 1e-9 else 0


def _text(messages: Messages) -> str:
    """An episode as plain text, one `role: content` line per message."""
    return "\n".join(f"{m.get('role', 'assistant')}: {m.get('content', '')}" for m in messages)


def judge_prompt(prompt: Messages, first: Messages, second: Messages, language: str) -> str:
    """The judge's instruction: the conversation, the two answers as A and B, and what to reply."""
    from grpo.languages.spec import get_spec

    try:
        name = get_spec(language).name
    except UserError:
        name = language  # a language without a conf/language file: its code
    return (
        f"You compare two answers to the same task. The task and both answers are in {name} ({language}); "
        f"judge them as a careful {name}-speaking expert would: which answer does the task better?\n\n"
        f"### Task\n{_text(prompt)}\n\n### Answer A\n{_text(first)}\n\n### Answer B\n{_text(second)}\n\n"
        "Reply with one letter: A or B."
    )


def parse_verdict(text: str) -> str | None:
    """'A' or 'B' from the judge's reply (its first letter A or B standing alone), else None."""
    for token in text.replace("*", " ").replace(".", " ").replace(":", " ").split():
        if token.upper() in ("A", "B"):
            return token.upper()
    return None


class JudgeLabeler(Labeler):
    """A judge model behind an OpenAI-compatible /chat/completions endpoint (pairwise)."""

    name = "judge"

    def __init__(self, cfg: Any, seed: int = 0):
        self.url = str(cfg.base_url).rstrip("/") + "/chat/completions"
        self.model = str(cfg.model)
        self.key = os.environ.get(str(cfg.api_key_env), "") if cfg.api_key_env else ""
        self.timeout = float(cfg.timeout_s)
        self.max_tokens = int(cfg.max_tokens)
        self.rng = random.Random(f"judge:{seed}")
        self.description = f"judge {self.model} at {cfg.base_url} labels the pairs"

    def ask(self, content: str) -> str:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": self.max_tokens,
                "temperature": 0.0,
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read().decode("utf-8"))
        except (urllib.error.URLError, TimeoutError, OSError) as ex:
            reason = getattr(ex, "reason", ex)
            raise UserError(
                f"reward_model.rounds.judge: the judge at {self.url} cannot be reached ({reason}); start it "
                "or set reward_model.rounds.labeler=rubric"
            ) from None
        except ValueError:
            return ""  # not JSON: no verdict
        try:
            return str(reply["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            return ""

    def prefer(self, row: Any, a: Messages, b: Messages) -> int:
        swapped = self.rng.random() < 0.5
        first, second = (b, a) if swapped else (a, b)
        verdict = parse_verdict(self.ask(judge_prompt(list(row.prompt), first, second, str(row.language))))
        if verdict is None:
            return 0
        a_wins = (verdict == "A") != swapped
        return 1 if a_wins else -1


def make_labeler(settings: GrpoConfig, env: Any) -> Labeler:
    """The labeler reward_model.rounds.labeler names."""
    rounds = settings.reward_model.rounds
    if rounds.labeler == "judge":
        return JudgeLabeler(rounds.judge, settings.seed)
    return RubricLabeler(env)
