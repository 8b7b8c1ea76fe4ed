"""Trained models in MLflow (tracking.log_model): the run's final policy and its trained reward
model, logged through MLflow's transformers flavour with their tokenizer (chat template included),
and registered in the model registry under tracking.register_as.

- The policy is the model the run trained last (GRPO, else SFT), as the final evaluation saw it:
  * full fine-tuning: its weights;
  * LoRA: the adapter only (MLflow's PEFT support). Its base is referenced where it already lives:
    model.path when that is a local dir, the Hub id otherwise; a randomly initialised base exists
    nowhere else, so an adapter-free copy is saved once to <run_dir>/lora_base and referenced there.
  Registered as `<register_as>`.
- The reward model (reward_model stage): its model dir's sequence classifier (task
  text-classification), with its per-language calibration and rm_meta.json in the logged model's
  metadata (grpo's scorer, reward_model.checkpoints=<dir>, is what applies them, and a
  reward_model.per_language_heads model's heads). Registered as `<register_as>-reward-model`.

Load one back with `mlflow.transformers.load_model("models:/<name>/<version>",
return_type="components")` (docs/tracking.md). The pip requirements are the installed versions of
what loading needs, pinned (MLflow's own inference would also ask for torchvision).

mlflow, transformers and peft are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from grpo.run.layout import RM_CALIBRATION_FILE, RM_META_FILE, RunLayout

POLICY_NAME = "policy"
REWARD_MODEL_NAME = "reward_model"
REWARD_MODEL_SUFFIX = "-reward-model"
# MLflow's fluent experiment when none is set in the process (grpo never sets one)
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_ID"
URI_ENV = "MLFLOW_TRACKING_URI"
_REQUIREMENTS = ("torch", "transformers", "tokenizers", "accelerate", "safetensors")


def pip_requirements(peft: bool = False) -> list[str]:
    """The installed versions of what loading the model back needs, pinned."""
    out = []
    for package in (*_REQUIREMENTS, "peft") if peft else _REQUIREMENTS:
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{package}=={version(package).split('+')[0]}")
    return out


@contextlib.contextmanager
def _logging_to(uri: str, experiment_id: str) -> Iterator[None]:
    """MLflow's model logging goes through its global tracking URI and active experiment (the
    logged model and its files belong to the experiment, not the run): point both at this run's
    for the call, and quiet the flavour's notes about Hub model cards and licenses."""
    import mlflow
    from mlflow.tracking._tracking_service import utils as tracking_utils

    # set_tracking_uri also sets $MLFLOW_TRACKING_URI (which tracking.uri=null reads): both are put
    # back as they were, the global unset again when it was (get_tracking_uri() would return
    # MLflow's default, ./mlflow.db, and pin it)
    previous_uri = tracking_utils._tracking_uri
    previous_env = {key: os.environ.get(key) for key in (URI_ENV, EXPERIMENT_ENV)}
    mlflow.set_tracking_uri(uri)
    os.environ[EXPERIMENT_ENV] = str(experiment_id)
    quiet = logging.getLogger("mlflow.transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)
        mlflow.set_tracking_uri(previous_uri)
        for key, value in previous_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def lora_base_path(model: Any, model_path: str | None, run_dir: Path) -> str | None:
    """Where a LoRA policy's base weights are loaded from: model.path when it is a local dir; None
    (MLflow references the Hub id) for a Hub model; else an adapter-free copy saved under the run dir."""
    if model_path and Path(model_path).is_dir():
        return str(Path(model_path).resolve())
    if model_path:
        return None
    out = RunLayout(run_dir).lora_base
    if not (out / "config.json").is_file():
        # unload() removes the adapter layers without merging them: the weights the adapter sits on
        copy.deepcopy(model).unload().save_pretrained(str(out))
    return str(out.resolve())


def log_policy(
    uri: str,
    experiment_id: str,
    run_id: str,
    model: Any,
    tokenizer: Any,
    model_path: str | None,
    run_dir: Path,
    register_as: str | None,
) -> Any:
    """Log the policy (see the module docstring) to run `run_id` of `experiment_id`; returns
    MLflow's ModelInfo."""
    import mlflow

    lora = hasattr(model, "peft_config")
    extra: dict[str, Any] = {}
    if lora:
        base = lora_base_path(model, model_path, run_dir)
        if base is not None:
            extra["base_model_path"] = base
    with _logging_to(uri, experiment_id):
        return mlflow.transformers.log_model(
            transformers_model={"model": model, "tokenizer": tokenizer},
            name=POLICY_NAME,
            task="text-generation",
            pip_requirements=pip_requirements(peft=lora),
            registered_model_name=register_as,
            run_id=run_id,
            **extra,
        )


def log_reward_model(uri: str, experiment_id: str, run_id: str, rm_dir: Path, register_as: str | None) -> Any:
    """Log the reward model dir to run `run_id` (see the module docstring); returns its ModelInfo."""
    import mlflow

    metadata = {}
    for key, name in (("calibration", RM_CALIBRATION_FILE), ("reward_model", RM_META_FILE)):
        path = Path(rm_dir) / name
        if path.is_file():
            metadata[key] = json.loads(path.read_text(encoding="utf-8"))
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    # loaded rather than passed as a path: MLflow's path route does not know transformers 5's pipelines
    model = AutoModelForSequenceClassification.from_pretrained(str(rm_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(rm_dir))
    with _logging_to(uri, experiment_id):
        return mlflow.transformers.log_model(
            transformers_model={"model": model, "tokenizer": tokenizer},
            name=REWARD_MODEL_NAME,
            task="text-classification",
            pip_requirements=pip_requirements(),
            registered_model_name=f"{register_as}{REWARD_MODEL_SUFFIX}" if register_as else None,
            metadata=metadata,
            run_id=run_id,
        )
