"""Does the language-conditioned reward model make the policy better at the task, in every language?

The recipe is conf/experiment/alphabet_sort_multilingual.yaml (five languages, three scripts). In one
process (benchmarks/learning.py):

 1. a reward model trained with the default recipe (reward_model=learned: the tiny backbone, a
    language tag, per-language heads) on synthetic pairs of the recipe's env and languages; its
    held-out accuracy per language and per corruption kind is printed;
 2. from the same SFT checkpoint (--sft=DIR reuses one, e.g. learning_multilingual.py's), GRPO seed 0:
        rubric          the env's rubric only (the true task reward; reward_model=rubric)
        rm_only         the RM alone, normalised per language (reward_model=learned_only); the rubric
                        is only logged
        rm_only_global  the same with one global normalisation (reward_model.normalization=global)
        rubric_rm       rubric + RM (reward_model=learned)
    Every arm keeps its last policy (trainer.keep_best=false: selecting by validation would use the
    rubric, which an RM-only run does not have).
 3. every policy scored by the RUBRIC on the same eval rows and seeds, per language, with paired
    standard errors against the SFT model;
 4. a plot of the rm_only run: per language, the RM's normalised score and the rubric reward over
    the training steps (where they part, the policy is optimising what the RM sees, not the task):
    --plot=PATH (default docs/learning_reward_model.png). A `python -m grpo` run with
    tracking=mlflow logs the same plot as plots/rewards_by_language.png.

    python benchmarks/learning_reward_model.py [--sft=DIR] [--plot=PATH] [--arms=rm_only,...] [overrides ...]

--arms: which GRPO arms, in order (default rm_only,rm_only_global,rubric_rm,rubric).

Last line: `rm_gain: X` (mean rubric reward of rm_only minus the SFT model's).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import MULTILINGUAL, Bench, split_args  # noqa: E402

from grpo.tracking.plots import RM_REWARD, by_language, plot_rewards_by_language  # noqa: E402

ARMS = {
    "rm_only": ["reward_model=learned_only"],
    "rm_only_global": ["reward_model=learned_only", "reward_model.normalization=global"],
    "rubric_rm": ["reward_model=learned"],
}


def main(argv: list[str]) -> None:
    from grpo.reward_model.train import format_kind_table, train_reward_model

    options, overrides = split_args(argv)
    start = time.perf_counter()
    bench = Bench([*MULTILINGUAL, "trainer.keep_best=false", *overrides])
    if options.get("sft"):
        bench.sft(None, None, reuse=options["sft"])
    else:
        bench.sft(*bench.initial())

    began = time.perf_counter()
    rm = train_reward_model(
        bench.variant("reward_model=learned", "stages=[reward_model]"), bench.out / "reward_model"
    )
    rm_seconds = time.perf_counter() - began

    arms = options.get("arms", ",".join([*ARMS, "rubric"])).split(",")
    for label in arms:
        if label == "rubric":
            bench.grpo("rubric", 0)
        else:
            more = ARMS[label]
            bench.grpo(label, 0, settings=bench.variant(*more, f"reward_model.checkpoints=[{rm.path}]"))

    members = ",".join(bench.settings.language.members or [])
    print(f"\nThe reward model in the loop: alphabet-sort in {members} (model {bench.settings.model.name})")
    print(
        f"reward model: {rm.num_train_pairs} train / {rm.num_heldout_pairs} held-out pairs, {rm.global_step} steps, "
        f"{rm_seconds:.0f} s; held-out accuracy {rm.final.overall_accuracy:.3f}; per corruption kind:"
    )
    for line in format_kind_table(rm.final):
        print("  " + line)
    print(
        f"{len(bench.languages)} eval rows x {bench.settings.eval.rollouts_per_example} rollouts, every policy "
        "scored by the rubric (the task reward)"
    )
    bench.arms_line()
    gains = bench.gain_table(arms)

    rubric_names = {f.name for f in bench.env.rubric.funcs}
    curves = bench.arms["rm_only"].curves
    panels = {
        lang: {fn: curves[name] for fn, name in names.items() if fn == RM_REWARD or fn in rubric_names}
        for lang, names in by_language(list(curves), "train/rewards/").items()
    }
    plot = Path(options.get("plot", "docs/learning_reward_model.png"))
    plot.parent.mkdir(parents=True, exist_ok=True)
    plot_rewards_by_language(
        panels, plot, title=f"RM-only GRPO: RM score vs rubric, per language ({members})"
    )
    print(f"plot: {plot}")
    rm_only = {k: v for k, v in gains["rm_only"].items() if k != "all"}
    print(
        f"rm_only: mean {gains['rm_only']['all']:+.4f}, lowest language {min(rm_only.values()):+.4f}; "
        f"rm_only_global: mean {gains.get('rm_only_global', {}).get('all', float('nan')):+.4f}; whole benchmark "
        f"{(time.perf_counter() - start) / 60:.1f} min"
    )
    print(f"rm_gain: {gains['rm_only']['all']:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
