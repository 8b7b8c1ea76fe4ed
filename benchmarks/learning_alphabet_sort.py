"""Does GRPO make the model better at alphabet-sort, on a CPU? Measured side by side in one run.

The recipe is conf/experiment/alphabet_sort_cpu_full.yaml (the See it learn recipe with its SFT:
model=small, one turn of 2-4 English names, an SFT warm start on the env's own reference episodes,
then GRPO). In one process, every policy scored by the rubric on the SAME eval rollouts (the first
eval.num_examples rows of the eval split x eval.rollouts_per_example, seeded by eval.seed;
benchmarks/learning.py):

    random init        the untrained model
    after SFT          the warm start; also the lr=0 control (same weights, seeded evaluation)
    after GRPO s0, s1  trainer.max_steps of GRPO from the SFT checkpoint, trainer.seed 0 and 1
    more SFT           SFT continued from the same checkpoint for the wall-clock time of one GRPO run

Gains come with a paired standard error over examples (each example's mean over its rollouts).

    python benchmarks/learning_alphabet_sort.py [--sft=DIR] [overrides ...]     # e.g. trainer.max_steps=40
    GRPO_BENCH_THREADS=1 python benchmarks/learning_alphabet_sort.py   # torch threads (default: one per core)

--sft=DIR reuses the sft dir of an earlier run of the same recipe. The thread count changes the
order of float sums and so the whole trajectory: compare runs at the same count.
Last line: `gain: X` (mean reward after GRPO, both seeds, minus after SFT).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from learning import Bench, split_args  # noqa: E402

SEEDS = (0, 1)


def main(argv: list[str]) -> None:
    options, overrides = split_args(argv)
    start = time.perf_counter()
    bench = Bench(["+experiment=alphabet_sort_cpu_full", *overrides])
    model, tokenizer = bench.initial()
    bench.sft(model, tokenizer, reuse=options.get("sft"))
    grpo = [bench.grpo(f"grpo_s{seed}", seed) for seed in SEEDS]
    bench.more_sft(sum(a.seconds for a in grpo) / len(grpo))
    gains = bench.report(
        f"alphabet-sort (English) on CPU (model {bench.settings.model.name})", [a.label for a in grpo]
    )
    print(f"whole benchmark {(time.perf_counter() - start) / 60:.1f} min")
    print(f"gain: {gains['all']:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
