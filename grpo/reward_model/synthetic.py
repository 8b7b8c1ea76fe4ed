"""Synthetic preference pairs from any environment and any language.

chosen   = the environment's reference episode for a row (`reference_completion`: its ground truth,
           every assistant turn with the environment's turns between them);
rejected = the same episode with a controlled corruption of one or more assistant turns:
  swap       items of the answer swapped (order broken)
  drop       items left out
  duplicate  items repeated
  format     the answer's tags broken: closing tag lost, tags removed, items run together on a line
  language   the reference episode of the same row index in another of the requested languages
and the hard negatives, the ways a policy's answers break down under optimisation (each seen in
GRPO runs against an RM trained on the kinds above only, which scored them above the references):
  repeat       the answer opened, then a fragment of it repeated until a token budget would end it
  unclosed     the answer cut part way, its tag never closed
  script       the answer's letters written in another script (Latin <-> Cyrillic / CJK)
  empty        the answer block with nothing in it (the bare turn left empty without one)
  copy_prompt  the turn replaced by the last user message (the model echoes the prompt)

"Items" are the lines of the answer block (the last <tag>...</tag> of a turn, else its last
\\boxed{...}, else the whole turn) when it has several lines, else its words, else its characters,
so the same corruptions fit sorting, reversing and arithmetic answers alike.

`severity` in [0, 1] sets how much breaks: the share of assistant turns corrupted, the share of
items swapped / dropped / duplicated, how far the format degrades, how long a repetition runs and
how much of an unclosed answer is kept. Every rejected episode is
checked with the environment's own rubric: it must score strictly below the chosen one (a
corruption that happens to be harmless is redrawn), so no pair contradicts the ground truth.

Each pair records its kind in the row's `corruption` key (data.CORRUPTION_KEY, next to `severity`
and `source`), which the stage's pairs files keep: the RM stage reports held-out accuracy per kind.

The command that writes them to a JSONL file is grpo/cli/synthetic.py:

    python -m grpo.cli.synthetic data/prefs.jsonl +env=alphabet_sort \\
        'reward_model.data.synthetic.languages=[en,sv]'
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError
from grpo.generation.base import Messages
from grpo.reward_model.data import CORRUPTION_KEY, PreferencePair

# redraws of a corruption that the rubric does not score below the reference
MAX_ATTEMPTS = 8
_TAG_BLOCK = re.compile(r"<([A-Za-z_][\w\-]*)>(.*?)</\1>", re.DOTALL)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


# ---- corruptions of one assistant turn ---------------------------------------------------------


def _answer_span(text: str) -> tuple[int, int, tuple[int, int] | None]:
    """(start, end) of the answer body in a turn, and the span of its enclosing tag block."""
    blocks = list(_TAG_BLOCK.finditer(text))
    if blocks:
        m = blocks[-1]
        return m.start(2), m.end(2), (m.start(), m.end())
    boxed = list(_BOXED.finditer(text))
    if boxed:
        m = boxed[-1]
        return m.start(1), m.end(1), (m.start(), m.end())
    return 0, len(text), None


def _split_items(body: str) -> tuple[list[str], str, str, str]:
    """(items, separator, leading, trailing): lines, else words, else characters of the body."""
    stripped = body.strip()
    lead = body[: len(body) - len(body.lstrip())]
    trail = body[len(body.rstrip()) :]
    lines = [line for line in stripped.split("\n") if line.strip()]
    if len(lines) >= 2:
        return lines, "\n", lead, trail
    words = stripped.split()
    if len(words) >= 2:
        return words, " ", lead, trail
    return list(stripped), "", lead, trail


def _count(severity: float, n: int) -> int:
    """How many of n things a corruption touches: at least one, all of them at severity 1."""
    return max(1, min(n, round(severity * n)))


def corrupt_items(items: list[str], kind: str, severity: float, rng: random.Random) -> list[str] | None:
    """The items after a swap / drop / duplicate corruption, or None if it cannot change them."""
    if not items:
        return None
    out = list(items)
    if kind == "swap":
        if len(set(out)) < 2:
            return None
        for _ in range(_count(severity, max(1, len(out) // 2))):
            i, j = rng.sample(range(len(out)), 2)
            while out[i] == out[j]:
                i, j = rng.sample(range(len(out)), 2)
            out[i], out[j] = out[j], out[i]
    elif kind == "drop":
        if len(out) < 2:
            return None
        drop = set(rng.sample(range(len(out)), min(len(out) - 1, _count(severity, len(out)))))
        out = [item for i, item in enumerate(out) if i not in drop]
    elif kind == "duplicate":
        for i in sorted(rng.sample(range(len(items)), _count(severity, len(items))), reverse=True):
            out.insert(i + 1, items[i])
    else:
        raise ValueError(f"not an item corruption: {kind}")
    return out if out != items else None


def corrupt_format(text: str, severity: float, rng: random.Random) -> str | None:
    """The turn with its answer format broken, deeper with severity: the closing tag (or brace of
    \\boxed{}) lost, the wrapper removed, the items run together. None without a wrapper."""
    start, end, block = _answer_span(text)
    if block is None:
        return None
    body = text[start:end]
    opening = text[block[0] : start]
    level = min(2, int(severity * 3)) if rng.random() < 0.8 else rng.randrange(3)
    if level == 0:  # the closing tag / brace is lost
        replacement = opening + body
    elif level == 1:  # no wrapper at all
        replacement = body.strip()
    else:  # no wrapper and the items run together on one line
        items, _, _, _ = _split_items(body)
        replacement = ", ".join(item.strip() for item in items)
    return text[: block[0]] + replacement + text[block[1] :]


# ---- hard negatives: a policy's breakdowns --------------------------------------------------------

# characters a repetition runs to: about what a 64-128-token budget holds
_REPEAT_CHARS = (60, 240)


def corrupt_repeat(text: str, severity: float, rng: random.Random) -> str | None:
    """The answer block opened, then a short fragment of its body repeated to a budget's length
    (longer with severity), the tag never closed: a degenerate loop cut by the token limit."""
    start, end, block = _answer_span(text)
    body = text[start:end].strip()
    if not body:
        return None
    size = rng.randint(1, min(4, len(body)))
    at = rng.randrange(len(body) - size + 1)
    fragment = body[at : at + size]
    length = int(_REPEAT_CHARS[0] + severity * (_REPEAT_CHARS[1] - _REPEAT_CHARS[0]))
    loop = (fragment * (length // len(fragment) + 1))[:length]
    head = text[: start if block else 0]
    return head + ("\n" if block else "") + loop


def corrupt_unclosed(text: str, severity: float, rng: random.Random) -> str | None:
    """The answer cut part way (less kept with severity) and its tag left open."""
    start, end, block = _answer_span(text)
    if block is None:
        return None
    items, sep, lead, _ = _split_items(text[start:end])
    keep = max(0, min(len(items) - 1, round((1 - severity) * len(items) * rng.uniform(0.5, 1.0))))
    return text[:start] + lead + sep.join(items[:keep])


def _other_script(ch: str) -> str:
    """A letter of another script: Latin -> Cyrillic, any other letter -> Latin."""
    if not ch.isalpha():
        return ch
    if ch.isascii():
        return chr(0x430 + (ord(ch.lower()) - ord("a")) % 32)
    return chr(ord("a") + ord(ch) % 26)


def corrupt_script(text: str, severity: float, rng: random.Random) -> str | None:
    """The answer's letters written in another script (a policy drifting out of the language's)."""
    start, end, _ = _answer_span(text)
    body = text[start:end]
    new = "".join(_other_script(ch) for ch in body)
    return None if new == body else text[:start] + new + text[end:]


def corrupt_empty(text: str, severity: float, rng: random.Random) -> str | None:
    """The answer block emptied (the turn emptied when it has no block)."""
    start, end, block = _answer_span(text)
    if block is None:
        return "" if text.strip() else None
    return None if not text[start:end].strip() else text[:start] + "\n" + text[end:]


_TURN_CORRUPTIONS = {
    "format": corrupt_format,
    "repeat": corrupt_repeat,
    "unclosed": corrupt_unclosed,
    "script": corrupt_script,
    "empty": corrupt_empty,
}


def corrupt_turn(text: str, kind: str, severity: float, rng: random.Random) -> str | None:
    """One assistant turn after a corruption, or None when the kind does not apply to it
    (copy_prompt and language replace whole turns / episodes: corrupt_episode)."""
    if kind in _TURN_CORRUPTIONS:
        return _TURN_CORRUPTIONS[kind](text, severity, rng)
    start, end, _ = _answer_span(text)
    items, sep, lead, trail = _split_items(text[start:end])
    new_items = corrupt_items(items, kind, severity, rng)
    if new_items is None:
        return None
    return text[:start] + lead + sep.join(new_items) + trail + text[end:]


def corrupt_episode(
    completion: Messages,
    kind: str,
    severity: float,
    rng: random.Random,
    other_language: Messages | None = None,
    prompt: Messages | None = None,
) -> Messages | None:
    """A corrupted copy of an episode; `other_language` is the replacement for kind=language,
    `prompt` the row's prompt (kind=copy_prompt echoes the user message before each turn)."""
    if kind == "language":
        return [dict(m) for m in other_language] if other_language else None
    turns = [i for i, m in enumerate(completion) if m.get("role") == "assistant"]
    if not turns:
        return None
    out = [dict(m) for m in completion]
    changed = False
    for i in rng.sample(turns, _count(severity, len(turns))):
        if kind == "copy_prompt":
            new = _last_user(list(prompt or []) + completion[:i])
        else:
            new = corrupt_turn(out[i]["content"], kind, severity, rng)
        if new is not None and new != out[i]["content"]:
            out[i]["content"] = new
            changed = True
    return out if changed else None


def _last_user(messages: Messages) -> str | None:
    """The text of the last user message (None without one)."""
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return None


# ---- pairs ---------------------------------------------------------------------------------------


def _total(env: Any, row: Any, completion: Messages) -> float:
    return env.rubric.total(env.score(row, completion))


def env_pairs(
    env: Any,
    n: int,
    severity: float,
    corruptions: Sequence[str],
    seed: int,
    other_envs: Sequence[Any] = (),
    split: str = "train",
) -> list[PreferencePair]:
    """n pairs from `env`'s rows (cycling over them when n exceeds the split), each verified by the
    rubric. `other_envs`: the same environment in other languages, for kind=language."""
    rows = env.rows(split, n)
    others = [other.rows(split, n) for other in other_envs]
    rng = random.Random(f"rm-synthetic:{seed}:{env.name}:{env.language}")
    pairs: list[PreferencePair] = []
    for index in range(n):
        row = rows[index % len(rows)]
        chosen = env.reference_completion(row)
        best = _total(env, row, chosen)
        foreign = [env_rows[index % len(env_rows)] for env_rows in others]
        for _ in range(MAX_ATTEMPTS):
            kind = rng.choice(list(corruptions))
            other = None
            if kind == "language" and foreign:
                k = rng.randrange(len(foreign))
                other = other_envs[k].reference_completion(foreign[k])
            rejected = corrupt_episode(chosen, kind, severity, rng, other, row.prompt)
            if rejected is not None and _total(env, row, rejected) < best - 1e-9:
                pairs.append(
                    PreferencePair(
                        prompt=[dict(m) for m in row.prompt],
                        chosen=[dict(m) for m in chosen],
                        rejected=rejected,
                        language=str(row.language),
                        meta={"source": f"synthetic:{env.name}", CORRUPTION_KEY: kind, "severity": severity},
                    )
                )
                break
    return pairs


def synthetic_pairs(
    make_env: Callable[[str], Any],
    languages: Sequence[str],
    n: int,
    severity: float,
    corruptions: Sequence[str],
    seed: int,
) -> list[PreferencePair]:
    """n pairs per language; `make_env(code)` builds the environment in a language."""
    if not 0 <= severity <= 1:
        raise UserError(f"reward_model.data.synthetic.severity={severity} must be in [0, 1]")
    envs = {code: make_env(code) for code in languages}
    pairs: list[PreferencePair] = []
    for code, env in envs.items():
        others = [other for other_code, other in envs.items() if other_code != code]
        made = env_pairs(env, n, severity, corruptions, seed, others)
        if not made:
            raise UserError(
                f"reward_model.data.synthetic: no corruption in {list(corruptions)} made a worse answer for "
                f"{env.name} ({code}); add kinds (e.g. format, drop) or raise severity"
            )
        pairs.extend(made)
    return pairs


# ---- from a run config ---------------------------------------------------------------------------


def env_config(settings: GrpoConfig, name: str | None) -> dict[str, Any]:
    """The plain env config: the run's env (name None) or the conf/env option `name` as Hydra
    composes it (a preset's defaults included), resolved against the run's seed."""
    from omegaconf import OmegaConf

    if name is None:
        if settings.env is None:
            raise UserError("reward_model.data.synthetic.env: no environment; add +env=NAME or set it")
        return dict(settings.env)
    from grpo.compose import compose, group_options

    if name not in group_options("env"):
        raise UserError(
            f"reward_model.data.synthetic.env={name}: no such env (available: {', '.join(group_options('env'))})"
        )
    composed = compose([f"+env={name}", f"seed={settings.seed}"])
    return OmegaConf.to_container(composed.env, resolve=True)  # type: ignore[return-value]


def pairs_from_config(settings: GrpoConfig) -> list[PreferencePair]:
    """The synthetic pairs a run's reward_model.data.synthetic asks for."""
    from grpo.envs import build_env
    from grpo.reward_model import run_languages

    syn = settings.reward_model.data.synthetic
    base = env_config(settings, syn.env)
    # one row per pair: n beyond the env's train split draws more rows, so no held-out pair
    # repeats a training pair's episode
    if "num_train_examples" in base and int(base["num_train_examples"]) < syn.n:
        base = {**base, "num_train_examples": syn.n}
    languages = list(syn.languages) if syn.languages else run_languages(settings.language)

    def make_env(code: str) -> Any:
        return build_env(base, code)

    return synthetic_pairs(
        make_env,
        languages,
        n=syn.n,
        severity=syn.severity,
        corruptions=list(syn.corruptions),
        seed=settings.reward_model.data.seed,
    )


if __name__ == "__main__":  # the retired entry says where it went instead of exiting 0 having done nothing
    from grpo.errors import fail

    fail(
        "python -m grpo.reward_model.synthetic was retired: run python -m grpo.cli.synthetic (same arguments)"
    )
