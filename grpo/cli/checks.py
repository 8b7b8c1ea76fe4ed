"""Cross-field rules of a run's settings: the one place they are checked.

`check(settings)` raises a one-line UserError (field, value, fix) on the first rule a composed
config breaks. It runs once per process and config, in the preflight of `python -m grpo`, before
anything heavy is imported; `check_once` remembers what it has checked, so the Hydra task that
follows does not check the same config again, while a sweep job whose values the preflight could
not see (an Optuna sample, a joblib worker) is checked at its start. Stages and builders receive
checked settings and never check them again. Single fields' types are the schema's business
(grpo/config.py): composition already refused those.

Light: importing and running this module imports no torch, transformers, trl or mlflow.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from grpo.config import (
    CORRUPTIONS,
    DTYPES,
    GENERATION_BACKENDS,
    LABELERS,
    LOSS_TYPES,
    LR_SCHEDULERS,
    MODEL_SOURCES,
    OPTIMIZERS,
    REWARD_MODEL_COMBINES,
    REWARD_MODEL_KINDS,
    REWARD_MODEL_NORMALIZATIONS,
    REWARD_MODEL_REFERENCES,
    SCALE_REWARDS,
    STAGES,
    TRACKING_BACKENDS,
    VLLM_MODES,
    EvalConfig,
    GenerationConfig,
    GrpoConfig,
    ModelConfig,
    OptimizerConfig,
    RewardModelBackboneConfig,
    RewardModelConfig,
    TrackingConfig,
    TrainerConfig,
)
from grpo.errors import UserError
from grpo.run.resume import ResumePlan

# a model turn needs room for at least a short answer and its end-of-turn token
MIN_TOKENS_PER_TURN = 16

_checked: set[str] = set()


def check_once(settings: GrpoConfig, resume: ResumePlan | None = None) -> None:
    """`check(settings, resume)` unless this process already checked exactly these settings."""
    key = json.dumps(dataclasses.asdict(settings), sort_keys=True, default=str)
    if key not in _checked:
        check(settings, resume)
        _checked.add(key)


def check(s: GrpoConfig, resume: ResumePlan | None = None) -> None:
    """Every cross-field rule, in a fixed order; UserError on the first one broken. `resume`: the
    run's resume plan (grpo/run/resume.py; None: read here when s.resume is set)."""
    _finite_numbers(dataclasses.asdict(s))
    _stages(s.stages)
    _trainer(s.trainer)
    _optimizer(s.optimizer)
    _model(s.model, s.trainer)
    _language(s)
    _turn_budget(s)
    _generation(s.generation, s.stages)
    if s.resume:
        _resume(s, resume)
    if "eval" in s.stages:
        _eval(s.eval)
    if s.trainer.eval_steps and "train" in s.stages and "eval" in s.stages:
        _validation_rows(s)
    if "train" in s.stages:
        _train_rows(s)
    _reward_model(s)
    if "sft" in s.stages:
        _sft(s)
    _tracking(s.tracking)
    if s.tracking.backend == "mlflow":
        from grpo.tracking.store import check_sqlite_file, tracking_uri

        check_sqlite_file(tracking_uri(s), "tracking.uri" if s.tracking.uri else "the default MLflow store")


def _fail(message: str) -> None:
    raise UserError(message)


def _finite_numbers(node: Any, path: str = "") -> None:
    """No setting is NaN or infinite (optimizer.lr=nan, trainer.beta=inf, an env argument, a value
    under *.extra): such a number passes every range check by accident (NaN compares False) and
    fails later, inside a library, or trains on garbage."""
    if isinstance(node, float) and not math.isfinite(node):
        _fail(f"{path}={node}: a setting must be a finite number")
    elif isinstance(node, dict):
        for key, value in node.items():
            _finite_numbers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _finite_numbers(value, f"{path}[{i}]")


def has_cuda_gpu() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def _stages(stages: list[str]) -> None:
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        _fail(
            f"stages={list(stages)}: each stage must be one of {', '.join(STAGES)} (in the order to run them), "
            "e.g. stages=[eval,train,eval]"
        )
    if "sft" in stages and "train" in stages and stages.index("sft") > stages.index("train"):
        _fail(
            f"stages={list(stages)}: sft must come before train (it is the warm start GRPO continues from), "
            "e.g. stages=[sft,eval,train,eval]"
        )


def _trainer(t: TrainerConfig) -> None:
    if t.num_generations < 2:
        _fail(
            f"trainer.num_generations={t.num_generations}: GRPO needs a group of at least 2 completions per "
            "prompt to compute advantages; set trainer.num_generations=4 or more"
        )
    if t.per_device_batch_completions < 1 or t.per_device_batch_completions % t.num_generations:
        lower = max(
            t.num_generations, t.per_device_batch_completions // t.num_generations * t.num_generations
        )
        _fail(
            f"trainer.per_device_batch_completions={t.per_device_batch_completions} is not a multiple of "
            f"trainer.num_generations={t.num_generations} (a prompt's group must fit in one batch): set it to "
            f"{lower} or {lower + t.num_generations}"
        )
    for key in ("gradient_accumulation_steps", "max_steps", "num_iterations", "logging_steps", "save_steps"):
        if getattr(t, key) < 1:
            _fail(f"trainer.{key}={getattr(t, key)} must be >= 1")
    if t.save_total_limit is not None and t.save_total_limit < 1:
        _fail(f"trainer.save_total_limit={t.save_total_limit} must be >= 1 or null (keep every checkpoint)")
    if t.loss_type not in LOSS_TYPES:
        _fail(f"trainer.loss_type='{t.loss_type}' is not one of {', '.join(LOSS_TYPES)}")
    if t.scale_rewards not in SCALE_REWARDS:
        _fail(f"trainer.scale_rewards='{t.scale_rewards}' is not one of {', '.join(SCALE_REWARDS)}")
    if t.beta < 0:
        _fail(f"trainer.beta={t.beta} must be >= 0 (0 = no KL term and no reference model)")
    if t.epsilon <= 0:
        _fail(f"trainer.epsilon={t.epsilon} must be > 0 (the PPO clip range, e.g. 0.2)")
    if t.epsilon_high is not None and t.epsilon_high < t.epsilon:
        _fail(
            f"trainer.epsilon_high={t.epsilon_high} is below trainer.epsilon={t.epsilon}: clip-higher must be >= "
            "epsilon (DAPO uses 0.28), or null to reuse epsilon"
        )
    if not t.temperature > 0:
        _fail(f"trainer.temperature={t.temperature} must be > 0: GRPO samples its rollouts (1.0 is usual)")
    if not 0 < t.top_p <= 1:
        _fail(f"trainer.top_p={t.top_p} must be in (0, 1]")
    if t.max_completion_length < 1:
        _fail(f"trainer.max_completion_length={t.max_completion_length} must be >= 1")
    if t.eval_steps < 0:
        _fail(f"trainer.eval_steps={t.eval_steps} must be >= 0 (0 = no validation during training)")
    if t.eval_steps:
        for key in ("val_num_examples", "val_rollouts_per_example"):
            if getattr(t, key) < 1:
                _fail(f"trainer.{key}={getattr(t, key)} must be >= 1 with trainer.eval_steps > 0")
    if t.keep_best and not t.eval_steps:
        _fail(
            "trainer.keep_best=true needs validation to rank checkpoints: set trainer.eval_steps=N "
            "(optimizer steps between validations)"
        )
    if t.extra.get("sync_ref_model") and t.beta == 0:
        _fail(
            "trainer.extra.sync_ref_model=true has no reference model to sync with trainer.beta=0: set "
            "trainer.beta > 0 or drop sync_ref_model"
        )


def _optimizer(o: OptimizerConfig) -> None:
    if o.name not in OPTIMIZERS:
        _fail(f"optimizer.name='{o.name}' is not one of {', '.join(OPTIMIZERS)}")
    if o.lr < 0:
        _fail(f"optimizer.lr={o.lr} must be >= 0")
    if o.weight_decay < 0:
        _fail(f"optimizer.weight_decay={o.weight_decay} must be >= 0")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        _fail(f"optimizer.betas={list(o.betas)} must be two numbers in [0, 1), e.g. [0.9, 0.99]")
    if not 0 <= o.momentum < 1:
        _fail(f"optimizer.momentum={o.momentum} must be in [0, 1)")
    if o.max_grad_norm < 0:
        _fail(f"optimizer.max_grad_norm={o.max_grad_norm} must be >= 0 (0 disables clipping)")
    if o.warmup < 0:
        _fail(f"optimizer.warmup={o.warmup} must be >= 0 (a fraction of max_steps when < 1, else steps)")
    if o.lr_scheduler not in LR_SCHEDULERS:
        _fail(f"optimizer.lr_scheduler='{o.lr_scheduler}' is not one of {', '.join(LR_SCHEDULERS)}")
    if o.name == "adamw_8bit":
        if not has_cuda_gpu():
            _fail(
                "optimizer=adamw_8bit needs a CUDA GPU (bitsandbytes 8-bit states): use optimizer=adamw on CPU"
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            _fail(
                "optimizer=adamw_8bit needs bitsandbytes: pip install bitsandbytes (or use optimizer=adamw)"
            )


def _weights_source(block: str, m: ModelConfig | RewardModelBackboneConfig) -> None:
    """Rules shared by the policy (`model`) and the reward model backbone: where weights come from."""
    if m.source not in MODEL_SOURCES:
        _fail(f"{block}.source='{m.source}' is not one of {', '.join(MODEL_SOURCES)}")
    if m.source == "pretrained" and not m.path:
        _fail(f"{block}.path is required for {block}.source=pretrained: a hub id or a local dir")
    if m.source == "random" and m.path:
        # random weights are built from `architecture`: a path would be silently ignored
        _fail(
            f"{block}.path={m.path} is not used with {block}.source=random (random weights from "
            f"{block}.architecture): set {block}.source=pretrained to load it, or {block}.tokenizer={m.path} "
            "to use only its tokenizer"
        )
    if str(m.dtype).lower() not in DTYPES:
        _fail(f"{block}.dtype='{m.dtype}' is not supported; use one of float32, bfloat16, float16, auto")


def _model(m: ModelConfig, t: TrainerConfig) -> None:
    _weights_source("model", m)
    lora = m.lora
    if not lora.enabled:
        return
    if lora.r < 1 or lora.alpha <= 0:
        _fail(
            f"model.lora.r={lora.r} and model.lora.alpha={lora.alpha} must be positive (e.g. r=16, alpha=32)"
        )
    if not 0 <= lora.dropout < 1:
        _fail(f"model.lora.dropout={lora.dropout} must be in [0, 1)")
    if not lora.target_modules or not all(lora.target_modules):
        _fail("model.lora.target_modules must be a non-empty list of module names, e.g. [q_proj, v_proj]")
    if "lm_head" in lora.target_modules:
        _fail(
            "model.lora.target_modules contains lm_head: GRPO computes log-probs from lm_head.weight directly, so "
            "an adapter there would never train; remove lm_head"
        )
    if t.extra.get("sync_ref_model"):
        _fail(
            "trainer.extra.sync_ref_model=true does not work with model.lora.enabled=true: under LoRA the reference "
            "model is the adapter-disabled base; drop sync_ref_model"
        )


def _language(s: GrpoConfig) -> None:
    """The language group's own rules (a known sort key, an ICU locale where one is needed, known
    mix members, ...) are the invariants of a LanguageSpec and live with it: building the spec
    runs them, here before anything heavy."""
    from grpo.languages.spec import spec_from_config

    spec_from_config(s.language)


def _turn_budget(s: GrpoConfig) -> None:
    max_turns = s.env.get("max_turns") if isinstance(s.env, dict) else None
    turns = (
        max_turns if isinstance(max_turns, int) and not isinstance(max_turns, bool) and max_turns >= 1 else 1
    )
    need = turns * MIN_TOKENS_PER_TURN
    if s.trainer.max_completion_length < need:
        _fail(
            f"trainer.max_completion_length={s.trainer.max_completion_length} leaves fewer than "
            f"{MIN_TOKENS_PER_TURN} tokens per model turn for env.max_turns={turns} (it covers all turns): set "
            f"trainer.max_completion_length >= {need}"
        )


def _generation(g: GenerationConfig, stages: list[str]) -> None:
    if g.backend not in GENERATION_BACKENDS:
        _fail(
            f"generation.backend={g.backend!r} is not available; choose one of: {', '.join(GENERATION_BACKENDS)}"
        )
    if g.max_tokens_per_turn < 1:
        _fail(f"generation.max_tokens_per_turn={g.max_tokens_per_turn} must be an integer >= 1 (e.g. 128)")
    if g.batch_size is not None and g.batch_size < 1:
        _fail(
            f"generation.batch_size={g.batch_size} must be >= 1 (conversations per generate call) "
            "or null (all active conversations at once)"
        )
    if g.backend == "openai":
        _openai(g, stages)
    elif g.backend in VLLM_MODES:
        _vllm(g, stages)


def _openai(g: GenerationConfig, stages: list[str]) -> None:
    if "train" in stages:
        _fail(
            "generation=openai is evaluation only (an endpoint returns text, not token ids): train with "
            "generation=hf or vllm_colocate / vllm_server, or set stages=[eval]"
        )
    for key, example in (("base_url", "http://127.0.0.1:8000/v1"), ("model", "<served model name>")):
        if not getattr(g, key):
            _fail(f"generation.{key} is required for generation=openai: set generation.{key}={example}")
    if not str(g.base_url).startswith(("http://", "https://")):
        _fail(f"generation.base_url={g.base_url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1")
    if g.max_concurrency < 1:
        _fail(f"generation.max_concurrency={g.max_concurrency} must be an integer >= 1")
    if not math.isfinite(g.timeout_s) or g.timeout_s <= 0:
        _fail(f"generation.timeout_s={g.timeout_s} must be a number of seconds > 0")
    if g.max_retries < 0:
        _fail(f"generation.max_retries={g.max_retries} must be an integer >= 0")
    if g.api_key_var and not os.environ.get(g.api_key_var):
        _fail(
            f"generation.api_key_var={g.api_key_var}: the environment variable {g.api_key_var} is not set; "
            f"export {g.api_key_var}=<your key>, or set generation.api_key_var=null for an endpoint without auth"
        )


def _vllm(g: GenerationConfig, stages: list[str]) -> None:
    if importlib.util.find_spec("vllm") is None:
        _fail(
            f"generation={g.backend} needs vLLM: pip install 'grpo[vllm]' on a GPU machine (or use generation=hf)"
        )
    if not 0 < g.gpu_memory_utilization <= 1:
        _fail(f"generation.gpu_memory_utilization={g.gpu_memory_utilization} must be in (0, 1]")
    if "train" in stages and not has_cuda_gpu():
        # colocate runs vLLM on this GPU; server mode pushes the weights to the server over NCCL
        _fail(f"generation={g.backend} needs a CUDA GPU for training: use generation=hf on CPU")


def _resume(s: GrpoConfig, plan: ResumePlan | None) -> None:
    if not {"train", "sft", "reward_model"} & set(s.stages):
        _fail(
            f"resume={s.resume} needs a training stage: add train (or sft, reward_model) to stages "
            "(e.g. stages=[train,eval])"
        )
    if "sft" in s.stages or "reward_model" in s.stages:
        return  # a run interrupted in an earlier stage has no GRPO checkpoint yet (grpo/run/resume.py)
    from grpo.run.checkpoints import latest_checkpoint

    checkpoint = (plan or ResumePlan.read(s.resume)).checkpoints.get("train")
    if checkpoint is None:
        latest_checkpoint(s.resume)  # UserError: nothing complete to resume from
        return
    _same_processes(s, checkpoint)


def _same_processes(s: GrpoConfig, checkpoint: Path) -> None:
    """A checkpoint holds one RNG state per process (rng_state.pth, or rng_state_<rank>.pth): the
    data order and the sampling continue only with as many processes as wrote it."""
    from grpo.run.distributed import world_size

    wrote = len(list(checkpoint.glob("rng_state_*.pth"))) or len(list(checkpoint.glob("rng_state.pth")))
    if wrote and wrote != world_size():
        how = f"torchrun --nproc_per_node={wrote} -m grpo" if wrote > 1 else "python -m grpo (one process)"
        _fail(
            f"resume={s.resume}: {checkpoint.name} was written by {wrote} process(es), this run has "
            f"{world_size()}; resume it with as many: {how} resume={s.resume}"
        )


def _eval(e: EvalConfig) -> None:
    for key, flag, default in (("num_examples", "-n", 5), ("rollouts_per_example", "-r", 3)):
        value = getattr(e, key)
        if value < 1:
            _fail(f"eval.{key} must be >= 1 (vf-eval {flag}), got {value}: set e.g. eval.{key}={default}")
    if e.temperature < 0 or not math.isfinite(e.temperature):
        _fail(f"eval.temperature must be >= 0 (0 = greedy), got {e.temperature}")
    if not 0.0 < e.top_p <= 1.0:
        _fail(f"eval.top_p must be in (0, 1], got {e.top_p}")
    if e.push_to_hub is not None:
        from grpo.evaluation.dataset import HUB_REPO_PATTERN, hub_token

        if not re.fullmatch(HUB_REPO_PATTERN, str(e.push_to_hub)):
            _fail(f"eval.push_to_hub={e.push_to_hub}: expected a Hub dataset repo id, namespace/name")
        if not e.hub_token_env:
            _fail("eval.hub_token_env is empty: name the environment variable holding the Hub token")
        if hub_token(e.hub_token_env) is None:
            _fail(
                f"eval.push_to_hub={e.push_to_hub}: no Hub token: set ${e.hub_token_env} or run `hf auth login`"
            )


def _validation_rows(s: GrpoConfig) -> None:
    """Validation during training takes the LAST trainer.val_num_examples rows of the eval split,
    the evaluation its FIRST eval.num_examples: with the split's size in the env config, they must
    not overlap (an env whose config does not give it: `check_built_env`, once it is built)."""
    size = (s.env or {}).get("num_eval_examples") if isinstance(s.env, dict) else None
    if isinstance(size, bool) or not isinstance(size, int):
        return  # an env that takes no such argument, or a bad value the env itself reports
    t, e = s.trainer, s.eval
    _disjoint_eval_rows(
        s, size, f"env.num_eval_examples={size}",
        f"set env.num_eval_examples={t.val_num_examples + e.num_examples} or more, or lower one of them",
    )  # fmt: skip


def check_built_env(s: GrpoConfig, env: Any) -> None:
    """The rules that need the built env (grpo/stages.py calls this before any stage runs): held-out
    validation and the evaluation share no eval row, for an env whose eval split's size only its
    rows tell (a verifiers or third-party env)."""
    if not (s.trainer.eval_steps and "train" in s.stages and "eval" in s.stages):
        return
    sizes = getattr(env, "num_examples", None)
    size = sizes.get("eval") if isinstance(sizes, dict) and "eval" in sizes else len(env.rows("eval"))
    val = max(0, min(s.trainer.val_num_examples, size // 4))
    _disjoint_eval_rows(
        s, size, f"the {size} rows of env {env.name}'s eval split",
        f"lower them to {size} or fewer together (e.g. trainer.val_num_examples={val} "
        f"eval.num_examples={size - val}), or trainer.eval_steps=0",
    )  # fmt: skip


def _disjoint_eval_rows(s: GrpoConfig, size: int, split: str, fix: str) -> None:
    """The validation rows (the split's last) and the evaluation's (its first) fit in `size`."""
    t, e = s.trainer, s.eval
    if t.val_num_examples + e.num_examples > size:
        _fail(
            f"trainer.val_num_examples={t.val_num_examples} + eval.num_examples={e.num_examples} exceed "
            f"{split}: validation takes the last rows of the eval split and evaluation the first ones, so "
            f"they would overlap; {fix}"
        )


def _train_rows(s: GrpoConfig) -> None:
    """One generation batch takes per_device_batch_completions / num_generations x
    gradient_accumulation_steps (x processes) distinct prompts from the train split; TRL drops a
    short chunk, so a smaller split trains nothing. Checked here when the env config gives the
    split's size (the trainer checks it again with the rows it gets, for any env)."""
    size = (s.env or {}).get("num_train_examples") if isinstance(s.env, dict) else None
    t = s.trainer
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or {"generation_batch_size", "steps_per_generation"} & set(t.extra)
    ):
        return  # no size in the config, or a generation batch shaped in trainer.extra
    from grpo.run.distributed import world_size

    needed = (
        t.per_device_batch_completions // t.num_generations * t.gradient_accumulation_steps * world_size()
    )
    if size < needed:
        _fail(
            f"env.num_train_examples={size} is fewer than the {needed} distinct prompts of one generation "
            f"batch (trainer.per_device_batch_completions / trainer.num_generations x "
            f"gradient_accumulation_steps x processes): set env.num_train_examples={needed} or more, or "
            "lower trainer.per_device_batch_completions"
        )


def _reward_model(s: GrpoConfig) -> None:
    rm = s.reward_model
    if rm.kind not in REWARD_MODEL_KINDS:
        _fail(f"reward_model.kind='{rm.kind}' is not one of {', '.join(REWARD_MODEL_KINDS)}")
    if rm.combine not in REWARD_MODEL_COMBINES:
        _fail(f"reward_model.combine='{rm.combine}' is not one of {', '.join(REWARD_MODEL_COMBINES)}")
    if rm.normalization not in REWARD_MODEL_NORMALIZATIONS:
        _fail(
            f"reward_model.normalization='{rm.normalization}' is not one of "
            f"{', '.join(REWARD_MODEL_NORMALIZATIONS)}"
        )
    for key in ("weight", "rubric_weight", "k"):
        if getattr(rm, key) < 0:
            _fail(f"reward_model.{key}={getattr(rm, key)} must be >= 0")
    _reward_model_guards(rm)
    if "reward_model" in s.stages:
        _reward_model_training(rm)
    if (
        rm.kind != "rubric"
        and not rm.checkpoints
        and "eval" in s.stages
        and not {"train", "reward_model"} & set(s.stages)
    ):
        # evaluation reports a learned RM's score as a column next to the env's rewards: without an
        # RM the column would silently be missing
        _fail(
            f"reward_model={rm.kind} with stages=[{','.join(s.stages)}] has no reward model to score with: set "
            "reward_model.checkpoints=[DIR] (a reward_model stage's output dir), train one first with "
            "stages=[reward_model,eval], or drop reward_model= to evaluate with the env's rubric only"
        )
    # GRPO training rewards with the RM; evaluation only adds its score column
    if rm.kind == "rubric" or "train" not in s.stages:
        if rm.kind != "rubric" and "eval" in s.stages:
            _reward_model_checkpoints(s)
        return
    if rm.kind == "learned" and len(rm.checkpoints) > 1:
        _fail(
            f"reward_model=learned takes one checkpoint, got {len(rm.checkpoints)}: use reward_model=ensemble "
            "to combine several"
        )
    if rm.kind == "ensemble" and len(rm.checkpoints) < 2:
        _fail(
            f"reward_model=ensemble needs two or more reward_model.checkpoints, got {len(rm.checkpoints)}: "
            "e.g. 'reward_model.checkpoints=[runs/a/reward_model,runs/b/reward_model]'"
        )
    if not rm.checkpoints and "reward_model" not in s.stages[: s.stages.index("train")]:
        _fail(
            f"reward_model={rm.kind} needs a trained reward model: set reward_model.checkpoints=[DIR] "
            "(a reward_model stage's output dir) or train one first with stages=[reward_model,train]"
        )
    _reward_model_checkpoints(s)


def _reward_model_guards(rm: RewardModelConfig) -> None:
    g, r = rm.guards, rm.rounds
    if g.reference not in REWARD_MODEL_REFERENCES:
        _fail(
            f"reward_model.guards.reference='{g.reference}' is not one of {', '.join(REWARD_MODEL_REFERENCES)}"
        )
    if g.kl_beta is not None and not (math.isfinite(g.kl_beta) and g.kl_beta >= 0):
        _fail(f"reward_model.guards.kl_beta={g.kl_beta} must be a finite number >= 0, or null (off)")
    if r.labeler not in LABELERS:
        _fail(f"reward_model.rounds.labeler='{r.labeler}' is not one of {', '.join(LABELERS)}")
    for key, least in (("every", 0), ("samples_per_prompt", 1), ("label_budget", 1), ("steps", 1)):
        value = getattr(r, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _fail(f"reward_model.rounds.{key}={value!r} must be an integer >= {least}")
    if r.lr is not None and not (math.isfinite(r.lr) and r.lr >= 0):
        _fail(
            f"reward_model.rounds.lr={r.lr} must be a finite number >= 0, or null (reward_model.training.lr)"
        )
    if r.every and r.labeler == "judge" and not str(r.judge.base_url).startswith(("http://", "https://")):
        _fail(
            f"reward_model.rounds.judge.base_url={r.judge.base_url!r} must be an http(s) URL (an OpenAI-compatible .../v1)"
        )


def _reward_model_checkpoints(s: GrpoConfig) -> None:
    """Each RM dir is complete and scores every language of the run: a mismatch found only once
    the stages run would leave a FAILED MLflow run behind. Reads the dirs' JSON, not the weights."""
    from grpo.reward_model import check_checkpoint_dir, language_mismatch, run_languages, scored_languages

    rm = s.reward_model
    wanted = run_languages(s.language)
    for i, path in enumerate(rm.checkpoints):
        field = f"reward_model.checkpoints[{i}]"
        check_checkpoint_dir(path, field)
        problem = language_mismatch(field, path, scored_languages(path, field, rm.normalization), wanted)
        if problem:
            _fail(problem)


def _reward_model_training(rm: RewardModelConfig) -> None:
    data, syn, tr, bb = rm.data, rm.data.synthetic, rm.training, rm.backbone
    _weights_source("reward_model.backbone", bb)
    if bb.max_length < 16:
        _fail(f"reward_model.backbone.max_length={bb.max_length} must be >= 16 tokens")
    if bb.tokenizer_vocab_size and bb.tokenizer_vocab_size < 512:
        _fail(
            f"reward_model.backbone.tokenizer_vocab_size={bb.tokenizer_vocab_size} must be 0 or >= 512 tokens"
        )
    if data.path is not None and not Path(data.path).expanduser().exists():
        _fail(f"reward_model.data.path={data.path}: no such file or directory")
    if not 0 < data.heldout_fraction < 1:
        _fail(f"reward_model.data.heldout_fraction={data.heldout_fraction} must be in (0, 1), e.g. 0.2")
    if data.path is None:
        if syn.n < 2:
            _fail(f"reward_model.data.synthetic.n={syn.n} must be >= 2 pairs per language")
        if not 0 <= syn.severity <= 1:
            _fail(f"reward_model.data.synthetic.severity={syn.severity} must be in [0, 1]")
        unknown = [c for c in syn.corruptions if c not in CORRUPTIONS]
        if unknown or not syn.corruptions:
            _fail(
                f"reward_model.data.synthetic.corruptions={list(syn.corruptions)}: use a non-empty subset of "
                f"{', '.join(CORRUPTIONS)}"
            )
        if syn.languages is not None:
            from grpo.languages.spec import available_languages

            known = available_languages()
            bad = [code for code in syn.languages if code not in known]
            if bad or not syn.languages:
                _fail(
                    f"reward_model.data.synthetic.languages={list(syn.languages)}: unknown language(s) "
                    f"{', '.join(map(str, bad)) or '(empty list)'}; available: {', '.join(known)}"
                )
    if tr.lr <= 0:
        _fail(f"reward_model.training.lr={tr.lr} must be > 0")
    if tr.max_steps < 1 and tr.epochs <= 0:
        _fail(
            f"reward_model.training.epochs={tr.epochs} must be > 0 (or set reward_model.training.max_steps)"
        )
    for key in ("batch_size_pairs", "gradient_accumulation_steps", "logging_steps", "score_batch_size"):
        if getattr(tr, key) < 1:
            _fail(f"reward_model.training.{key}={getattr(tr, key)} must be >= 1")
    if tr.warmup < 0:
        _fail(f"reward_model.training.warmup={tr.warmup} must be >= 0")


def _demonstrations(s: GrpoConfig) -> None:
    """sft.demonstrator's language is one of conf/language, and sft.num_examples_per_language counts
    demonstrations in the demonstrations' languages (the env's arguments are checked when it is built)."""
    from grpo.languages.mix import language_shares
    from grpo.languages.spec import get_spec, spec_from_config
    from grpo.sft.data import language_quota

    d = s.sft.demonstrator
    if not isinstance(d.env, dict) or "_target_" in d.env:
        _fail("sft.demonstrator.env: a mapping of the run env's arguments, e.g. {collation: codepoint}")
    try:
        spec = spec_from_config(s.language) if d.language is None else get_spec(str(d.language))
    except UserError as ex:
        raise UserError(f"sft.demonstrator.language: {ex}") from None
    language_quota(s.sft.num_examples_per_language, list(language_shares(spec)))


def _sft(s: GrpoConfig) -> None:
    f = s.sft
    if f.data_path is not None and not Path(f.data_path).expanduser().exists():
        _fail(f"sft.data_path={f.data_path}: no such file or directory")
    if f.data_path is None and f.num_examples < 1:
        _fail(f"sft.num_examples={f.num_examples} must be >= 1 (demonstrations from the env's train rows)")
    if f.data_path is None:
        _demonstrations(s)
    if f.lr <= 0:
        _fail(f"sft.lr={f.lr} must be > 0")
    if f.max_steps < 1 and f.epochs <= 0:
        _fail(f"sft.epochs={f.epochs} must be > 0 (or set sft.max_steps)")
    for key in ("batch_size", "gradient_accumulation_steps", "logging_steps"):
        if getattr(f, key) < 1:
            _fail(f"sft.{key}={getattr(f, key)} must be >= 1")
    if f.max_length < 16:
        _fail(f"sft.max_length={f.max_length} must be >= 16 tokens")
    if f.warmup < 0 or f.weight_decay < 0 or f.max_grad_norm < 0:
        _fail("sft.warmup, sft.weight_decay and sft.max_grad_norm must be >= 0")
    if f.lr_scheduler not in LR_SCHEDULERS:
        _fail(f"sft.lr_scheduler='{f.lr_scheduler}' is not one of {', '.join(LR_SCHEDULERS)}")
    if s.generation.backend == "openai":
        _fail(
            "stages with sft and generation=openai: the endpoint serves its own model, not the SFT "
            "checkpoint; evaluate the checkpoint with generation=hf (model.path=<run_dir>/sft)"
        )
    lora = s.model.lora
    if f.lora and (lora.r < 1 or lora.alpha <= 0 or not 0 <= lora.dropout < 1 or not lora.target_modules):
        _fail(
            f"sft.lora=true trains an adapter shaped by model.lora: model.lora.r={lora.r} and alpha={lora.alpha} "
            f"must be positive, dropout={lora.dropout} in [0, 1), target_modules non-empty"
        )


def _tracking(t: TrackingConfig) -> None:
    if t.backend not in TRACKING_BACKENDS:
        _fail(f"tracking.backend={t.backend} is unknown: use tracking=mlflow or tracking=none")
    if t.backend == "mlflow" and t.uri:
        from grpo.tracking.store import check_uri

        check_uri(t.uri, field="tracking.uri")
    if t.ui_url is not None and not str(t.ui_url).startswith(("http://", "https://")):
        _fail(f"tracking.ui_url={t.ui_url} must be an http(s):// address of the MLflow UI, or null")
    if t.log_samples < 0:
        _fail(f"tracking.log_samples must be >= 0 (0 = no sample table), got {t.log_samples}")
    if t.log_completions < 0:
        _fail(f"tracking.log_completions must be >= 0 (0 = no completions table), got {t.log_completions}")
    if not (math.isfinite(t.system_metrics_interval) and t.system_metrics_interval > 0):
        _fail(f"tracking.system_metrics_interval must be > 0 seconds, got {t.system_metrics_interval}")
    wants = (
        "tracking.register_as" if t.register_as is not None else "tracking.log_model" if t.log_model else None
    )
    if wants and t.backend != "mlflow":
        _fail(f"{wants} logs to MLflow: it needs tracking=mlflow, not tracking={t.backend}")
    if t.register_as is not None and not str(t.register_as).strip():
        _fail("tracking.register_as is empty: give the registered model a name, or null")
