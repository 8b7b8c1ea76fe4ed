"""Build the multilingual base shipped in the package: grpo/assets/small_multilingual.

A CPU stand-in for a pretrained multilingual model: it reads and writes every script of the eleven
languages of conf/language and knows the task's format, but not the languages' sort orders. It is
the English warm start (model=small_alphabet_sort: model=small, 3.7M parameters, trained on English
alphabet-sort) trained further, through the sft stage's own code (grpo.sft.train.train_sft, the
demonstrations as a JSONL file), on name lists in all eleven languages, drawn from the same offline
faker names as alphabet-sort:

    copy      "copy these names, in the order given"            -> the names, one per line
    reverse   "write these names in reverse order"              -> the names, last first
    reformat  "write this numbered list one name per line"      -> the names, numbers dropped
    sort      English alphabet-sort reference episodes (one turn of 2-4 names), as the warm start

Copy, reverse and reformat answer in a <names> block laid out like alphabet-sort's block (the
language's own "use exactly this format" line and placeholders); the instructions are in the row's
language. No language but English is ever shown sorted, so the languages' collations (and
code-point order as a stand-in for them) are left for the recipes to teach.

After training, the script measures what it built on held-out rows (another seed): per language,
the share of names copied exactly (the answer's lines equal the names given, in order, greedy
decoding), the same for reverse, and writes them to sft_meta.json ("copy_accuracy",
"reverse_accuracy") next to the float16 weights. The build fails (exit 1) when copy accuracy is
under --min-copy (default 0.8) in any language, leaving the shipped model as it was.
--measure-only measures the base at --out again (--lists=N per language, default 160) and records it
in its sft_meta.json, leaving the weights as they are.

    python scripts/build_multilingual_base.py [--out=DIR] [--steps=N] [--min-copy=0.8] [--lists=160]
        [overrides ...]
    python scripts/build_multilingual_base.py --measure-only [--out=DIR] [--lists=N]

The same seed, data and thread count give the same weights. conf/model/small_multilingual.yaml
loads it; docs/models.md says what it was trained on and what it measured.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

NAME = "small_multilingual"
LANGUAGES = ("en", "de", "fr", "es", "sv", "ru", "ar", "hi", "zh", "ja", "ko")
# the alphabet-sort recipe the base starts from and is trained with (its model is the English
# warm start; its sft.* the learning rate, batch and schedule)
RECIPE = [
    "+experiment=alphabet_sort_multilingual",
    "model=small_alphabet_sort",
    f"language.members=[{','.join(LANGUAGES)}]",
]
# the English warm start's own recipe: its sort demonstrations (one turn of 2-4 English names)
ENGLISH_RECIPE = "+experiment=alphabet_sort_cpu_full"
# the share of each task in the demonstrations (sort: English only)
TASKS = {"copy": 0.4, "reverse": 0.2, "reformat": 0.2, "sort": 0.2}
MIN_NAMES, MAX_NAMES = 1, 5
STEPS = 2000
BATCH = 32
# ~500 names per language: on 40 lists a language's share moved by up to 0.1 between seeds
HELDOUT_PER_LANGUAGE = 160
TAG = "names"
# per language: the instruction of each task; {names} is the names joined by the language's
# alphabet-sort separator, {numbered} the numbered list, one per line
INSTRUCTIONS = {
    "en": (
        "Copy these names exactly, in the order given: {names}",
        "Write these names in reverse order, the last one first: {names}",
        "Write the names of this numbered list one per line, without the numbers:\n{numbered}",
    ),
    "de": (
        "Schreibe diese Namen genau ab, in der angegebenen Reihenfolge: {names}",
        "Schreibe diese Namen in umgekehrter Reihenfolge, den letzten zuerst: {names}",
        "Schreibe die Namen dieser nummerierten Liste einzeln pro Zeile, ohne die Nummern:\n{numbered}",
    ),
    "fr": (
        "Recopiez ces noms exactement, dans l'ordre donné : {names}",
        "Écrivez ces noms dans l'ordre inverse, le dernier en premier : {names}",
        "Écrivez les noms de cette liste numérotée, un par ligne, sans les numéros :\n{numbered}",
    ),
    "es": (
        "Copia estos nombres exactamente, en el orden dado: {names}",
        "Escribe estos nombres en orden inverso, el último primero: {names}",
        "Escribe los nombres de esta lista numerada, uno por línea, sin los números:\n{numbered}",
    ),
    "sv": (
        "Skriv av dessa namn exakt, i den givna ordningen: {names}",
        "Skriv dessa namn i omvänd ordning, det sista först: {names}",
        "Skriv namnen i denna numrerade lista, ett per rad, utan numren:\n{numbered}",
    ),
    "ru": (
        "Перепишите эти имена точно, в данном порядке: {names}",
        "Напишите эти имена в обратном порядке, начиная с последнего: {names}",
        "Напишите имена из этого нумерованного списка по одному в строке, без номеров:\n{numbered}",
    ),
    "ar": (
        "انسخ هذه الأسماء كما هي، بالترتيب المعطى: {names}",
        "اكتب هذه الأسماء بترتيب معكوس، من الأخير إلى الأول: {names}",
        "اكتب أسماء هذه القائمة المرقّمة، اسمًا في كل سطر، دون الأرقام:\n{numbered}",
    ),
    "hi": (
        "इन नामों को दिए गए क्रम में ठीक वैसे ही लिखिए: {names}",
        "इन नामों को उल्टे क्रम में लिखिए, आख़िरी नाम पहले: {names}",
        "इस क्रमांकित सूची के नाम बिना क्रमांक के, हर पंक्ति में एक, लिखिए:\n{numbered}",
    ),
    "zh": (
        "按给出的顺序准确抄写这些名字：{names}",
        "按相反的顺序写出这些名字，从最后一个开始：{names}",
        "把这个编号列表中的名字逐行写出，不要编号：\n{numbered}",
    ),
    "ja": (
        "これらの名前を、与えられた順番のまま正確に書き写してください：{names}",
        "これらの名前を逆の順番で、最後のものから書いてください：{names}",
        "この番号付きリストの名前を、番号なしで一行に一つずつ書いてください：\n{numbered}",
    ),
    "ko": (
        "이 이름들을 주어진 순서대로 정확히 옮겨 쓰세요: {names}",
        "이 이름들을 마지막 것부터 역순으로 쓰세요: {names}",
        "이 번호 목록의 이름을 번호 없이 한 줄에 하나씩 쓰세요:\n{numbered}",
    ),
}
MARK_NAMES, MARK_TEMPLATE = "\x00names\x00", "\x00template\x00"


def format_block(env: Any, code: str, count: int) -> str:
    """The language's alphabet-sort format block ("use exactly this format" + the tag block with
    `count` placeholder lines), with the <names> tag."""
    from grpo.envs.alphabet_sort import FIRST_TAG

    p = env.prompts_for(code)
    rendered = p["first_turn"].format(names=MARK_NAMES, template=MARK_TEMPLATE)
    if MARK_NAMES not in rendered or MARK_TEMPLATE not in rendered:
        raise SystemExit(f"the {code} first_turn prompt has no {{names}} or {{template}}")
    block = rendered.split(MARK_NAMES, 1)[1]
    template = "\n".join(p["placeholder"].format(i=i) for i in range(1, count + 1))
    return block.replace(MARK_TEMPLATE, template).replace(FIRST_TAG, TAG)


def list_task(env: Any, rng: random.Random, code: str, task: str) -> dict[str, Any]:
    """One copy / reverse / reformat conversation in language `code`: {messages, language, names}."""
    from grpo.envs.alphabet_sort import answer_block

    names = [n.text for n in env.name_sources[code].draw(rng, rng.randint(MIN_NAMES, MAX_NAMES))]
    sep = env.prompts_for(code)["separator"]
    instruction = INSTRUCTIONS[code][("copy", "reverse", "reformat").index(task)]
    numbered = "\n".join(f"{i}. {n}" for i, n in enumerate(names, 1))
    prompt = instruction.format(names=sep.join(names), numbered=numbered) + format_block(
        env, code, len(names)
    )
    answer = list(reversed(names)) if task == "reverse" else names
    return {
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer_block(TAG, answer)},
        ],
        "language": code,
        "expected": answer,
    }


def demonstrations(env: Any, english: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """n conversations: the tasks in TASKS' shares, list tasks in a uniformly drawn language, sort
    tasks the English env's train rows (its reference episodes) in order."""
    rng = random.Random(seed)
    tasks = rng.choices(list(TASKS), weights=list(TASKS.values()), k=n)
    sort_rows = iter(english.rows("train", tasks.count("sort")))
    out = []
    for task in tasks:
        if task == "sort":
            row = next(sort_rows)
            out.append({"messages": row.prompt + english.reference_completion(row), "language": "en"})
        else:
            out.append(list_task(env, rng, rng.choice(LANGUAGES), task))
    return out


def list_accuracy(
    model: Any, tokenizer: Any, settings: Any, rows: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Greedy answers to `rows` (list tasks); per language, the share of names written exactly in
    their place (line i of the <names> block == name i) and of rows answered exactly."""
    from grpo.generation import GenRequest, Sampling, make_backend

    backend = make_backend(settings.generation, model, tokenizer, settings.model)
    model.eval()
    requests = [
        GenRequest(max_new_tokens=160, prompt_ids=backend.encode(backend.render(r["messages"][:1], True)))
        for r in rows
    ]
    results = []
    for i in range(0, len(requests), 32):
        results += backend.generate(requests[i : i + 32], Sampling(temperature=0.0, max_tokens_per_turn=160))
    names: dict[str, list[int]] = {}
    exact: dict[str, list[int]] = {}
    for row, result in zip(rows, results, strict=True):
        lines = [line.strip() for line in _block(result.text) if line.strip()]
        want = row["expected"]
        hits = sum(1 for i, name in enumerate(want) if i < len(lines) and lines[i] == name)
        names.setdefault(row["language"], []).append(hits)
        names.setdefault(row["language"] + "/total", []).append(len(want))
        exact.setdefault(row["language"], []).append(int(lines == want))
    return {
        code: {
            "names": sum(names[code]) / sum(names[code + "/total"]),
            "rows": sum(exact[code]) / len(exact[code]),
        }
        for code in LANGUAGES
        if code in exact
    }


def _block(text: str) -> list[str]:
    """The lines of the last complete <names> block (case kept: names are copied exactly)."""
    from grpo.envs.parsers import tag_spans

    spans = tag_spans(text, TAG)
    if not spans:
        return []
    start, end = spans[-1]
    return text[start:end].split("\n")


def heldout(env: Any, task: str, seed: int, per_language: int = HELDOUT_PER_LANGUAGE) -> list[dict[str, Any]]:
    """`per_language` list tasks of kind `task` in every language (another seed than the training's)."""
    rng = random.Random(seed)
    return [list_task(env, rng, code, task) for code in LANGUAGES for _ in range(per_language)]


def list_env() -> Any:
    """The alphabet-sort env of the recipe in all eleven languages: names and prompts of each."""
    from grpo.compose import load_settings
    from grpo.envs import build_env

    settings = load_settings([*RECIPE, "tracking=none"])
    return build_env(settings.env, settings.language)


def measure(
    model: Any, tokenizer: Any, settings: Any, env: Any, per_language: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy (seed 1) and reverse (seed 2) accuracy on `per_language` held-out lists per language,
    printed as a table; the training rows are drawn with seed 0."""
    copy = list_accuracy(model, tokenizer, settings, heldout(env, "copy", seed=1, per_language=per_language))
    reverse = list_accuracy(
        model, tokenizer, settings, heldout(env, "reverse", seed=2, per_language=per_language)
    )
    print(f"held-out, {per_language} lists per language, greedy: names written exactly in place")
    print("| language | copy: names | copy: lists | reverse: names | reverse: lists |")
    print("|---|---|---|---|---|")
    for code in LANGUAGES:
        print(f"| {code} | {copy[code]['names']:.3f} | {copy[code]['rows']:.3f} | "
              f"{reverse[code]['names']:.3f} | {reverse[code]['rows']:.3f} |")  # fmt: skip
    return copy, reverse


def remeasure(out: Path, per_language: int) -> None:
    """--measure-only: measure the base already at `out` again and record it in its sft_meta.json
    (the weights are not touched)."""
    from grpo.compose import load_settings
    from grpo.files import write_json_atomic
    from grpo.models import load_policy
    from grpo.run.layout import SFT_META_FILE

    settings = load_settings([*RECIPE, "tracking=none", f"model.path={out}"])
    model, tokenizer = load_policy(settings.model)
    copy, reverse = measure(model, tokenizer, settings, list_env(), per_language)
    meta = json.loads((out / SFT_META_FILE).read_text())
    meta.update(
        {"copy_accuracy": copy, "reverse_accuracy": reverse, "heldout_lists_per_language": per_language}
    )
    write_json_atomic(out / SFT_META_FILE, meta)
    print(f"recorded in {out / SFT_META_FILE}")


def main(argv: list[str]) -> None:
    import torch

    from grpo.cli.checks import check
    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.files import ASSETS_DIR, replace_dir, write_json_atomic
    from grpo.run.layout import SFT_META_FILE
    from grpo.sft.train import train_sft

    options = {a[2:].split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    overrides = [a for a in argv if not a.startswith("--")]
    out = Path(options.get("out", ASSETS_DIR / NAME))
    try:
        steps = int(options.get("steps", STEPS))
        # a floor against a broken build (900 steps at a constant lr copied 0.46-0.71), not the 0.9
        # aim (docs/models.md: the shipped base copies 0.85-0.97)
        min_copy = float(options.get("min-copy", 0.8))
        lists = int(options.get("lists", HELDOUT_PER_LANGUAGE))
    except ValueError as e:
        print(f"build_multilingual_base: --steps, --lists take a whole number, --min-copy a number ({e})")
        raise SystemExit(2) from None
    if steps < 1 or lists < 1 or not 0.0 <= min_copy <= 1.0:
        print("build_multilingual_base: --steps and --lists must be >= 1, --min-copy in [0, 1]")
        raise SystemExit(2)
    if "--measure-only" in argv:
        remeasure(out, lists)
        return
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-multilingual-base-") as tmp:
        data = Path(tmp) / "demonstrations.jsonl"
        base = [*RECIPE, "tracking=none", "stages=[sft]", f"sft.data_path={data}",
                f"sft.num_examples={steps * BATCH}", f"sft.batch_size={BATCH}", f"sft.max_steps={steps}",
                # decayed to 0: at a constant 2e-3, 900 steps copied 0.46-0.71 of the names exactly
                "sft.lr_scheduler=cosine", "sft.logging_steps=100", *overrides]  # fmt: skip
        env = list_env()
        english_settings = load_settings([ENGLISH_RECIPE, "tracking=none"])
        english = build_env(english_settings.env, english_settings.language)
        rows = demonstrations(env, english, steps * BATCH, seed=0)
        data.write_text(
            "".join(json.dumps({"messages": r["messages"], "language": r["language"]}, ensure_ascii=False) + "\n"
                    for r in rows),
            encoding="utf-8",
        )  # fmt: skip
        settings = load_settings(base)
        check(settings)
        print(f"[base] {len(rows)} demonstrations ({', '.join(f'{t} {s:.0%}' for t, s in TASKS.items())}), "
              f"{steps} steps of {BATCH}, from {settings.model.name}", flush=True)  # fmt: skip
        result = train_sft(settings, env, Path(tmp) / "sft")
        model, tokenizer, sft_dir = result.model, result.tokenizer, result.path
        meta = json.loads((sft_dir / SFT_META_FILE).read_text())
        copy, reverse = measure(model, tokenizer, settings, env, lists)
        low = {c: v["names"] for c, v in copy.items() if v["names"] < min_copy}
        if low:
            raise SystemExit(
                f"copy accuracy under {min_copy} in {', '.join(f'{c} {v:.3f}' for c, v in low.items())}: "
                f"not saved (train longer: --steps=N, now {steps})"
            )
        partial = Path(tmp) / "half"
        model.to(torch.float16).save_pretrained(str(partial))
        tokenizer.save_pretrained(str(partial))
        meta.update(
            {
                "recipe": " ".join([*RECIPE, *overrides]),
                "data": f"{len(rows)} demonstrations: "
                + ", ".join(f"{t} {s:.0%}" for t, s in TASKS.items())
                + f" (list tasks in {', '.join(LANGUAGES)}; sort: English alphabet-sort)",
                "copy_accuracy": copy,
                "reverse_accuracy": reverse,
                "heldout_lists_per_language": lists,
                "saved_dtype": "float16",
                "torch_threads": torch.get_num_threads(),
                "built_by": "scripts/build_multilingual_base.py",
                "build_seconds": round(time.perf_counter() - began, 1),
            }
        )
        write_json_atomic(partial / SFT_META_FILE, meta)
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_dir(partial, out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    params = sum(p.numel() for p in model.parameters())
    print(f"multilingual base: {out} ({params / 1e6:.1f}M parameters, {size / 1e6:.1f} MB, {meta['global_step']} "
          f"steps in {meta['seconds']:.0f} s, {meta['seconds'] / max(meta['global_step'], 1):.2f} s/step; "
          f"{(time.perf_counter() - began) / 60:.1f} min in all)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
