"""Where does RL earn its keep? GRPO against SFT given the same time, where demonstrations are wrong
or scarce, in every language of a mix.

Two settings of alphabet-sort (the five-language recipe, conf/experiment/alphabet_sort_multilingual
.yaml: from the multilingual base model=small_multilingual, which copies every script but sorts
English only; one turn of 2-4 names). In each, ONE SFT checkpoint
and these arms from it, every policy scored by the env's own rubric on the same eval rows x rollouts
and seeds (benchmarks/learning.py), with paired standard errors:

    sft          the SFT model (also the lr=0 control)
    more_sft     SFT continued for the training seconds of one GRPO run (the mean over the seeds),
                 on the same demonstrations
    grpo_s0/s1   GRPO on the rubric from the SFT model, trainer.seed 0 and 1 (reported apart and as
                 their mean, "GRPO")

Settings (--setting=demonstrator|scarce|both, default both):

  demonstrator   demonstrations written by an English-centric tool: the env in code-point order
                 (+sft.demonstrator.env.collation=codepoint), wrong wherever the language's
                 collation differs (zh and ja in most rows, fr in some). SFT imitates it; GRPO and the
                 evaluation score with the language's rule. Reported per language on the rows where
                 the demonstrator is wrong ("affected") and on the others. Default members
                 en, fr, es, zh, ja.
  scarce         scarce native demonstrations: --per-language=N per language on top of the
                 multilingual base (sft.num_examples_per_language=N); more SFT re-reads the same N, GRPO
                 draws new prompts scored by each language's rubric. Default members en, sv, ru, zh, ja.

Overrides after the options apply to both settings (e.g. 'language.members=[de,es,ru,zh,ja]').
Each arm also draws its held-out reward against training seconds (the last val_num_examples eval
rows x 4, every --interval seconds; the scoring does not count as training time): one plot per
setting, per language, GRPO (both seeds) and more SFT from the same checkpoint (--plot-dir, default
docs/). With --tracking (default: the default MLflow store) each setting is also an MLflow run in
experiment grpo-learning-benchmarks: the per-language gains as metrics, the plot and the report as
artifacts.

    python benchmarks/learning_where_rl_helps.py [--setting=both] [--per-language=N] [--interval=30]
        [--plot-dir=docs] [--tracking=none] [overrides ...]

Last line: `worst_gain: X`, the smallest per-language GRPO - more SFT over both settings (on the
affected rows of each language where at least 10% of rows are affected, for the first).
GRPO_BENCH_THREADS=N sets torch's threads (default: one per core).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import MULTILINGUAL, Bench, mean_of, merged, paired, split_args, wall_clock_curve  # noqa: E402

SEEDS = (0, 1)
# the two settings' recipes on top of the five-language one; the curves replace GRPO's own
# validation (the same rows, scored the same way for both arms)
COMMON = [*MULTILINGUAL, "trainer.eval_steps=0", "trainer.keep_best=false"]
SETTINGS = {
    "demonstrator": ["language.members=[en,fr,es,zh,ja]", "+sft.demonstrator.env.collation=codepoint"],
    # 300 SFT steps of 32, as the demonstrator setting's SFT: ~15 passes over 5 x 128 demonstrations
    "scarce": ["language.members=[en,sv,ru,zh,ja]", "sft.max_steps=300"],
}
# demonstrations per language in the scarce setting (docs/results.md: the held-out rewards that chose it)
PER_LANGUAGE = 128
# a language's affected rows count in worst_gain when at least this share of its rows is affected
AFFECTED_SHARE = 0.10
# the truncation target: after GRPO, at most the SFT model's share + this, in every language
TRUNCATION_SLACK = 0.05
CURVE_ROLLOUTS = 4


def affected_rows(bench: Bench) -> list[bool]:
    """Per eval row: the demonstrator's reference episode differs from the run env's (what the
    rubric scores 1.0), i.e. SFT was taught a wrong answer for rows like it."""
    from grpo.sft.data import demonstration_env

    demonstrator, _ = demonstration_env(bench.settings, bench.env)
    n = bench.settings.eval.num_examples
    ours, theirs = bench.env.rows("eval", n), demonstrator.rows("eval", n)
    return [
        a.prompt != b.prompt or bench.env.reference_completion(a) != demonstrator.reference_completion(b)
        for a, b in zip(ours, theirs, strict=True)
    ]


def run_setting(name: str, overrides: Sequence[str], options: dict[str, str]) -> dict[str, Any]:
    """One setting's arms, report and plot; returns {"gains": {lang: GRPO - more SFT}, ...}."""
    start = time.perf_counter()
    extra = list(SETTINGS[name])
    if name == "scarce":
        extra.append(f"sft.num_examples_per_language={int(options.get('per-language', PER_LANGUAGE))}")
    bench = Bench([*COMMON, *extra, *overrides])
    from grpo.train.heldout import heldout_rows

    rows = heldout_rows(bench.env, bench.settings.trainer.val_num_examples)
    interval = float(options.get("interval", 30))

    def curve() -> Any:
        return wall_clock_curve(bench, interval, rows, CURVE_ROLLOUTS)

    from grpo.models import load_policy

    model, tokenizer = load_policy(bench.settings.model)
    bench.sft(model, tokenizer, reuse=options.get(f"sft-{name}"))
    grpo = [bench.grpo(f"grpo_s{seed}", seed, curve=curve()) for seed in SEEDS]
    bench.more_sft(sum(a.seconds for a in grpo) / len(grpo), curve=curve())
    members = ",".join(bench.settings.language.members or [])
    print(f"\n=== {name}: alphabet-sort in {members} (model {bench.settings.model.name}) ===")
    bench.arms_line()
    masks = {"all rows": [True] * len(bench.languages)}
    if name == "demonstrator":
        affected = affected_rows(bench)
        masks = {"affected": affected, "other": [not a for a in affected]}
    report = table(bench, [a.label for a in grpo], masks)
    bench.policies([a.label for a in grpo])
    truncation = truncation_table(bench, [a.label for a in grpo])
    padded = padded_table(bench, [a.label for a in grpo])
    plot = plot_clock(bench, name, [a.label for a in grpo], Path(options.get("plot-dir", "docs")))
    minutes = (time.perf_counter() - start) / 60
    print(f"plot: {plot}\n{name}: {minutes:.1f} min")
    if name == "demonstrator":
        share = {
            c: sum(a for a, lang in zip(affected, bench.languages, strict=True) if lang == c)
            / bench.languages.count(c)
            for c in set(bench.languages)
        }
        gains = {c: g for c, g in report["affected"].items() if c != "all" and share[c] >= AFFECTED_SHARE}
    else:
        gains = {c: g for c, g in report["all rows"].items() if c != "all"}
    return {
        "bench": bench, "gains": gains, "plot": plot, "minutes": minutes, "truncation": truncation, "padded": padded,
    }  # fmt: skip


def table(bench: Bench, grpo_labels: list[str], masks: dict[str, list[bool]]) -> dict[str, dict[str, float]]:
    """Per row group and language: each arm's mean, GRPO - more SFT and GRPO - SFT with paired SEs
    (markdown rows); returns group -> language -> GRPO - more SFT."""
    arms = bench.arms
    grpo = merged(*(arms[k] for k in grpo_labels))
    codes = ["all", *sorted(set(bench.languages))]
    out: dict[str, dict[str, float]] = {}
    for group, mask in masks.items():
        print(f"\n{group}:")
        print("| language | rows | SFT | more SFT | " + " | ".join(grpo_labels) + " | GRPO (mean) "
              "| GRPO − more SFT (SE) | GRPO − SFT (SE) |")  # fmt: skip
        print("|---" * (7 + len(grpo_labels)) + "|")
        out[group] = {}
        for code in codes:
            keep = [
                m and (code == "all" or lang == code) for m, lang in zip(mask, bench.languages, strict=True)
            ]
            if not any(keep):
                continue
            cells = [mean_of(arms[k].rewards, keep) for k in ("sft", "more_sft", *grpo_labels)]
            g, g_se = paired(grpo, arms["more_sft"].rewards, keep)
            s, s_se = paired(grpo, arms["sft"].rewards, keep)
            out[group][code] = g
            print(f"| {code} | {sum(keep)} | " + " | ".join(f"{v:.4f}" for v in cells)
                  + f" | {mean_of(grpo, keep):.4f} | {g:+.4f} ({g_se:.4f}) | {s:+.4f} ({s_se:.4f}) |")  # fmt: skip
    for k in grpo_labels:
        g, se = paired(arms[k].rewards, arms["more_sft"].rewards)
        print(f"{k} - more_sft (all rows): {g:+.4f} (SE {se:.4f})")
    return out


def truncation_table(bench: Bench, grpo_labels: list[str]) -> dict[str, bool]:
    """The share of truncated eval rollouts per arm and language; returns language -> whether every
    GRPO arm stays within the SFT model's share + TRUNCATION_SLACK."""
    arms = bench.arms
    labels = ["sft", "more_sft", *grpo_labels]
    codes = ["all", *sorted(set(bench.languages))]
    print("\ntruncated eval rollouts (cut by a token limit):")
    print("| language | " + " | ".join(labels) + " |")
    print("|---" * (1 + len(labels)) + "|")
    ok = {}
    for code in codes:
        print(f"| {code} | " + " | ".join(f"{arms[k].truncated.get(code, 0.0):.1%}" for k in labels) + " |")
        limit = arms["sft"].truncated.get(code, 0.0) + TRUNCATION_SLACK
        ok[code] = all(arms[k].truncated.get(code, 0.0) <= limit + 1e-9 for k in grpo_labels)
    print(
        "GRPO within the SFT model's share + 5 points: "
        + ", ".join(f"{c} {'yes' if v else 'NO'}" for c, v in ok.items())
    )
    return ok


def padded_share(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per language ("all" too): the share of rollouts with a turn whose answer block holds more
    lines than the turn's expected names, or a line twice (padding)."""
    from grpo.envs.alphabet_sort import answer_lines, turn_tag
    from grpo.envs.parsers import assistant_turns

    flags: dict[str, list[bool]] = {}
    for rec in records:
        answers = assistant_turns(rec["completion"])
        padded = False
        for turn, expected in enumerate(rec["info"]["ground_truths"], 1):
            lines = answer_lines(answers[turn - 1], turn_tag(turn)) if turn <= len(answers) else []
            padded |= len(lines) > len(expected) or len(set(lines)) < len(lines)
        for key in ("all", rec["language"]):
            flags.setdefault(key, []).append(padded)
    return {k: sum(v) / len(v) for k, v in flags.items()}


def padded_table(bench: Bench, grpo_labels: list[str]) -> dict[str, dict[str, float]]:
    """The share of padded eval rollouts (padded_share) per arm and language; returns arm ->
    language -> share."""
    labels = ["sft", "more_sft", *grpo_labels]
    shares = {}
    for k in labels:
        with (bench.out / f"eval_{k}" / "results.jsonl").open(encoding="utf-8") as f:
            shares[k] = padded_share([json.loads(line) for line in f])
    codes = ["all", *sorted(set(bench.languages))]
    print("\npadded eval rollouts (more lines than names given, or a name twice):")
    print("| language | " + " | ".join(labels) + " |")
    print("|---" * (1 + len(labels)) + "|")
    for code in codes:
        print(f"| {code} | " + " | ".join(f"{shares[k].get(code, 0.0):.1%}" for k in labels) + " |")
    return shares


def plot_clock(bench: Bench, name: str, grpo_labels: list[str], plot_dir: Path) -> Path:
    """Per language, held-out reward against training seconds: GRPO (each seed) and more SFT."""
    from grpo.tracking.plots import plot_rewards_by_language

    plot_dir.mkdir(parents=True, exist_ok=True)
    panels: dict[str, dict[str, Any]] = {}
    for label in ("more_sft", *grpo_labels):
        for code, points in bench.arms[label].clock.items():
            panels.setdefault(code, {})[label] = points
    members = ",".join(bench.settings.language.members or [])
    return plot_rewards_by_language(
        panels,
        plot_dir / f"learning_where_rl_helps_{name}.png",
        title=f"{name}: held-out reward against training seconds ({members})",
        xlabel="training seconds",
    )


def log_to_mlflow(name: str, result: dict[str, Any], report: str) -> None:
    """The setting as one MLflow run (experiment grpo-learning-benchmarks): gains, plot, report."""
    import dataclasses

    from grpo.tracking import make_tracker

    bench: Bench = result["bench"]
    tracking = dataclasses.replace(
        bench.settings.tracking,
        backend="mlflow",
        experiment="grpo-learning-benchmarks",
        run_name=f"where_rl_helps/{name}",
        system_metrics=False,
        log_plots=False,
    )
    settings = dataclasses.replace(bench.settings, tracking=tracking)
    out = bench.out / f"mlflow_{name}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.txt").write_text(report, encoding="utf-8")
    with make_tracker(settings, out) as tracker:
        tracker.log_config(settings)
        metrics = {f"gain_vs_more_sft/{code}": g for code, g in result["gains"].items()}
        for label, arm in bench.arms.items():
            metrics[f"seconds/{label}"] = arm.seconds
            for code, share in arm.truncated.items():
                metrics[f"truncated/{label}/{code}"] = share
            for code, share in result["padded"].get(label, {}).items():
                metrics[f"padded/{label}/{code}"] = share
        tracker.log_metrics(metrics, 0)
        tracker.log_artifact(result["plot"], "plots")
        tracker.log_artifact(out / "report.txt", "report")
        tracker.finish_run(min(result["gains"].values()) if result["gains"] else None)


def main(argv: list[str]) -> None:
    options, overrides = split_args(argv)
    which = options.get("setting", "both")
    names = list(SETTINGS) if which == "both" else [which]
    if any(n not in SETTINGS for n in names):
        raise SystemExit(f"--setting: one of {', '.join(SETTINGS)} or both, got {which!r}")
    start = time.perf_counter()
    results = {}
    for name in names:
        printed = io.StringIO()
        with contextlib.redirect_stdout(Tee(sys.stdout, printed)):
            results[name] = run_setting(name, overrides, options)
        if options.get("tracking", "mlflow") != "none":
            log_to_mlflow(name, results[name], printed.getvalue())
    print(f"\nwhole benchmark {(time.perf_counter() - start) / 60:.1f} min ("
          + ", ".join(f"{n} {r['minutes']:.1f} min" for n, r in results.items()) + ")")  # fmt: skip
    gains = {f"{n}/{c}": g for n, r in results.items() for c, g in r["gains"].items()}
    print("GRPO − more SFT per language: " + ", ".join(f"{k} {v:+.4f}" for k, v in gains.items()))
    print(f"worst_gain: {min(gains.values()):.4f}")


class Tee(io.TextIOBase):
    """Writes to every stream it holds (the console and the report kept for MLflow)."""

    def __init__(self, *streams: Any):
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
