"""Reward-hacking monitors: what the policy writes, beyond what it earns, per training step.

From the rollouts of one generation batch (one per optimizer step), `batch_monitors` computes:

    monitor/tokens_per_turn  model tokens / model turns over the batch (environment tokens left out)
    monitor/repetition       per completion, the share of its word n-grams (n = REPETITION_N) that
                             repeat an earlier n-gram of the same model turn, pooled over its turns;
                             averaged over the completions that have at least one n-gram
    monitor/format_failure   the share of completions without an answer the rubric can parse
                             (`Environment.has_answer` is False); left out for environments that
                             do not say (has_answer returns None)
    monitor/short_answer     the share of completions whose parsable answer holds fewer items than
                             the row asks for (`Environment.short_answer`: a name of the list left
                             out); left out for environments that do not say
    monitor/truncated        the share of completions cut short by a token limit (a model turn stopped
                             at generation.max_tokens_per_turn or trainer.max_completion_length
                             instead of ending on its own): a policy that stops ending its answers
    monitor/wrong_language   non-English runs: the share of completions whose language-consistency
                             score (grpo.languages.consistency) is below WRONG_LANGUAGE_BELOW, among
                             those with words to judge (names, format tokens and the env's answer
                             blocks are not words here, nor is a Latin sentence without language
                             signal: an answer that is all names, the row's or others, is no vote)

Words are those of grpo.languages.script (a Han or kana character is a word of its own; other
scripts' words are runs of letters) plus runs of digits, compared case-folded. Repetition is
counted within each model turn, so a multi-turn answer that restates its earlier turns (as
alphabet-sort asks) is not repetition. When a batch holds more than one language, every monitor is
also computed per language, as monitor/<name>/<lang>. A monitor with nothing to measure (no
completion with an n-gram, no env verdict) is left out rather than logged as 0.

Light: pure functions over rollouts (grpo.rollout.Rollout or anything with `row`, `completion`,
`env_mask`); no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from grpo.envs.parsers import assistant_turns
from grpo.languages.script import OTHER, SCRIPTS, words_re

PREFIX = "monitor/"
REPETITION_N = 3
WRONG_LANGUAGE_BELOW = 0.5
# how each monitor reads in the compact per-step line
SHORT_NAMES = {
    "tokens_per_turn": "tok/turn",
    "repetition": "rep",
    "format_failure": "no-answer",
    "short_answer": "short",
    "truncated": "cut",
    "wrong_language": "wrong-lang",
}

_WORD = re.compile(words_re((*SCRIPTS, OTHER)).pattern + r"|\d+")

# the env's verdict on one completion: has_answer(row, completion) -> bool | None
AnswerCheck = Callable[[Any, Any], "bool | None"]
# a completion's language-consistency score: fn(completion=, info=) -> float | None
LanguageScore = Callable[..., "float | None"]


def words(text: Any) -> list[str]:
    """The case-folded words of a text, in order (see the module docstring)."""
    return _WORD.findall(text.casefold()) if isinstance(text, str) else []


def repeated_ngrams(text: Any, n: int = REPETITION_N) -> tuple[int, int]:
    """(n-grams that repeat an earlier n-gram of the text, n-grams) of one text's words."""
    tokens = words(text)
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams)), len(grams)


def repetition(completion: Any, n: int = REPETITION_N) -> float | None:
    """The share of a completion's word n-grams that repeat an earlier one of the same model
    turn, pooled over its turns; None when no turn has n words."""
    repeated = total = 0
    for text in assistant_turns(completion):
        r, t = repeated_ngrams(text, n)
        repeated, total = repeated + r, total + t
    return repeated / total if total else None


def tokens_per_turn(rollouts: Sequence[Any]) -> float | None:
    """Model tokens (env_mask 1) / model turns over the rollouts; None without a model turn."""
    tokens = sum(sum(r.env_mask) for r in rollouts)
    turns = sum(len(assistant_turns(r.completion)) for r in rollouts)
    return tokens / turns if turns else None


def share(flags: Iterable[bool | None]) -> float | None:
    """The share of True among the flags that are not None; None when all are None."""
    known = [bool(f) for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def mean(values: Iterable[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return sum(known) / len(known) if known else None


def batch_monitors(
    rollouts: Sequence[Any],
    has_answer: AnswerCheck | None = None,
    language_score: LanguageScore | None = None,
    short_answer: AnswerCheck | None = None,
) -> dict[str, float]:
    """The monitors of one batch (names under PREFIX; per language too when the batch has more
    than one). `has_answer`: the env's check (Environment.has_answer); `language_score`: the
    language-consistency scorer of a non-English run (None: no wrong_language monitor);
    `short_answer`: the env's check (Environment.short_answer)."""
    repetitions = [repetition(r.completion) for r in rollouts]
    no_answer = [_not(_safe(has_answer, r.row, r.completion)) for r in rollouts]
    short = [_safe(short_answer, r.row, r.completion) for r in rollouts]
    wrong = [
        _below(_safe(language_score, completion=r.completion, info=r.row.info, language=r.row.language))
        for r in rollouts
    ]
    languages = [str(r.row.language) for r in rollouts]
    groups: dict[str, list[int]] = {"": list(range(len(rollouts)))}
    if len(set(languages)) > 1:
        for i, code in enumerate(languages):
            groups.setdefault(f"/{code}", []).append(i)
    out: dict[str, float] = {}
    for suffix, index in groups.items():
        values = {
            "tokens_per_turn": tokens_per_turn([rollouts[i] for i in index]),
            "repetition": mean(repetitions[i] for i in index),
            "format_failure": share(no_answer[i] for i in index),
            "short_answer": share(short[i] for i in index),
            "truncated": share(bool(getattr(rollouts[i], "truncated", False)) for i in index),
            "wrong_language": share(wrong[i] for i in index),
        }
        out.update({f"{PREFIX}{name}{suffix}": v for name, v in values.items() if v is not None})
    return out


def _safe(fn: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
    """fn(...), or None without fn or when it raises: a monitor never stops a training run."""
    if fn is None:
        return None
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None


def _not(flag: bool | None) -> bool | None:
    return None if flag is None else not flag


def _below(score: float | None) -> bool | None:
    return None if score is None else score < WRONG_LANGUAGE_BELOW


def compact(logs: dict[str, Any]) -> list[str]:
    """The batch-wide monitors of a log line as short `label value` parts for the progress line."""
    parts = []
    for name, label in SHORT_NAMES.items():
        value = logs.get(f"{PREFIX}{name}")
        if isinstance(value, (int, float)):
            parts.append(f"{label} {value:.3g}")
    return parts


# a share this far above its first measurement in the run is a climb worth a warning
TRUNCATION_CLIMB = 0.2


class ClimbWatch:
    """Says when a monitored share climbs: a language (or the whole batch, "all") whose share is at
    least TRUNCATION_CLIMB above its first measurement in this run, in `sustain` measurements in a
    row, once per language, in one line per measurement (`line`, the subclass's words)."""

    def __init__(self, source: str, sustain: int = 1):
        self.source = source  # "[train]" / "[val]"
        self.sustain = sustain
        self.first: dict[str, tuple[int, float]] = {}
        self.above: dict[str, int] = {}  # measurements in a row above the climb
        self.warned: set[str] = set()

    def update(self, shares: dict[str, float], step: int) -> str | None:
        """`shares`: language code (or "all") -> share at `step`; the warning line, or None."""
        climbed = []
        for code, value in shares.items():
            start = self.first.setdefault(code, (step, value))
            high = start[0] != step and value >= start[1] + TRUNCATION_CLIMB
            self.above[code] = self.above.get(code, 0) + 1 if high else 0
            if code not in self.warned and self.above[code] >= self.sustain:
                self.warned.add(code)
                climbed.append(f"{code} {start[1]:.0%} at step {start[0]} -> {value:.0%} at step {step}")
        return self.line(", ".join(climbed)) if climbed else None

    def line(self, climbed: str) -> str:
        raise NotImplementedError


class TruncationWatch(ClimbWatch):
    """The share of truncated rollouts climbing. A policy that stops ending its answers (junk after
    the answer, to the token budget) shows here long before the reward says so."""

    def __init__(self, source: str, settings: Any):
        # the run's settings say which limits cut and whether cut completions are already out of the loss
        super().__init__(source)
        t = settings.trainer
        self.limits = (
            f"generation.max_tokens_per_turn={settings.generation.max_tokens_per_turn} / "
            f"trainer.max_completion_length={t.max_completion_length}"
        )
        self.advice = (
            "cut completions get no gradient (trainer.mask_truncated_completions), so look at what follows "
            "the answer in the completions table; a lower lr or a KL anchor (trainer.beta) slows the drift"
            if t.mask_truncated_completions
            else "trainer.mask_truncated_completions=true keeps cut completions out of the loss"
        )

    def line(self, climbed: str) -> str:
        return (
            f"{self.source} warning: truncated rollouts climbing ({climbed}; cut at {self.limits}): "
            f"the policy is no longer ending its answers; {self.advice}"
        )


class ShortAnswerWatch(ClimbWatch):
    """The share of answers short of the items asked for (monitor/short_answer) climbing, in two
    logged measurements in a row (a language's share over a logging window moves by 20 points and
    back in a healthy run: measured, zh 2% -> 23% -> 3%). Where the score pays a partial answer more
    than a wrong full one (`pays`: Environment.pays_short_answers) that is reward hacking, not
    learning: measured, it lowered a language's held-out reward. Where it does not, it is a drift
    the score pushes back on, and the line says so."""

    def __init__(self, source: str, pays: bool | None = None):
        super().__init__(source, sustain=2)
        self.pays = pays

    def line(self, climbed: str) -> str:
        head = f"{self.source} warning: answers leaving items out climbing ({climbed}): "
        if self.pays is False:
            return head + (
                "the score charges for an item left out (it pays no short answer more than the full one "
                "misplaced), so GRPO pushes back on it; the language's held-out reward against the SFT "
                "model's says what it costs (trainer.eval_steps), and a KL anchor (trainer.beta=0.04) "
                "keeps the policy nearer its SFT model"
            )
        return head + (
            "the score pays a partial answer more than a wrong full one, and the policy is learning that, "
            "not the task; a score that charges for what is left out (alphabet_sort: env.count_names=true) "
            "or a KL anchor (trainer.beta=0.04) stopped it where it was measured (docs/results.md), and the "
            "language's held-out reward against the SFT model's says what it costs (trainer.eval_steps)"
        )


def truncated_shares(metrics: dict[str, Any], name: str) -> dict[str, float]:
    """{"all" or language code: share} from metrics named `name` and `name`/<code>."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key == name:
            out["all"] = float(value)
        elif key.startswith(name + "/") and "/" not in key[len(name) + 1 :]:
            out[key[len(name) + 1 :]] = float(value)
    return out


# consecutive validation intervals over which the RM must rise while the gold falls
HACKING_PATIENCE = 2


class HackingWatch:
    """Reward hacking seen on the held-out rows: per language, the learned RM's score and a gold
    reward (the env's rubric) at each validation. When the RM score rose and the gold fell at each
    of the last HACKING_PATIENCE validation intervals, and the gold's fall over them exceeds twice
    its standard error where one is given (a fall within the noise of the held-out rows is no
    evidence), `update` returns one warning line naming the language and the numbers (once per
    streak and language). Without a gold reward, the RM ensemble's disagreement rising with the RM
    score is the signal instead. Pure bookkeeping."""

    def __init__(self, source: str = "[val]", patience: int = HACKING_PATIENCE, keep_best: bool = False):
        self.source = source
        self.patience = int(patience)
        self.keep_best = keep_best
        # language -> [(step, rm, signal)]; signal = gold (falls when hacked) or -disagreement
        self.history: dict[str, list[tuple[int, float, float]]] = {}
        self.warned: set[str] = set()

    def update(
        self,
        step: int,
        rm: dict[str, float],
        gold: dict[str, float] | None = None,
        disagreement: dict[str, float] | None = None,
        gold_se: dict[str, float] | None = None,
    ) -> str | None:
        """Record one validation; the warning line when some language is being hacked, else None.
        `gold_se`: per language, the standard error of this validation's gold mean."""
        hacked = []
        for code, score in rm.items():
            noise = 0.0
            if gold is not None and code in gold:
                signal = gold[code]
                noise = 2.0 * float((gold_se or {}).get(code, 0.0))
            elif disagreement is not None and code in disagreement:
                signal = -disagreement[code]
            else:
                continue
            points = self.history.setdefault(code, [])
            points.append((int(step), float(score), float(signal)))
            last = points[-(self.patience + 1) :]
            rising = (
                len(last) == self.patience + 1
                and all(b[1] > a[1] and b[2] < a[2] for a, b in zip(last, last[1:], strict=False))
                and last[0][2] - last[-1][2] > noise
            )
            if not rising:
                self.warned.discard(code)
            elif code not in self.warned:
                self.warned.add(code)
                hacked.append((code, last))
        if not hacked:
            return None
        parts = []
        for code, (a, *_, b) in hacked:
            other = (
                f"rubric (gold) {a[2]:.3f} -> {b[2]:.3f}"
                if gold is not None
                else f"ensemble disagreement {-a[2]:.3f} -> {-b[2]:.3f}"
            )
            parts.append(f"{code}: RM score {a[1]:+.3f} -> {b[1]:+.3f}, {other} (steps {a[0]}-{b[0]})")
        fix = (
            "the checkpoint kept is the best by the gold reward (trainer.keep_best)"
            if self.keep_best and gold is not None
            else "validate with trainer.keep_best=true to keep the best checkpoint by the gold reward"
        )
        return (
            f"{self.source} warning: reward hacking suspected over {self.patience} validations: "
            + "; ".join(parts)
            + f"; the policy is optimising what the RM over-scores: {fix}, raise trainer.beta, or run "
            "preference rounds (reward_model.rounds.every)"
        )
