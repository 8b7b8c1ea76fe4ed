"""The multilingual reward model: preference data, Bradley-Terry training, per-language calibration.

    data.py         preference JSONL rows {prompt|instruction, chosen, rejected, language}, validated
    synthetic.py    pairs from any environment: chosen = its reference episode, rejected = a corruption
    backbone.py     the sequence-classification backbone (offline tiny Qwen3 or a hub / local model),
                    language conditioning, text rendering, batched scoring, checkpoint save / load
    calibration.py  per-language mean / std of scores on a held-out reference set
    train.py        the `reward_model` stage: TRL's RewardTrainer, held-out accuracy per language

The GRPO side (loading checkpoints, normalising, ensembles, TRL reward functions) is
grpo/rewards/learned.py. The files of a reward model dir are named in grpo/run/layout.py. This
module is light: it holds what both sides share and the checkpoint check the config rules
(grpo/cli/checks.py) call.
"""

from __future__ import annotations

import os
from pathlib import Path

from grpo.config import LanguageConfig
from grpo.errors import UserError
from grpo.run.layout import RM_META_FILE


def run_languages(language: LanguageConfig) -> list[str]:
    """The languages a run's rows are in: language.code, or the members of language=mix."""
    if language.code != "mix":
        return [language.code]
    return list(language.members) if language.members else list(language.mix)


def check_checkpoint_dir(path: str | os.PathLike[str], field: str) -> Path:
    """A complete reward model dir, or a one-line UserError naming `field`."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(
            f"{field}={path}: no such directory; point it at a reward_model stage's output "
            "(outputs/runs/<date>/<time>/reward_model)"
        )
    if not p.is_dir():
        raise UserError(
            f"{field}={path} is a file; it must be a reward model dir (a reward_model stage's output)"
        )
    if not (p / RM_META_FILE).is_file():
        raise UserError(
            f"{field}={path} is not a complete reward model (no {RM_META_FILE}): point it at a reward_model "
            "stage's output, or train again if that stage was interrupted"
        )
    return p


__all__ = ["check_checkpoint_dir", "run_languages"]
