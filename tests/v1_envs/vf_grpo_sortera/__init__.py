"""A small verifiers v1 taskset written for grpo's tests, in Swedish: sort names, then a scripted
user adds names and asks for the whole list again (two model turns per episode).

Rewards (both per trace, over the model's turns): `sorterat` — the share of turns whose
<svar>...</svar> list is the expected list for that turn (sorted by str.casefold); `format` (weight
0.5) — the share of turns with exactly one <svar> block. A metric, `antal_namn`, counts the names.
Installed for a test by putting tests/v1_envs on sys.path (id: vf-grpo-sortera).
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

NAMES = [
    "Astrid",
    "Bertil",
    "Cecilia",
    "David",
    "Elsa",
    "Fredrik",
    "Greta",
    "Hugo",
    "Ingrid",
    "Johan",
    "Karin",
    "Lars",
    "Maja",
    "Nils",
    "Olle",
    "Petra",
    "Rolf",
    "Sigrid",
    "Tove",
    "Ulf",
    "Vera",
]
SYSTEM = "Du sorterar namn i alfabetisk ordning. Svara med namnen, kommaseparerade, inom <svar>...</svar>."
FOLLOW_UP = "Lägg till {extra} och sortera hela listan igen."
_ANSWER = re.compile(r"<svar>(.*?)</svar>", re.S)


def expected_lists(names: list[str], extra: list[str]) -> list[list[str]]:
    """The right answer of each model turn."""
    return [sorted(names, key=str.casefold), sorted(names + extra, key=str.casefold)]


def parse(text: str) -> list[str] | None:
    found = _ANSWER.findall(text or "")
    if len(found) != 1:
        return None
    return [n.strip() for n in found[0].split(",") if n.strip()]


class SorteraData(vf.TaskData):
    names: list[str]
    extra: list[str]


class SorteraTask(vf.Task[SorteraData]):
    @vf.reward
    async def sorterat(self, task, trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        want = expected_lists(list(task.names), list(task.extra))
        return sum(parse(r) == w for r, w in zip(replies, want, strict=False)) / len(want)

    @vf.reward(weight=0.5)
    async def format(self, task, trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        return sum(parse(r) is not None for r in replies) / 2

    @vf.metric
    async def antal_namn(self, task) -> float:
        return float(len(task.names) + len(task.extra))


class SorteraConfig(vf.TasksetConfig):
    num_tasks: int = 8
    seed: int = 0


class SorteraTaskset(vf.Taskset[SorteraTask, SorteraConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            picked = rng.sample(NAMES, 5)
            names, extra = picked[:3], picked[3:]
            yield SorteraTask(
                SorteraData(
                    idx=i,
                    system_prompt=SYSTEM,
                    prompt="Sortera: " + ", ".join(names),
                    names=names,
                    extra=extra,
                ),
                self.config.task,
            )


class SorteraEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class SorteraEnv(vf.Env[SorteraEnvConfig]):
    """The scripted user: takes the model's first answer, then asks for the extra names."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            first = await chat.turn()
            if first.terminated:
                return
            await chat.turn(FOLLOW_UP.format(extra=" och ".join(task.data.extra)))


__all__ = ["SorteraEnv", "SorteraTaskset"]
