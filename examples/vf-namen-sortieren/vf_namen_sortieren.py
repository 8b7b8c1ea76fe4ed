"""vf-namen-sortieren: a verifiers v1 taskset (`import verifiers.v1 as vf`), German, offline.

Each task gives a few German first names and asks for them in alphabetical order as German
dictionaries sort (DIN 5007-1: ä, ö, ü as a, o, u; ß as ss), comma-separated inside
<liste>...</liste>. Code-point order is not that order (Jörg sorts before Julia here, after it by
code point). Rewards, per trace, on the model's reply:
- `sortiert` (weight 1): 1 when its one <liste> block holds exactly the names, in that order;
- `format` (weight 0.2): 1 when its one <liste> block holds the given names, each once, in any
  order (extra, repeated or missing names get 0: padding is never paid);
- metric `namen`: how many names the task gave.
Garbage (no block, two blocks, other names) scores 0 on both.

    pip install -e examples/vf-namen-sortieren
    python -m grpo +env=verifiers env.id=vf-namen-sortieren language=de stages=[eval]

Config (`env.args`): num_tasks (200), names_per_task (4), seed (0): the same tasks every time.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

NAMEN = (
    "Anna Änne Bärbel Bernd Birgit Dörte Dieter Erik Fritz Günther Gustav Hanna Jan Jonas Jörg Julia "
    "Jürgen Karl Käthe Lena Lütfiye Maik Marta Mößner Nils Ole Örjan Otto Paul Ralf Sören Sophie "
    "Ümit Ulrike Uwe Volker Wiebke"
).split()
SYSTEM = "Du sortierst Namen alphabetisch, wie ein deutsches Wörterbuch."
PROMPT = (
    "Sortiere diese Namen alphabetisch (ä wie a, ö wie o, ü wie u, ß wie ss): {names}. "
    "Antworte mit den Namen, durch Kommas getrennt, in <liste>...</liste>."
)
_LIST = re.compile(r"<liste>(.*?)</liste>", re.S)
_DIN = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "ß": "ss"})


def din_key(name: str) -> tuple[str, str]:
    """DIN 5007-1 order: umlauts as their base letters; an exact tie keeps the umlaut second."""
    return name.casefold().translate(_DIN), name.casefold()


def parse(text: str) -> list[str] | None:
    """The names of the reply's one <liste> block, or None (no block, or several)."""
    found = _LIST.findall(text or "")
    if len(found) != 1:
        return None
    return [n.strip() for n in found[0].split(",") if n.strip()]


def reply_of(trace) -> str:
    replies = [m.content or "" for m in trace.assistant_messages]
    return replies[-1] if replies else ""


class NamenData(vf.TaskData):
    names: list[str]


class NamenTask(vf.Task[NamenData]):
    @vf.reward
    async def sortiert(self, task, trace) -> float:
        return 1.0 if parse(reply_of(trace)) == sorted(task.names, key=din_key) else 0.0

    @vf.reward(weight=0.2)
    async def format(self, task, trace) -> float:
        said = parse(reply_of(trace))
        return 1.0 if said is not None and sorted(said) == sorted(task.names) else 0.0

    @vf.metric
    async def namen(self, task) -> float:
        return float(len(task.names))


class NamenConfig(vf.TasksetConfig):
    num_tasks: int = 200
    names_per_task: int = 4
    seed: int = 0


class NamenTaskset(vf.Taskset[NamenTask, NamenConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        k = max(2, min(int(self.config.names_per_task), len(NAMEN)))
        for i in range(self.config.num_tasks):
            names = rng.sample(NAMEN, k)
            yield NamenTask(
                NamenData(
                    idx=i, system_prompt=SYSTEM, prompt=PROMPT.format(names=", ".join(names)), names=names
                ),
                self.config.task,
            )


__all__ = ["NamenTaskset"]
