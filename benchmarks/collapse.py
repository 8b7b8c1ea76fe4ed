"""Does GRPO break down at the end, how often, and does the collapse watch catch it?

The learning benchmark's GRPO arm (learning_where_rl_helps.py's demonstrator setting: the
five-language recipe, beta 0, no validation, no best checkpoint) over several seeds and language
mixes, one SFT checkpoint per mix reused by every seed; every policy scored by the env's rubric on
the same eval rows x rollouts and seeds as the SFT model, with paired standard errors.

Per run it reports:
- per language, final policy - SFT (paired SE), and whether it is worse than the SFT model by more
  than 2 SE in any language ("worse");
- per language, the share of evaluation rollouts cut by the token limit against the SFT model's
  share + 5 points;
- the collapses the run's watch reported (trainer.on_collapse as given: `none` to measure what the
  runs do untouched, the default `rollback` to measure the product) and, replayed over the run's
  per-step record (<run>/collapse.jsonl), where the watch fires;
- per language, the share of answers with fewer names than given (`short_answers`: what GRPO
  learned where a language's order is hard for the policy; the SFT model's beside it);
- for a run that ended worse, its trajectory (loss, KL, wrong-language, truncated, repetition,
  reward per language) over its steps.

    python benchmarks/collapse.py [--seeds=6] [--first-seed=0] [--mix=en,fr,es,zh,ja] [--sft=PATH]
        [--json=PATH] [--eval-rows=250] [overrides ...]

--first-seed=K runs seeds K..K+seeds-1 (more seeds on a mix measured before, with its --sft).

Several mixes: run one process per mix (--mix), each with --json (written again after every
seed, so a stopped run keeps what it measured); `--summary=a.json,b.json,...` then prints the
table over all of them, replaying the watch of this checkout over the recorded steps. Last line: `worse_share: X` (runs worse than the SFT model
by more than 2 SE in some language / runs). GRPO_BENCH_THREADS=N sets torch's threads.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import MULTILINGUAL, Bench, mean_of, paired, split_args  # noqa: E402

# learning_where_rl_helps.py's demonstrator setting (the one whose seed 1 broke down)
COMMON = [
    *MULTILINGUAL,
    "trainer.eval_steps=0",
    "trainer.keep_best=false",
    "+sft.demonstrator.env.collation=codepoint",
]
WORSE_SE = 2.0
TRUNCATION_SLACK = 0.05
TRAJECTORY_KEYS = ("loss", "kl", "wrong_language", "truncated", "repetition", "reward")


def short_answers(results: Path) -> dict[str, float]:
    """Per language ("all" too), the share of evaluation answers (first turn) with fewer lines
    than the names given (a name left out; a name written twice is not counted here): dropping a name the policy cannot place is paid by the
    similarity score (one of two names: 0.67 ** 4 = 0.20; the two swapped: 0.5 ** 4 = 0.06)."""
    from grpo.envs.alphabet_sort import FIRST_TAG, answer_lines

    counts: dict[str, list[int]] = {}
    if not results.is_file():
        return {}
    for line in results.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        given = len(row["info"]["turn_names"][0])
        first = next((m["content"] for m in row["completion"] if m.get("role") == "assistant"), "")
        short = len(answer_lines(first, FIRST_TAG)) < given
        for key in ("all", row["language"]):
            c = counts.setdefault(key, [0, 0])
            c[0] += 1
            c[1] += short
    return {k: n / total for k, (total, n) in counts.items()}


def read_trajectory(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def replay(trajectory: list[dict[str, Any]]) -> list[int]:
    """The steps where a fresh CollapseWatch fires over a recorded run (what on_collapse=none
    records), so detection can be judged on runs that were left alone."""
    from grpo.train.collapse import CollapseWatch

    watch = CollapseWatch()
    fired = []
    for entry in trajectory:
        signals = {
            k: v for k, v in entry.items() if k not in ("step", "collapse") and isinstance(v, (int, float))
        }
        if watch.update(int(entry["step"]), signals) is not None:
            fired.append(int(entry["step"]))
    return fired


def run_mix(
    mix: str, seeds: range, options: dict[str, str], overrides: list[str], save: Any = None
) -> dict[str, Any]:
    start = time.perf_counter()
    rows = int(options.get("eval-rows", 250))
    bench = Bench([*COMMON, f"language.members=[{mix}]", f"eval.num_examples={rows}", *overrides])
    from grpo.models import load_policy

    model, tokenizer = load_policy(bench.settings.model)
    bench.sft(model, tokenizer, reuse=options.get("sft"))
    print(f"[bench] sft checkpoint: {bench.sft_path}", flush=True)
    codes = sorted(set(bench.languages))
    sft = bench.arms["sft"]
    runs = []
    for seed in seeds:
        label = f"s{seed}"
        arm = bench.grpo(label, seed)
        gains, worse = {}, []
        for code in ["all", *codes]:
            keep = [code == "all" or lang == code for lang in bench.languages]
            g, se = paired(arm.rewards, sft.rewards, keep)
            gains[code] = (g, se, mean_of(arm.rewards, keep))
            if code != "all" and g < -WORSE_SE * se:
                worse.append(code)
        cut = {c: (arm.truncated.get(c, 0.0), sft.truncated.get(c, 0.0)) for c in ["all", *codes]}
        over = [c for c, (a, b) in cut.items() if c != "all" and a > b + TRUNCATION_SLACK + 1e-9]
        trajectory = read_trajectory(bench.out / label / "collapse.jsonl")
        short = short_answers(bench.out / f"eval_{label}" / "results.jsonl")
        runs.append(
            {
                "mix": mix, "seed": seed, "gains": gains, "worse": worse, "truncated": cut,
                "truncation_over": over, "collapses": arm.collapses, "replayed": replay(trajectory),
                "trajectory": trajectory, "seconds": arm.seconds, "short_answers": short,
            }
        )  # fmt: skip
        if save is not None:  # what is measured so far survives a stopped benchmark
            save(result(mix, bench, sft, codes, runs, start))
        print(
            f"[bench] {mix} seed {seed}: all {gains['all'][0]:+.4f} ({gains['all'][1]:.4f}); "
            f"worse in {worse or 'none'}; cut over SFT+5 in {over or 'none'}; "
            f"{len(arm.collapses)} collapse(s) live, replay fires at {replay(trajectory) or 'no step'}",
            flush=True,
        )
    return result(mix, bench, sft, codes, runs, start)


def result(
    mix: str, bench: Bench, sft: Any, codes: list[str], runs: list[dict], start: float
) -> dict[str, Any]:
    return {
        "mix": mix, "sft": {c: mean_of(sft.rewards, [c == "all" or x == c for x in bench.languages])
                            for c in ["all", *codes]},
        "sft_truncated": dict(sft.truncated), "runs": runs, "minutes": (time.perf_counter() - start) / 60,
        "sft_path": str(bench.sft_path), "codes": codes,
        "sft_short_answers": short_answers(bench.out / "eval_sft" / "results.jsonl"),
    }  # fmt: skip


def summary(results: list[dict[str, Any]]) -> float:
    print("\n| mix | seed | all: GRPO − SFT (SE) | lowest language (SE) | worse than SFT by > 2 SE in | "
          "cut > SFT + 5 pts in | answers short of names (SFT) | collapses (live) | watch fires at (replay) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    total = worse = 0
    for result in results:
        for run in result["runs"]:
            run["replayed"] = replay(run["trajectory"])  # the watch as this checkout has it
            total += 1
            worse += bool(run["worse"])
            g, se, _ = run["gains"]["all"]
            low = min((c for c in run["gains"] if c != "all"), key=lambda c: run["gains"][c][0])
            lg, lse, _ = run["gains"][low]
            short, base = run.get("short_answers", {}), result.get("sft_short_answers", {})
            most = max((c for c in short if c != "all"), key=lambda c: short[c], default=None)
            shorts = f"{most} {short[most]:.0%} ({base.get(most, 0):.0%})" if most else "-"
            print(
                f"| {run['mix']} | {run['seed']} | {g:+.4f} ({se:.4f}) | {low} {lg:+.4f} ({lse:.4f}) | "
                f"{', '.join(run['worse']) or '-'} | {', '.join(run['truncation_over']) or '-'} | {shorts} | "
                f"{len(run['collapses'])} | {', '.join(map(str, run['replayed'])) or '-'} |"
            )
    for result in results:
        for run in result["runs"]:
            if run["worse"] or run["truncation_over"] or run["replayed"]:
                trajectory_table(run)
    share = worse / max(total, 1)
    print(f"\nruns worse than the SFT model by more than 2 SE in some language: {worse} of {total}")
    print(f"worse_share: {share:.4f}")
    return share


def trajectory_table(run: dict[str, Any]) -> None:
    """Every 10th step and the last 12 steps of a run's signals."""
    points = run["trajectory"]
    if not points:
        return
    last = points[-1]["step"]
    shown = [p for p in points if p["step"] % 10 == 0 or p["step"] > last - 12]
    codes = sorted({k.split("/", 1)[1] for p in points for k in p if k.startswith("reward/")})
    print(f"\ntrajectory: mix {run['mix']} seed {run['seed']} (worse in {run['worse'] or '-'})")
    print("| step | loss | kl | wrong-lang | cut | rep | reward | " + " | ".join(codes) + " |")
    print("|---" * (7 + len(codes)) + "|")
    for p in shown:
        cells = [f"{p[k]:.3g}" if isinstance(p.get(k), (int, float)) else "-" for k in TRAJECTORY_KEYS]
        langs = [f"{p[f'reward/{c}']:.2f}" if f"reward/{c}" in p else "-" for c in codes]
        mark = " (collapse)" if p.get("collapse") else ""
        print(f"| {p['step']}{mark} | " + " | ".join(cells + langs) + " |")


def main(argv: list[str]) -> None:
    options, overrides = split_args(argv)
    if "summary" in options:
        results = [json.loads(Path(p).read_text(encoding="utf-8")) for p in options["summary"].split(",")]
        summary(results)
        return
    mix = options.get("mix", "en,fr,es,zh,ja")
    out = Path(options["json"]) if "json" in options else None

    def save(measured: dict[str, Any]) -> None:
        if out is not None:
            out.write_text(json.dumps(measured), encoding="utf-8")

    first = int(options.get("first-seed", 0))
    seeds = range(first, first + int(options.get("seeds", 6)))
    measured = run_mix(mix, seeds, options, overrides, save)
    save(measured)
    summary([measured])


if __name__ == "__main__":
    main(sys.argv[1:])
