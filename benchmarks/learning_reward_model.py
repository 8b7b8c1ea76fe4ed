"""Does GRPO against a learned reward model make the policy better at the task, in every language?

The recipe is conf/experiment/alphabet_sort_multilingual.yaml (five languages, three scripts, from
the multilingual base model=small_multilingual), in one process (benchmarks/learning.py), from one
SFT checkpoint (--sft=DIR reuses one):

 1. the reward models: two ensemble members (data and weight seeds 0 and 1) trained with the
    default recipe on synthetic pairs of the recipe's env and languages, hard negatives included;
    for the hard-negative ablation, two more on the edit corruptions alone. Held-out accuracy per
    language and corruption kind is printed. Their backbone is the policy's base with a new score
    head (reward_model/backbone=small_multilingual; --rm-backbone=tiny: the random tiny backbone of
    the earlier results);
 2. GRPO arms from the SFT checkpoint, seed 0, trainer.max_steps each (--steps, default 60), the
    last policy kept (trainer.keep_best=false), validation every 20 steps:
        rubric        the env's rubric only (the true task reward, 1 rubric call per completion)
        rm            the RM ensemble alone (reward_model=ensemble, rubric_weight 0) with the
                      defaults: preference rounds (the rubric as annotator, before GRPO and every
                      reward_model.rounds.every steps), the hard negatives in its pairs, the KL
                      anchor (reward_model.guards.kl_beta), the reward capped at the reference
                      episode's, and the conservative aggregate mean - k * std
        no_rounds     rm without the rounds                 (reward_model.rounds.every=0)
        no_hard_neg   rm with members trained without the hard negatives
        no_kl         rm without the KL anchor               (reward_model.guards.kl_beta=null: beta 0)
        no_cap        rm without the reference cap           (reward_model.guards.reference=none)
        mean          rm with the members' plain mean        (reward_model.combine=mean)
    and, named in --arms only, where normalisation can matter (the RM next to the rubric):
        mixed_lang    rubric + the RM ensemble (rubric_weight 1), normalised per language
        mixed_global  the same, normalised globally (all languages pooled)
 3. every policy scored by the RUBRIC on the same eval rows and seeds, per language, with paired
    standard errors against the SFT model;
 4. the RM's accuracy on the policy's own samples after training: per eval row, every two of the
    rm arm's rollouts the rubric tells apart, scored by the RM the arm ended with (after its
    rounds) and by the RM it started with;
 5. the rm arm's validation curve: the final validation reward against its best (target: >= 0.8x),
    and the plot of its RM score vs the rubric per language on the held-out rows (--plot=PATH,
    default docs/learning_reward_model.png);
 6. labels spent by the rounds against the rubric calls of rubric-only GRPO.

    python benchmarks/learning_reward_model.py [--sft=DIR] [--steps=N] [--arms=rm,no_rounds,...]
        [--rm-backbone=small_multilingual] [--plot=PATH] [overrides ...]     # e.g. 'language.members=[de,fr,ru,zh,ja]'

Last lines: `rubric_gain: X` (the rm arm's mean rubric gain over the SFT model) and
`worst_rubric_gain: Y` (its smallest per-language gain).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import MULTILINGUAL, Bench, paired, split_args  # noqa: E402

from grpo.config import EDIT_CORRUPTIONS  # noqa: E402
from grpo.tracking.plots import RM_REWARD, plot_rewards_by_language  # noqa: E402

# the members' backbone: the policy's multilingual base with a new score head (--rm-backbone=tiny:
# the random tiny backbone of the earlier results)
RM_BACKBONE = "small_multilingual"
RM_ONLY = ["reward_model=ensemble", "reward_model.rubric_weight=0"]
MIXED = ["reward_model=ensemble", "reward_model.rubric_weight=1"]
ABLATIONS = {
    "rm": RM_ONLY,
    "no_rounds": [*RM_ONLY, "reward_model.rounds.every=0"],
    "no_hard_neg": RM_ONLY,  # other members, below
    "no_kl": [*RM_ONLY, "reward_model.guards.kl_beta=null"],
    "no_cap": [*RM_ONLY, "reward_model.guards.reference=none"],
    "mean": [*RM_ONLY, "reward_model.combine=mean"],
    # where normalisation can matter: the RM mixed with the rubric (not in the default arms)
    "mixed_lang": [*MIXED, "reward_model.normalization=per_language"],
    "mixed_global": [*MIXED, "reward_model.normalization=global"],
}


def train_members(bench: Bench, label: str, more: list[str], backbone: str = RM_BACKBONE) -> list[str]:
    """Two reward models (seeds 0 and 1) of the recipe on `backbone` (a conf/reward_model/backbone
    preset); their dirs."""
    from grpo.reward_model.train import format_kind_table, train_reward_model

    paths = []
    for seed in (0, 1):
        settings = bench.variant(
            "reward_model=learned", f"reward_model/backbone={backbone}", "stages=[reward_model]",
            f"reward_model.data.seed={seed}", f"reward_model.backbone.seed={seed}", *more,
        )  # fmt: skip
        began = time.perf_counter()
        rm = train_reward_model(settings, bench.out / f"{label}_{seed}")
        print(
            f"[bench] RM {label} seed {seed}: {rm.num_train_pairs} train / {rm.num_heldout_pairs} held-out pairs, "
            f"{rm.global_step} steps, {time.perf_counter() - began:.0f} s; held-out accuracy "
            f"{rm.final.overall_accuracy:.3f}",
            flush=True,
        )
        if seed == 0:
            for line in format_kind_table(rm.final):
                print("  " + line)
        paths.append(str(rm.path))
    return paths


def policy_accuracy(bench: Bench, label: str, members: list[str]) -> dict[str, float]:
    """Per language ("all" too), how often the RM ensemble (combined as the arm combines) ranks two
    rollouts of an eval row of arm `label` as the rubric does, over the pairs the rubric tells apart."""
    import json

    from grpo.rewards.learned import RewardModelScorer, combine_scores

    records = [json.loads(line) for line in (bench.out / f"eval_{label}" / "results.jsonl").open()]
    by_row: dict[int, list[dict]] = {}
    for rec in records:
        by_row.setdefault(rec["example_id"], []).append(rec)
    prompts = [rec["prompt"] for rec in records]
    completions = [rec["completion"] for rec in records]
    languages = [rec["language"] for rec in records]
    scorers = [RewardModelScorer(path, batch_size=64, device="cpu") for path in members]
    combined = combine_scores(
        [s.normalized(prompts, completions, languages) for s in scorers],
        bench.settings.reward_model.combine,
        bench.settings.reward_model.k,
    )
    score = {id(rec): value for rec, value in zip(records, combined, strict=True)}
    hits: dict[str, list[float]] = {}
    for recs in by_row.values():
        for a, b in itertools.combinations(recs, 2):
            if abs(a["reward"] - b["reward"]) < 1e-9 or score[id(a)] is None or score[id(b)] is None:
                continue
            right = (a["reward"] > b["reward"]) == (score[id(a)] > score[id(b)])
            for key in ("all", a["language"]):
                hits.setdefault(key, []).append(1.0 if right else 0.0)
    return {k: statistics.fmean(v) for k, v in sorted(hits.items(), key=lambda kv: (kv[0] != "all", kv[0]))}


def last_round_members(run_dir: Path, count: int) -> list[str] | None:
    rounds = sorted(
        (run_dir / "reward_model_rounds").glob("round_*"), key=lambda p: int(p.name.split("_")[1])
    )
    if not rounds:
        return None
    return [str(rounds[-1] / f"member_{i}") for i in range(count)]


def main(argv: list[str]) -> None:
    options, overrides = split_args(argv)
    start = time.perf_counter()
    steps = int(options.get("steps", 60))
    bench = Bench([*MULTILINGUAL, "trainer.keep_best=false", f"trainer.max_steps={steps}", *overrides])
    if options.get("sft"):
        bench.sft(None, None, reuse=options["sft"])
    else:
        bench.sft(*bench.initial())
    arms = options.get("arms", "rubric,rm,no_rounds,no_hard_neg,no_kl,no_cap,mean").split(",")

    began = time.perf_counter()
    backbone = options.get("rm-backbone", RM_BACKBONE)
    members = train_members(bench, "rm", [], backbone)
    plain = train_members(bench, "rm_edits", [f"reward_model.data.synthetic.corruptions=[{','.join(EDIT_CORRUPTIONS)}]"], backbone) if "no_hard_neg" in arms else []  # fmt: skip
    rm_seconds = time.perf_counter() - began

    for label in arms:
        if label == "rubric":
            bench.grpo("rubric", 0)
            continue
        paths = plain if label == "no_hard_neg" else members
        settings = bench.variant(*ABLATIONS[label], f"reward_model.checkpoints=[{','.join(paths)}]")
        bench.grpo(label, 0, settings=settings)

    members_list = ",".join(bench.settings.language.members or [])
    s = bench.settings
    print(
        f"\nThe reward model in the loop: alphabet-sort in {members_list} (model {s.model.name}), {steps} GRPO steps per arm"
    )
    print(f"reward models: {rm_seconds:.0f} s for {2 + len(plain)} members (backbone {backbone})")
    print(
        f"{len(bench.languages)} eval rows x {s.eval.rollouts_per_example} rollouts, every policy scored by the "
        "rubric (the task reward)"
    )
    bench.arms_line()
    gains = bench.gain_table(arms)
    bench.policies(arms)
    if {"mixed_lang", "mixed_global"} <= set(arms):
        print("\nNormalisation with the RM mixed with the rubric (global - per-language, paired SE):")
        for code in ["all", *sorted(set(bench.languages))]:
            keep = [code in ("all", x) for x in bench.languages]
            g, se = paired(bench.arms["mixed_global"].rewards, bench.arms["mixed_lang"].rewards, keep)
            print(f"  {code:<5} {g:+.4f} ({se:.4f})")

    rubric_calls = steps * s.trainer.per_device_batch_completions * s.trainer.gradient_accumulation_steps
    if "rm" in arms:
        import json

        run_dir = bench.out / "rm"
        summary = run_dir / "reward_model_rounds" / "rounds.json"
        rounds = json.loads(summary.read_text()) if summary.is_file() else {"rounds": [], "labels": 0}
        print(
            "\nPreference rounds of the rm arm (RM accuracy on the fresh policy pairs, before learning them):"
        )
        for r in rounds["rounds"]:
            acc = r["accuracy_before"][0] if r["accuracy_before"] else {}
            print(
                f"  round {r['index']} at step {r['step']}: {r['labels']} labels, {r['ties']} ties, {r['pairs']} "
                "pairs; member 0 accuracy " + " ".join(f"{k} {v:.3f}" for k, v in acc.items())
            )
        print(f"labels spent: {rounds['labels']} against {rubric_calls} rubric calls of rubric-only GRPO "
              f"({rounds['labels'] / rubric_calls:.2f}x)")  # fmt: skip
        before = policy_accuracy(bench, "rm", members)
        final_members = last_round_members(run_dir, len(members)) or members
        after = policy_accuracy(bench, "rm", final_members)
        print("RM accuracy on the rm policy's own eval rollouts (pairs the rubric tells apart):")
        for name, acc in (("starting RM: ", before), ("final RM:    ", after)):
            shown = " ".join(f"{k} {v:.3f}" for k, v in acc.items())
            print(f"  {name}{shown or 'none (no two rollouts of a row that the rubric tells apart)'}")

        curves = bench.arms["rm"].curves
        val = curves.get("val/reward", [])
        if val:
            best = max(v for _, v in val)
            print(f"rm validation reward: best {best:.4f}, final {val[-1][1]:.4f} ({val[-1][1] / best:.2f}x of best)"
                  if best > 0 else f"rm validation reward: best {best:.4f}")  # fmt: skip
        codes = sorted(set(bench.languages))
        panels = {
            code: {
                RM_REWARD: curves.get(f"val/score/{RM_REWARD}/lang/{code}", []),
                "rubric (gold)": curves.get(f"val/lang/{code}/mean", []),
            }
            for code in codes
        }
        plot = Path(options.get("plot", "docs/learning_reward_model.png"))
        if any(any(curves.values()) for curves in panels.values()):
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot_rewards_by_language(
                panels,
                plot,
                title=f"RM-only GRPO with the guards: RM score vs rubric on held-out rows ({members_list})",
            )
            print(f"plot: {plot}")
        else:
            print(f"plot: none (no validation in {steps} steps: trainer.eval_steps={s.trainer.eval_steps})")
        rm_gains = {k: v for k, v in gains["rm"].items() if k != "all"}
        ses = {
            code: paired(
                bench.arms["rm"].rewards, bench.arms["sft"].rewards, [x == code for x in bench.languages]
            )[1]
            for code in codes
        }
        print(
            "rm gain in SEs per language: "
            + " ".join(f"{c} {rm_gains[c] / ses[c]:+.1f}" if ses[c] > 0 else f"{c} n/a (SE 0)" for c in codes)
        )
        print(f"whole benchmark {(time.perf_counter() - start) / 60:.1f} min")
        print(f"rubric_gain: {gains['rm']['all']:.4f}")
        print(f"worst_rubric_gain: {min(rm_gains.values()):.4f}")
    else:
        print(f"whole benchmark {(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main(sys.argv[1:])
