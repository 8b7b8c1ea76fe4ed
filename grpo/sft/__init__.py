"""The `sft` stage: a supervised warm start on demonstrations before GRPO.

    data.py     demonstrations: the env's reference episodes, or JSONL conversations (validated)
    replay.py   each demonstration replayed through the rollout engine, for GRPO's exact token
                layout: input ids + the assistant mask (user and environment tokens get no loss)
    train.py    the stage: TRL's SFTTrainer, full or LoRA (merged), saved to <run_dir>/sft

The saved dir is a plain model dir (weights, config, tokenizer with its chat template):
`model.source=pretrained model.path=<run_dir>/sft` loads it in a later run. This module is light:
it holds the names shared by the stage, its tests and the stages runner.
"""

from __future__ import annotations

# the stage's output dir under the run dir
SFT_DIR = "sft"
# written last into the output dir (which is renamed into place only after that): what was
# trained on, the steps and the final metrics
META_FILE = "sft_meta.json"
# the stage's metrics in the tracker: sft/loss, sft/mean_token_accuracy, ... at the SFT step
METRIC_PREFIX = "sft/"

__all__ = ["META_FILE", "METRIC_PREFIX", "SFT_DIR"]
