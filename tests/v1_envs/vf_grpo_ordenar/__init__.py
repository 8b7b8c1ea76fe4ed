"""A verifiers v1 taskset written for grpo's tests whose rows carry NO prompt, in Spanish: the
environment opens every episode itself (a scripted user's first message, as the Hub's current
alphabet-sort does), then, with `turns: 2`, asks once more with extra names.

Each task's data has `prompt=None`; the scripted user's messages live in `info["user_turns"]`.
Rewards, per trace: `ordenado` — the share of the episode's turns whose <lista>...</lista> holds
the expected names in order (str.casefold); `formato` (weight 0.25) — the share of turns with
exactly one <lista> block. Installed for a test by putting tests/v1_envs on sys.path
(id: vf-grpo-ordenar).
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

NOMBRES = [
    "Alba",
    "Bruno",
    "Carmen",
    "Diego",
    "Elena",
    "Felipe",
    "Gloria",
    "Hugo",
    "Inés",
    "Jorge",
    "Lucía",
    "Manuel",
    "Nuria",
    "Óscar",
    "Pilar",
    "Ramón",
    "Sofía",
    "Tomás",
    "Úrsula",
    "Vicente",
]
SYSTEM = "Ordenas nombres alfabéticamente."
OPENING = "Hola. Ordena estos nombres: {names}. Responde con los nombres, separados por comas, dentro de <lista>...</lista>."
FOLLOW_UP = "Añade {extra} y vuelve a ordenar la lista completa."
_ANSWER = re.compile(r"<lista>(.*?)</lista>", re.S)


def parse(text: str) -> list[str] | None:
    found = _ANSWER.findall(text or "")
    if len(found) != 1:
        return None
    return [n.strip() for n in found[0].split(",") if n.strip()]


class OrdenarData(vf.TaskData):
    info: dict


class OrdenarTask(vf.Task[OrdenarData]):
    @vf.reward
    async def ordenado(self, task, trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        want = task.info["expected"]
        return sum(parse(r) == w for r, w in zip(replies, want, strict=False)) / len(want)

    @vf.reward(weight=0.25)
    async def formato(self, task, trace) -> float:
        replies = [m.content or "" for m in trace.assistant_messages]
        return sum(parse(r) is not None for r in replies) / len(task.info["expected"])


class OrdenarConfig(vf.TasksetConfig):
    num_tasks: int = 8
    # user turns per episode: 1 (single-turn) or 2 (a follow-up with two more names)
    turns: int = 2
    # a system prompt on the row (the Hub's alphabet-sort has none: its rows are empty)
    system: bool = False
    seed: int = 0


class OrdenarTaskset(vf.Taskset[OrdenarTask, OrdenarConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            picked = rng.sample(NOMBRES, 5)
            names, extra = picked[:3], picked[3:]
            turns = [OPENING.format(names=", ".join(names))]
            expected = [sorted(names, key=str.casefold)]
            if self.config.turns > 1:
                turns.append(FOLLOW_UP.format(extra=" y ".join(extra)))
                expected.append(sorted(names + extra, key=str.casefold))
            yield OrdenarTask(
                OrdenarData(
                    idx=i,
                    system_prompt=SYSTEM if self.config.system else None,
                    prompt=None,  # the scripted user opens the conversation
                    info={"user_turns": turns, "expected": expected},
                ),
                self.config.task,
            )


class OrdenarEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class OrdenarEnv(vf.Env[OrdenarEnvConfig]):
    """The scripted user: every message of the episode's `user_turns`, the first one opening it."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as chat:
            for message in task.data.info["user_turns"]:
                if (await chat.turn(message)).terminated:
                    return


__all__ = ["OrdenarEnv", "OrdenarTaskset"]
