"""The multilingual reward model: preference data, Bradley-Terry training, per-language calibration.

    data.py         preference JSONL rows {prompt|instruction, chosen, rejected, language}, validated
    synthetic.py    pairs from any environment: chosen = its reference episode, rejected = a corruption
    backbone.py     the sequence-classification backbone (offline tiny Qwen3 or a hub / local model),
                    language conditioning, text rendering, batched scoring, checkpoint save / load
    calibration.py  per-language mean / std of scores on a held-out reference set
    train.py        the `reward_model` stage: TRL's RewardTrainer, held-out accuracy per language
    checks.py       the settings rules of the reward_model group (kind, guards, checkpoints, stage)

The GRPO side (loading checkpoints, normalising, ensembles, TRL reward functions) is
grpo/rewards/learned.py. The files of a reward model dir are named in grpo/run/layout.py. This
module is light: it holds what both sides share and the checkpoint check its settings rules
(grpo/reward_model/checks.py) call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from grpo.config import LanguageConfig
from grpo.errors import UserError
from grpo.languages.spec import language_override
from grpo.run.layout import RM_CALIBRATION_FILE, RM_META_FILE


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


def scored_languages(path: str | os.PathLike[str], field: str, normalization: str) -> list[str]:
    """The languages the RM dir at `path` can score, from its JSON files (no weights loaded): the
    ones it was trained on that, with per_language normalisation, it is also calibrated on (the
    rule RewardModelScorer.languages applies to the loaded model)."""
    from grpo.reward_model.calibration import Calibration

    p = Path(path).expanduser()
    try:
        trained = [
            str(lang) for lang in json.loads((p / RM_META_FILE).read_text(encoding="utf-8"))["languages"]
        ]
        calibration = Calibration.load(p / RM_CALIBRATION_FILE)
    except (OSError, ValueError, KeyError, TypeError) as ex:
        raise UserError(
            f"{field}={path}: its {RM_META_FILE} / {RM_CALIBRATION_FILE} cannot be read "
            f"({type(ex).__name__}: {ex}); train it again"
        ) from None
    return [lang for lang in trained if calibration.covers(lang, normalization)]


def language_mismatch(field: str, path: object, scored: Sequence[str], wanted: Sequence[str]) -> str | None:
    """One line naming the fix when an RM that scores `scored` cannot score every language the
    run is in (`wanted`), else None. The fix keeps the run's languages the RM knows, or else
    takes the RM's own."""
    missing = [lang for lang in wanted if lang not in scored]
    if not missing:
        return None
    keep = [lang for lang in wanted if lang in scored] or list(scored)
    run = "the run's language" + ("s" if len(missing) > 1 else "")
    fix = f"run in its languages with {language_override(keep)}, or " if keep else ""
    return (
        f"{field}={path} was trained on {', '.join(scored) or 'no language'}, not on {', '.join(missing)} "
        f"({run}): {fix}train it with pairs in {', '.join(missing)}"
    )


__all__ = [
    "check_checkpoint_dir",
    "language_mismatch",
    "language_override",
    "run_languages",
    "scored_languages",
]
