"""vf-count-letters: a classic verifiers environment (`load_environment`), English, offline.

Each row asks how many times a letter occurs in a word; the model answers inside
<answer>...</answer>. Its rubric, as verifiers scores it:
- `correct_count` (weight 1): 1 when the answer is the count, as digits, else 0;
- `answer_format` (weight 0.2): 1 when the reply is one <answer> tag holding a number in digits and
  nothing else, else 0.
Garbage (no tag, words instead of digits, text around the tag) scores 0 on both.

    pip install -e examples/vf-count-letters
    python -m grpo +env=verifiers env.id=vf-count-letters stages=[eval]

`load_environment(num_examples=200, seed=0)`: distinct questions from the word list below, in a
seeded order (the same rows every time; about 1,400 at most); the first fifth is the eval split.
"""

from __future__ import annotations

import random
import re

import verifiers as vf
from datasets import Dataset

WORDS = (
    "strawberry banana bookkeeper mississippi committee balloon coffee letter address "
    "parallel umbrella seventeen accommodate possession occurrence millennium assessment "
    "embarrass necessary tomorrow raspberry grammar engineer pepper referee success "
    "alphabet reinforcement vacuum giraffe bubble cinnamon daffodil excellent hippopotamus "
    "innocent kangaroo lollipop marshmallow noodle papaya quizzical rhythm satellite teammate "
    "tennessee volunteer waterfall yellow zucchini barrel carrot dessert eggplant freedom"
).split()
ONE_NUMBER = re.compile(r"\s*<answer>\s*\d+\s*</answer>\s*")
SYSTEM = "Count carefully. Reply with the number only, in digits, inside <answer>...</answer>."


def count_rows(num_examples: int, seed: int) -> list[dict]:
    """`num_examples` distinct questions (a word, one of its letters; one in six asks for a letter
    the word lacks, more once the words' own letters are used up), in a seeded order; at most as
    many as the word list holds."""
    rng = random.Random(seed)
    present = [(w, c) for w in WORDS for c in sorted(set(w))]
    absent = [(w, c) for w in WORDS for c in sorted(set("abcdefghijklmnopqrstuvwxyz") - set(w))]
    rng.shuffle(present)
    rng.shuffle(absent)
    pairs = []
    while len(pairs) < num_examples and (present or absent):
        source = absent if (len(pairs) % 6 == 5 and absent) or not present else present
        pairs.append(source.pop())
    return [
        {
            "question": f"How many times does the letter '{letter}' occur in the word '{word}'?",
            "answer": str(word.count(letter)),
            "info": {"word": word, "letter": letter},
        }
        for word, letter in pairs
    ]


def load_environment(num_examples: int = 200, seed: int = 0) -> vf.Environment:
    rows = count_rows(num_examples, seed)
    split = max(1, len(rows) // 5)
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_count(completion, answer, parser) -> float:
        """1 for the exact count in digits, else 0 (garbage, words, several numbers)."""
        said = (parser.parse_answer(completion) or "").strip()
        return 1.0 if said.isdigit() and int(said) == int(answer) else 0.0

    def answer_format(completion) -> float:
        """1 for a reply that is one <answer> tag holding digits, else 0."""
        reply = completion[-1]["content"] if completion else ""
        return 1.0 if ONE_NUMBER.fullmatch(reply or "") else 0.0

    rubric = vf.Rubric(funcs=[correct_count, answer_format], weights=[1.0, 0.2], parser=parser)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows[split:]),
        eval_dataset=Dataset.from_list(rows[:split]),
        system_prompt=SYSTEM,
        parser=parser,
        rubric=rubric,
    )
