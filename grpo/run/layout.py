"""Where things go: the output root, and every path inside a run folder, in one place.

    <output_root>/              runs/<date>/<time>/ (one run), multirun/<date>/<time>/<job>/ (a
                                sweep's jobs; conf/config.yaml names both), mlflow.db and
                                mlartifacts/ (the default MLflow store), .rendezvous/ (ranks > 0
                                of a multi-process launch find rank 0's run folder there)
    <run folder>/
      .hydra/config.yaml        the settings the run used (a resume starts from them), hydra.yaml
      mlflow_run.json           the MLflow run it logs to (a resume reopens it)
      mlflow_spool/             tracking calls kept while the store was away (grpo/tracking/spool.py)
      reward_model/             the reward_model stage's model dir: HF files, rm_calibration.json,
                                rm_metrics.json, pairs_train.jsonl, pairs_heldout.jsonl, and
                                rm_meta.json written last (a dir without it is not complete)
      sft/                      the SFT warm start's model dir, sft_meta.json written last
      reward_model_checkpoints/, sft_checkpoints/
                                those stages' trainer checkpoints (written only when interrupted)
      initial_model/            a random-weight policy's initial weights (TRL's reference copy)
      checkpoints/checkpoint-N/ GRPO checkpoints (grpo/run/checkpoints.py: complete ones marked)
      val/step_N/               held-out evaluations during training (results.jsonl, metadata.json)
      eval_<label>/             evaluations around training: results.jsonl, metadata.json,
                                dataset/ (baseline, final, best)
      eval/                     the same for an evaluation alone (stages=[eval])
      lora_base/                a LoRA policy's in-memory base, saved once for its MLflow model
      reward_model_rounds/round_K/
                                preference round K (grpo/reward_model/rounds.py): pairs.jsonl,
                                member_<i>/ (the RM after it), round.json written last

    paths = RunLayout(run_dir)
    paths.sft, paths.checkpoints, paths.eval("baseline"), paths.val(40), paths.saved_config, ...

Light: standard library only (Hydra's path helper inside `output_root`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# ---- the run folder's entries -------------------------------------------------------------------

HYDRA_DIR = ".hydra"
SAVED_CONFIG = "config.yaml"  # in HYDRA_DIR: the run's composed (and, on resume, effective) config
SAVED_HYDRA = "hydra.yaml"  # in HYDRA_DIR: Hydra's own config, with the group choices
MLFLOW_RUN_FILE = "mlflow_run.json"
MLFLOW_SPOOL_DIR = "mlflow_spool"
REWARD_MODEL_DIR = "reward_model"
SFT_DIR = "sft"
INITIAL_MODEL_DIR = "initial_model"
CHECKPOINTS_DIR = "checkpoints"
# where each training stage's trainer checkpoints go (SFT and the reward model write one only
# when interrupted: their finished model is their own dir, sft/ and reward_model/)
STAGE_CHECKPOINT_DIRS = {
    "train": CHECKPOINTS_DIR,
    "sft": "sft_checkpoints",
    "reward_model": "reward_model_checkpoints",
}
VAL_DIR = "val"
EVAL_DIR_PREFIX = "eval_"
# the folder of an evaluation without training (stages=[eval])
EVAL_DIR = "eval"
LORA_BASE_DIR = "lora_base"
ROUNDS_DIR = "reward_model_rounds"
ROUND_DIR_PREFIX = "round_"

# ---- inside a stage's dir -----------------------------------------------------------------------

# a reward model dir (the reward_model stage's output, what reward_model.checkpoints names)
RM_META_FILE = "rm_meta.json"  # written last: a dir without it is not a complete reward model
RM_CALIBRATION_FILE = "rm_calibration.json"
RM_METRICS_FILE = "rm_metrics.json"
TRAIN_PAIRS_FILE = "pairs_train.jsonl"
HELDOUT_PAIRS_FILE = "pairs_heldout.jsonl"
# the SFT model dir: what was trained on, the steps and the final metrics; written last
SFT_META_FILE = "sft_meta.json"
# a preference round's dir: its report, written last (a dir without it is not a complete round)
ROUND_FILE = "round.json"
# an evaluation dir (eval_<label>/, val/step_N/)
RESULTS_FILE = "results.jsonl"
METADATA_FILE = "metadata.json"
DATASET_DIR = "dataset"

# ---- under the output root ----------------------------------------------------------------------

RENDEZVOUS_DIR = ".rendezvous"


def output_root(settings: Any) -> Path:
    """The absolute output root (settings.output_root): a relative path is taken from the directory
    the command ran in (Hydra's original working directory inside a run)."""
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(settings.output_root))


class RunLayout:
    """The paths inside one run folder (see the module docstring)."""

    __slots__ = ("root",)

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunLayout({str(self.root)!r})"

    @property
    def saved_config(self) -> Path:
        return self.root / HYDRA_DIR / SAVED_CONFIG

    @property
    def saved_hydra(self) -> Path:
        return self.root / HYDRA_DIR / SAVED_HYDRA

    @property
    def mlflow_run(self) -> Path:
        return self.root / MLFLOW_RUN_FILE

    @property
    def mlflow_spool(self) -> Path:
        return self.root / MLFLOW_SPOOL_DIR

    @property
    def reward_model(self) -> Path:
        return self.root / REWARD_MODEL_DIR

    @property
    def sft(self) -> Path:
        return self.root / SFT_DIR

    @property
    def initial_model(self) -> Path:
        return self.root / INITIAL_MODEL_DIR

    @property
    def checkpoints(self) -> Path:
        """GRPO's checkpoints dir."""
        return self.root / CHECKPOINTS_DIR

    def stage_checkpoints(self, stage: str) -> Path:
        """The trainer checkpoints dir of a training stage (train, sft, reward_model)."""
        return self.root / STAGE_CHECKPOINT_DIRS[stage]

    def eval(self, label: str) -> Path:
        """An evaluation's dir: eval_baseline/, eval_final/, eval_best/ around training; eval/ for
        an evaluation alone (label "eval")."""
        return self.root / (EVAL_DIR if label == EVAL_DIR else f"{EVAL_DIR_PREFIX}{label}")

    def val(self, step: int) -> Path:
        """The held-out evaluation of training step `step`."""
        return self.root / VAL_DIR / f"step_{step}"

    @property
    def lora_base(self) -> Path:
        return self.root / LORA_BASE_DIR

    @property
    def rounds(self) -> Path:
        """The preference rounds' dir (reward_model_rounds/)."""
        return self.root / ROUNDS_DIR

    def round(self, index: int) -> Path:
        return self.rounds / f"{ROUND_DIR_PREFIX}{index}"

    def complete_rounds(self) -> dict[int, Path]:
        """The preference rounds this run finished (their round.json written), by index."""
        found = {}
        for folder in self.rounds.glob(f"{ROUND_DIR_PREFIX}*"):
            index = folder.name.removeprefix(ROUND_DIR_PREFIX)
            if index.isdigit() and (folder / ROUND_FILE).is_file():
                found[int(index)] = folder
        return found

    def finished_marks(self) -> dict[str, Path]:
        """Per stage, the file a finished stage writes last (its presence says the stage is done):
        reward_model and sft (in their model dirs), baseline (the baseline evaluation's results)."""
        return {
            "reward_model": self.reward_model / RM_META_FILE,
            "sft": self.sft / SFT_META_FILE,
            "baseline": self.eval("baseline") / RESULTS_FILE,
        }
