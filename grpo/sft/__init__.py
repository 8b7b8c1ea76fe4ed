"""The `sft` stage: a supervised warm start on demonstrations before GRPO.

    data.py     demonstrations: the env's reference episodes, or JSONL conversations (validated)
    replay.py   each demonstration replayed through the rollout engine, for GRPO's exact token
                layout: input ids + the assistant mask (user and environment tokens get no loss)
    train.py    the stage: TRL's SFTTrainer, full or LoRA (merged), saved to <run_dir>/sft
    checks.py   the settings rules of the stage (its data, training, model and generation needs)

The saved dir is a plain model dir (weights, config, tokenizer with its chat template, and
sft_meta.json written last: grpo/run/layout.py names them): `model.source=pretrained
model.path=<run_dir>/sft` loads it in a later run. This module is light: it holds the names the
stage and its tests share.
"""

from __future__ import annotations

# the stage's metrics in the tracker: sft/loss, sft/mean_token_accuracy, ... at the SFT step
METRIC_PREFIX = "sft/"

__all__ = ["METRIC_PREFIX"]
