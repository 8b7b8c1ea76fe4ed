"""The settings rules of GRPO training: the trainer and optimizer groups, the token budget of a
multi-turn episode, and the rows one generation batch and held-out validation take from the env's
splits (the env config's sizes here; the built env's in `check_built_validation_rows`).

Walked by the registry grpo/cli/checks.py, each on the part of the settings it names; UserError
(one line: field, value, fix) on the first rule broken. Light: no torch (bitsandbytes and vLLM
are looked up, not imported)."""

from __future__ import annotations

import importlib.util
from typing import Any

from grpo.config import (
    COLLAPSE_ACTIONS,
    LOSS_TYPES,
    LR_SCHEDULERS,
    OPTIMIZERS,
    SCALE_REWARDS,
    EvalConfig,
    OptimizerConfig,
    TrainerConfig,
)
from grpo.errors import reject
from grpo.evaluation.checks import disjoint_eval_rows
from grpo.run.distributed import has_cuda_gpu
from grpo.train.geometry import step_geometry

# a model turn needs room for at least a short answer and its end-of-turn token
MIN_TOKENS_PER_TURN = 16


def check_trainer(t: TrainerConfig) -> None:
    if t.num_generations < 2:
        reject(
            f"trainer.num_generations={t.num_generations}: GRPO needs a group of at least 2 completions per "
            "prompt to compute advantages; set trainer.num_generations=4 or more"
        )
    step_geometry(t)  # micro-batch, completions per step and accumulation fit together
    for key in ("max_steps", "num_iterations", "logging_steps", "save_steps"):
        if getattr(t, key) < 1:
            reject(f"trainer.{key}={getattr(t, key)} must be >= 1")
    if t.save_total_limit is not None and t.save_total_limit < 1:
        reject(f"trainer.save_total_limit={t.save_total_limit} must be >= 1 or null (keep every checkpoint)")
    if t.loss_type not in LOSS_TYPES:
        reject(f"trainer.loss_type='{t.loss_type}' is not one of {', '.join(LOSS_TYPES)}")
    if t.scale_rewards not in SCALE_REWARDS:
        reject(f"trainer.scale_rewards='{t.scale_rewards}' is not one of {', '.join(SCALE_REWARDS)}")
    if t.beta < 0:
        reject(f"trainer.beta={t.beta} must be >= 0 (0 = no KL term and no reference model)")
    if t.epsilon <= 0:
        reject(f"trainer.epsilon={t.epsilon} must be > 0 (the PPO clip range, e.g. 0.2)")
    if t.epsilon_high is not None and t.epsilon_high < t.epsilon:
        reject(
            f"trainer.epsilon_high={t.epsilon_high} is below trainer.epsilon={t.epsilon}: clip-higher must be >= "
            "epsilon (DAPO uses 0.28), or null to reuse epsilon"
        )
    if not t.temperature > 0:
        reject(f"trainer.temperature={t.temperature} must be > 0: GRPO samples its rollouts (1.0 is usual)")
    if not 0 < t.top_p <= 1:
        reject(f"trainer.top_p={t.top_p} must be in (0, 1]")
    if t.max_completion_length < 1:
        reject(f"trainer.max_completion_length={t.max_completion_length} must be >= 1")
    if t.eval_steps < 0:
        reject(f"trainer.eval_steps={t.eval_steps} must be >= 0 (0 = no validation during training)")
    if t.eval_steps:
        for key in ("val_num_examples", "val_rollouts_per_example"):
            if getattr(t, key) < 1:
                reject(f"trainer.{key}={getattr(t, key)} must be >= 1 with trainer.eval_steps > 0")
    if t.keep_best and not t.eval_steps:
        reject(
            "trainer.keep_best=true needs validation to rank checkpoints: set trainer.eval_steps=N "
            "(optimizer steps between validations)"
        )
    if t.on_collapse not in COLLAPSE_ACTIONS:
        reject(f"trainer.on_collapse='{t.on_collapse}' is not one of {', '.join(COLLAPSE_ACTIONS)}")
    if not 0 < t.collapse_lr_factor <= 1:
        reject(
            f"trainer.collapse_lr_factor={t.collapse_lr_factor} must be in (0, 1]: the learning rate is "
            "multiplied by it at each rollback (0.5 halves it)"
        )
    if t.collapse_max_rollbacks < 0:
        reject(f"trainer.collapse_max_rollbacks={t.collapse_max_rollbacks} must be >= 0")
    if t.extra.get("sync_ref_model") and t.beta == 0:
        reject(
            "trainer.extra.sync_ref_model=true has no reference model to sync with trainer.beta=0: set "
            "trainer.beta > 0 or drop sync_ref_model"
        )


def check_optimizer(o: OptimizerConfig, machine: bool = True) -> None:
    """The optimizer group; `machine`: also what it needs of this machine (adamw_8bit: CUDA and
    bitsandbytes)."""
    if o.name not in OPTIMIZERS:
        reject(f"optimizer.name='{o.name}' is not one of {', '.join(OPTIMIZERS)}")
    if o.lr < 0:
        reject(f"optimizer.lr={o.lr} must be >= 0")
    if o.weight_decay < 0:
        reject(f"optimizer.weight_decay={o.weight_decay} must be >= 0")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        reject(f"optimizer.betas={list(o.betas)} must be two numbers in [0, 1), e.g. [0.9, 0.99]")
    if not 0 <= o.momentum < 1:
        reject(f"optimizer.momentum={o.momentum} must be in [0, 1)")
    if o.max_grad_norm < 0:
        reject(f"optimizer.max_grad_norm={o.max_grad_norm} must be >= 0 (0 disables clipping)")
    if o.warmup < 0:
        reject(f"optimizer.warmup={o.warmup} must be >= 0 (a fraction of max_steps when < 1, else steps)")
    if o.lr_scheduler not in LR_SCHEDULERS:
        reject(f"optimizer.lr_scheduler='{o.lr_scheduler}' is not one of {', '.join(LR_SCHEDULERS)}")
    if o.name == "adamw_8bit" and machine:
        if not has_cuda_gpu():
            reject(
                "optimizer=adamw_8bit needs a CUDA GPU (bitsandbytes 8-bit states): use optimizer=adamw on CPU"
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            reject(
                "optimizer=adamw_8bit needs bitsandbytes: pip install bitsandbytes (or use optimizer=adamw)"
            )


def check_turn_budget(t: TrainerConfig, env: Any) -> None:
    """trainer.max_completion_length covers every turn of an episode (`env`: the env group)."""
    max_turns = env.get("max_turns") if isinstance(env, dict) else None
    turns = (
        max_turns if isinstance(max_turns, int) and not isinstance(max_turns, bool) and max_turns >= 1 else 1
    )
    need = turns * MIN_TOKENS_PER_TURN
    if t.max_completion_length < need:
        reject(
            f"trainer.max_completion_length={t.max_completion_length} leaves fewer than "
            f"{MIN_TOKENS_PER_TURN} tokens per model turn for env.max_turns={turns} (it covers all turns): set "
            f"trainer.max_completion_length >= {need}"
        )


def check_validation_rows(t: TrainerConfig, e: EvalConfig, env: Any) -> None:
    """Validation during training takes the LAST trainer.val_num_examples rows of the eval split,
    the evaluation its FIRST eval.num_examples: with the split's size in the env config, they must
    not overlap (an env whose config does not give it: `check_built_env`, once it is built)."""
    size = (env or {}).get("num_eval_examples") if isinstance(env, dict) else None
    if isinstance(size, bool) or not isinstance(size, int):
        return  # an env that takes no such argument, or a bad value the env itself reports
    disjoint_eval_rows(
        t.val_num_examples, e.num_examples, size, f"env.num_eval_examples={size}",
        f"set env.num_eval_examples={t.val_num_examples + e.num_examples} or more, or lower one of them",
    )  # fmt: skip


def check_built_validation_rows(t: TrainerConfig, e: EvalConfig, env: Any) -> None:
    """`check_validation_rows` on the built `env`, for an env whose eval split's size only its rows
    tell (a verifiers or third-party env)."""
    sizes = getattr(env, "num_examples", None)
    size = sizes.get("eval") if isinstance(sizes, dict) and "eval" in sizes else len(env.rows("eval"))
    val = max(0, min(t.val_num_examples, size // 4))
    disjoint_eval_rows(
        t.val_num_examples, e.num_examples, size, f"the {size} rows of env {env.name}'s eval split",
        f"lower them to {size} or fewer together (e.g. trainer.val_num_examples={val} "
        f"eval.num_examples={size - val}), or trainer.eval_steps=0",
    )  # fmt: skip


def check_train_rows(t: TrainerConfig, env: Any) -> None:
    """One generation batch takes its prompts per step (completions per step / num_generations,
    grpo/train/geometry.py) as distinct prompts of the train split; TRL drops a short chunk, so a
    smaller split trains nothing. Checked here when the env config gives the split's size (the
    trainer checks it again with the rows it gets, for any env)."""
    size = (env or {}).get("num_train_examples") if isinstance(env, dict) else None
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or {"generation_batch_size", "steps_per_generation"} & set(t.extra)
    ):
        return  # no size in the config, or a generation batch shaped in trainer.extra
    geometry = step_geometry(t)
    needed = geometry.prompts_per_step
    if size < needed:
        reject(
            f"env.num_train_examples={size} is fewer than the {needed} distinct prompts of one generation "
            f"batch ({geometry.describe()}): set env.num_train_examples={needed} or more, or lower "
            "trainer.completions_per_step"
        )
