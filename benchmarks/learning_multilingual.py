"""Does GRPO make the model better at alphabet-sort in every language of a mix, on a CPU?

The recipe is conf/experiment/alphabet_sort_multilingual.yaml (`python -m grpo
+experiment=alphabet_sort_multilingual`): model=small_multilingual (the shipped multilingual base), one turn of 2-4 names, language=mix with five
balanced members of three scripts (default en, sv, ru, zh, ja), an SFT warm start on the env's own
reference episodes, then GRPO. Side by side in one process, every policy scored by the rubric on the
same eval rows and seeds (benchmarks/learning.py):

    random init / after SFT (= the lr=0 control) / after GRPO, seeds 0 and 1 / more SFT for the
    wall-clock time of one GRPO run (compute-matched)

and a per-language table with the paired standard errors of GRPO (both seeds) - SFT and GRPO - more
SFT. The per-language validation curves of GRPO seed 0 (val/lang/<code>/mean) are drawn to
--plot=PATH (default docs/learning_multilingual.png).

    python benchmarks/learning_multilingual.py [--sft=DIR] [--plot=PATH] [overrides ...]
    python benchmarks/learning_multilingual.py 'language.members=[es,de,hi,ar,ja]'

--sft=DIR reuses the sft dir of an earlier run of the same recipe (its seconds per step set the
compute-matched arm). GRPO_BENCH_THREADS=N sets torch's threads (default: one per core).
Last line: `worst_gain: X` (the smallest per-language GRPO - SFT, mean over the two seeds).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import MULTILINGUAL, Bench, split_args  # noqa: E402

from grpo.tracking.plots import by_language, plot_reward_curves  # noqa: E402

SEEDS = (0, 1)


def main(argv: list[str]) -> None:
    options, overrides = split_args(argv)
    start = time.perf_counter()
    bench = Bench([*MULTILINGUAL, *overrides])
    model, tokenizer = bench.initial()
    bench.sft(model, tokenizer, reuse=options.get("sft"))
    grpo = [bench.grpo(f"grpo_s{seed}", seed) for seed in SEEDS]
    bench.more_sft(sum(a.seconds for a in grpo) / len(grpo))
    members = ",".join(bench.settings.language.members or [])
    gains = bench.report(
        f"alphabet-sort in {members} on CPU (model {bench.settings.model.name})", [a.label for a in grpo]
    )
    plot = Path(options.get("plot", "docs/learning_multilingual.png"))
    plot.parent.mkdir(parents=True, exist_ok=True)
    val = {
        lang: names[""]
        for lang, names in by_language(list(grpo[0].curves), "val/lang/").items()
        if "" in names
    }
    plot_reward_curves(
        {lang: grpo[0].curves[name] for lang, name in val.items()},
        plot,
        "val/lang/<code>/mean",
        title=f"GRPO (seed 0) validation reward per language ({members})",
    )
    print(f"plot: {plot}")
    per_language = {k: v for k, v in gains.items() if k != "all"}
    print(f"mean gain {gains['all']:+.4f}; whole benchmark {(time.perf_counter() - start) / 60:.1f} min")
    print(f"worst_gain: {min(per_language.values()):.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
