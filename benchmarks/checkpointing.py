"""What does gradient checkpointing cost a GRPO micro-step? On CPU, both sides in one process.

One micro-step of model=qwen3_0_6b as shipped, at CPU scale: the Qwen3-0.6B architecture
(model=qwen3_0_6b_random, bf16), a micro-batch of 2 completions of 256 tokens after a 128-token
prompt, forward and backward through TRL's fused LM head (the GRPOTrainer's own log-prob function,
entropy included) on the trainer grpo builds: with gradient checkpointing (transformers'
activation checkpointing as the Trainer enables it) vs without, paired rounds that alternate which
side goes first. The ratio is the median of the per-round ratios (checkpointed seconds over plain
seconds): the s/step a checkpointed micro-step costs relative to a plain one; the activations each
side keeps come from the memory plan (grpo/memory).

    python benchmarks/checkpointing.py [ROUNDS]     GRPO_BENCH_THREADS=2 for two torch threads

Last line: `ratio: X`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROWS, PROMPT, COMPLETION = 2, 128, 256


def main(rounds: int) -> None:
    import torch

    from grpo.compose import load_settings
    from grpo.envs import build_env
    from grpo.train.trainer import build_trainer
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()
    torch.set_num_threads(int(os.environ.get("GRPO_BENCH_THREADS", "2")))
    settings = load_settings(
        [
            "+env=alphabet_sort",
            "model=qwen3_0_6b_random",
            "trainer.num_generations=2",
            "trainer.per_device_batch_completions=2",
            "trainer.beta=0",
            "trainer.gradient_checkpointing=true",
            "tracking=none",
        ]
    )
    with tempfile.TemporaryDirectory(prefix="grpo-ckpt-bench-") as tmp:
        trainer = build_trainer(settings, build_env(settings.env, settings.language), tmp).trainer
    model = trainer.model
    model.train()
    kwargs = trainer.args.activation_checkpointing_kwargs or trainer.args.gradient_checkpointing_kwargs
    ids = torch.randint(3, 2000, (ROWS, PROMPT + COMPLETION), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)

    def step(checkpointed: bool) -> float:
        if checkpointed:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs or None)
        else:
            model.activation_checkpointing_disable()
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, mask, COMPLETION, compute_entropy=True
        )
        (logps.sum() + 0.01 * entropy.sum()).backward()
        return time.perf_counter() - start

    step(True), step(False)  # warm-up
    ratios, on, off = [], [], []
    for i in range(rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        seconds = {side: step(side) for side in order}
        on.append(seconds[True])
        off.append(seconds[False])
        ratios.append(on[-1] / off[-1])
    print(
        f"GRPO micro-step (forward + backward, TRL's fused head) of {settings.model.name}, {ROWS} x "
        f"{PROMPT}+{COMPLETION} tokens, bf16, {torch.get_num_threads()} thread(s), {rounds} rounds"
    )
    print(f"checkpointed: {statistics.median(on):.2f} s   plain: {statistics.median(off):.2f} s")
    print(f"rounds: {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"ratio: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
