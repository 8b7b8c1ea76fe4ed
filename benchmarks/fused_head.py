"""How much does scoring only the labelled positions save in a training step on CPU?

One SFT micro-batch of the See it learn recipe (+experiment=alphabet_sort_cpu: model=small, 32
one-turn alphabet-sort demonstrations, the loss on the assistant's tokens only) through TRL's fused
log-prob head, forward and backward: TRL's own CPU path (every position projected through the LM
head, the unlabelled ones zeroed afterwards) against grpo.trl_adapter.devices' switch (only the labelled
positions projected). Rounds alternate which side goes first; the ratio is the median of the
per-round ratios (full seconds over compact seconds), with the min-max.

    python benchmarks/fused_head.py [ROUNDS]       GRPO_BENCH_THREADS=2 for two torch threads

Last line: `ratio: X`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
BATCH = 32


def main(rounds: int) -> None:
    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.models import load_policy
    from grpo.sft.data import env_demonstrations
    from grpo.sft.train import build_sft_trainer, prepare_examples
    from grpo.trl_adapter.devices import score_labelled_positions_on_cpu
    from grpo.trl_adapter.internals import fused_head_switch, set_fused_head_switch

    torch.set_num_threads(int(os.environ.get("GRPO_BENCH_THREADS", "1")))
    full_switch = fused_head_switch()
    score_labelled_positions_on_cpu()
    compact_switch = fused_head_switch()
    settings = load_settings(["+experiment=alphabet_sort_cpu", "tracking=none"])
    env = build_env(settings.env, settings.language)
    model, tokenizer = load_policy(settings.model)
    examples = prepare_examples(settings, env, env_demonstrations(env, BATCH), model, tokenizer)
    with tempfile.TemporaryDirectory(prefix="grpo-fused-head-") as tmp:
        trainer = build_sft_trainer(settings, model, tokenizer, examples, Path(tmp))
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(BATCH)])
    labelled = (batch["labels"][:, 1:] != -100).float().mean().item()

    def step(switch) -> float:
        set_fused_head_switch(switch)
        model.zero_grad()
        start = time.perf_counter()
        out = model(**batch, fused_lm_head=True)
        out.loss.backward()
        return time.perf_counter() - start

    step(full_switch), step(compact_switch)  # warm-up
    ratios, full, compact = [], [], []
    for i in range(rounds):
        order = (full_switch, compact_switch) if i % 2 == 0 else (compact_switch, full_switch)
        seconds = {switch: step(switch) for switch in order}
        full.append(seconds[full_switch])
        compact.append(seconds[compact_switch])
        ratios.append(full[-1] / compact[-1])
    set_fused_head_switch(compact_switch)
    print(
        f"SFT step on {settings.model.name} ({BATCH} x {batch['input_ids'].shape[1]} tokens, "
        f"{labelled:.0%} labelled), forward + backward, {torch.get_num_threads()} thread(s), {rounds} rounds"
    )
    print(
        f"every position: {statistics.median(full):.3f} s   labelled only: {statistics.median(compact):.3f} s"
    )
    print(f"rounds: {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
