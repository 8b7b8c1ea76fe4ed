"""The registry of a run's settings rules: which rule runs, on what part of the settings, in what order.

`check(settings)` raises a one-line UserError (field, value, fix) on the first rule a composed
config breaks. It runs once per process and config, in the preflight of `python -m grpo`, before
anything heavy is imported; `check_once` remembers what it has checked, so the Hydra task that
follows does not check the same config again, while a sweep job whose values the preflight could
not see (an Optuna sample, a joblib worker) is checked at its start. Stages and builders receive
checked settings and never check them again. Single fields' types are the schema's business
(grpo/config.py): composition already refused those.

Each rule lives next to what it checks, in grpo/<package>/checks.py, and takes the part of the
settings it reads (a group, or the few groups a rule spans); `check` and `check_built_env` are the
only walks, and every public `check_*` of those modules is called from one of them (tested).

Light: importing and running this module imports no torch, transformers, trl or mlflow.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from grpo.config import GrpoConfig
from grpo.evaluation.checks import check_eval
from grpo.generation.checks import check_generation, check_generator, check_vllm_model
from grpo.languages.checks import check_language
from grpo.memory.checks import check_memory
from grpo.models.checks import check_model, check_torch_builds
from grpo.reward_model.checks import check_reward_model
from grpo.run.checks import check_finite_numbers, check_resume, check_stages
from grpo.run.resume import ResumePlan
from grpo.sft.checks import check_sft
from grpo.tracking.checks import check_tracking, check_tracking_store
from grpo.train.checks import (
    check_built_validation_rows,
    check_optimizer,
    check_train_rows,
    check_trainer,
    check_turn_budget,
    check_validation_rows,
)

_checked: set[str] = set()


def check_once(settings: GrpoConfig, resume: ResumePlan | None = None, machine: bool = True) -> None:
    """`check(settings, resume, machine)` unless this process already checked these settings."""
    key = json.dumps([dataclasses.asdict(settings), machine], sort_keys=True, default=str)
    if key not in _checked:
        check(settings, resume, machine)
        _checked.add(key)


def check(s: GrpoConfig, resume: ResumePlan | None = None, machine: bool = True) -> None:
    """Every settings rule, in a fixed order; UserError on the first one broken. `resume`: the
    run's resume plan (grpo/run/resume.py; None: read here when s.resume is set). `machine`: also
    the rules about this machine (the packages installed, a CUDA GPU for what needs one); false
    for settings planned for another machine (python -m grpo.cli.memory_plan)."""
    check_finite_numbers(dataclasses.asdict(s))
    if machine:
        check_torch_builds()
    check_stages(s.stages)
    check_trainer(s.trainer)
    check_optimizer(s.optimizer, machine)
    check_model(s.model, s.trainer)
    check_language(s.language)
    check_turn_budget(s.trainer, s.env)
    check_generation(s.generation, s.stages, machine)
    if machine:
        check_vllm_model(s.generation, s.model)
        check_generator(s.generation, s.model, s.stages)
    if s.resume:
        check_resume(s.resume, s.stages, resume)
    if "eval" in s.stages:
        check_eval(s.eval)
    if _validates(s):
        check_validation_rows(s.trainer, s.eval, s.env)
    if "train" in s.stages:
        check_train_rows(s.trainer, s.env)
    check_reward_model(s.reward_model, s.stages, s.language)
    if "sft" in s.stages:
        check_sft(s)
    check_tracking(s.tracking)
    check_memory(s.memory)
    if s.tracking.backend == "mlflow":
        check_tracking_store(s)


def check_built_env(s: GrpoConfig, env: Any) -> None:
    """The rules that need the built env (grpo/stages.py calls this before any stage runs): held-out
    validation and the evaluation share no eval row, for an env whose eval split's size only its
    rows tell (a verifiers or third-party env)."""
    if _validates(s):
        check_built_validation_rows(s.trainer, s.eval, env)


def _validates(s: GrpoConfig) -> bool:
    """Held-out validation during training and an evaluation both take rows of the eval split."""
    return bool(s.trainer.eval_steps and "train" in s.stages and "eval" in s.stages)
