"""Structured-config schema of a run.

The dataclasses are registered in Hydra's ConfigStore as `grpo_schema` and every YAML group
file merges onto them, so a typo in an override (`trainer.lrr=1`) or a wrong type
(`eval.num_examples=abc`) fails at composition time, before anything heavy is imported.
Groups whose keys depend on the chosen option (env args, model architecture) are typed `Any`
and checked when the object they configure is built.

This module must stay light: no torch / transformers / trl / mlflow import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ModelConfig:
    name: str = MISSING
    # pretrained: load `path` (hub id or local dir); random: build `architecture` with random weights
    source: str = "pretrained"
    path: str | None = None
    # Qwen3 config fields for source=random (hidden_size, num_hidden_layers, ...)
    architecture: dict[str, Any] | None = None
    # tokenizer hub id or local dir; null = the model's own (pretrained) or the built-in offline one (random)
    tokenizer: str | None = None
    dtype: str = "float32"
    trust_remote_code: bool = False
    # extra kwargs for tokenizer.apply_chat_template, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class LanguageConfig:
    # ISO 639-1 code carried by every dataset row ("mix" for language=mix)
    code: str = "en"
    name: str = "English"
    # Unicode scripts (ISO 15924 names: Latin Han Hiragana Katakana Hangul Arabic Devanagari
    # Cyrillic) whose words count as this language in the consistency reward
    scripts: list[str] = field(default_factory=lambda: ["Latin"])
    # ICU locale of the collation, e.g. sv_SE or zh@collation=pinyin; null with sort_key=codepoint
    icu_locale: str | None = None
    # how names sort: codepoint (plain Python order, alphabet-sort 0.1.5) | icu | icu_reading
    # (ICU order of the name's reading: ja kana)
    sort_key: str = "codepoint"
    # ICU strength: primary | secondary | tertiary | quaternary | identical
    collation_strength: str = "tertiary"
    # faker locale of the built-in given/family names; null = no built-in names
    name_locale: str | None = "en_US"
    # full names are written family name first (zh ja ko)
    family_first: bool = False
    # between the two parts of a full name ("" for zh ko and for en's "MarcoEllero")
    full_name_separator: str = " "
    # weight of the language-consistency reward; 0 disables it
    consistency_weight: float = 0.0
    # localized prompt texts per environment: {env name: {key: text}} (see conf/language/en.yaml)
    prompts: dict[str, Any] = field(default_factory=dict)
    # language=mix: {code: sampling weight}; empty for a single language
    mix: dict[str, float] = field(default_factory=dict)
    # language=mix: the languages to use, e.g. [en, zh] (a dict override merges into `mix` instead of
    # replacing it); null = every language of `mix`; a code missing from `mix` gets weight 1
    members: list[str] | None = None
    # language=mix: sample every language equally often, whatever its weight
    balance: bool = False


@dataclass
class RewardModelBackboneConfig:
    # preset name (conf/reward_model/backbone/<name>.yaml)
    name: str = "tiny"
    # random: a Qwen3 sequence-classification model built from `architecture` with random weights and
    # the built-in offline tokenizer; pretrained: `path` (hub id or local dir) loaded with
    # AutoModelForSequenceClassification (a causal LM gets a new score head)
    source: str = "random"
    path: str | None = None
    # Qwen3Config fields for source=random (hidden_size, num_hidden_layers, ...)
    architecture: dict[str, Any] | None = None
    # tokenizer hub id or local dir; null = the backbone's own (pretrained) or the built-in one (random)
    tokenizer: str | None = None
    dtype: str = "float32"
    trust_remote_code: bool = False
    # tokens of prompt + completion the RM reads; a longer conversation loses its middle
    max_length: int = 1024
    # the random weights (source=random) and the new score head are a function of this seed
    seed: int = 0


@dataclass
class RewardModelSyntheticConfig:
    # environment the pairs come from: a conf/env option name; null = the run's env
    env: str | None = None
    # preference pairs per language
    n: int = 256
    # languages of the pairs; null = the run's language (language=mix: its members)
    languages: list[str] | None = None
    # corruption strength of the rejected answer in [0, 1]: 0 = one small change, 1 = most of it broken
    severity: float = 0.5
    # corruption kinds drawn for the rejected answer: swap, drop, duplicate, format, language
    corruptions: list[str] = field(
        default_factory=lambda: ["swap", "drop", "duplicate", "format", "language"]
    )


@dataclass
class RewardModelDataConfig:
    # a preference JSONL file (or a dir of *.jsonl): {prompt|instruction, chosen, rejected, language}
    # per line; null = synthetic pairs from an environment
    path: str | None = None
    synthetic: RewardModelSyntheticConfig = field(default_factory=RewardModelSyntheticConfig)
    # share of each language's pairs held out for accuracy and normalisation statistics
    heldout_fraction: float = 0.2
    # the train / held-out split and the synthetic corruptions are a function of this seed
    seed: int = 0


@dataclass
class RewardModelTrainingConfig:
    lr: float = 1e-3
    # passes over the training pairs (ignored when max_steps > 0)
    epochs: float = 1.0
    # optimizer steps; -1 = from epochs
    max_steps: int = -1
    # per-device micro-batch counted in PAIRS (each pair is two sequences: chosen and rejected)
    batch_size_pairs: int = 16
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.0
    # warmup length: a fraction of the steps when < 1, a number of optimizer steps when >= 1
    warmup: float = 0.0
    # any transformers SchedulerType
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    # mean-zero reward regulariser of Eisenstein et al. 2023 (TRL center_rewards_coefficient); null = off
    center_rewards_coefficient: float | None = None
    # optimizer steps between logged training metrics (rm/train/...)
    logging_steps: int = 10
    bf16: bool = False
    # recompute activations in the backward pass: less memory, ~20-30% slower (large backbones)
    activation_checkpointing: bool = False
    # completions per forward pass when scoring (held-out accuracy, calibration, GRPO rewards)
    score_batch_size: int = 64
    # any other trl.RewardConfig field, passed through as is
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardModelConditioningConfig:
    # prefix every sequence with a language tag token <lang:xx> (one added token per language)
    tag_token: bool = True
    # one scalar score head per language (the row's language picks it) instead of one shared head
    per_language_heads: bool = False


@dataclass
class RewardModelConfig:
    # rubric (env rewards only) | learned (one RM + rubric) | ensemble (several RMs + rubric) |
    # learned_only (RM(s) count, the rubric is only logged)
    kind: str = "rubric"
    # multiplies the environment's own rubric weights (0: the rubric is logged but does not count)
    rubric_weight: float = 1.0
    # trained RM dirs (a reward_model stage's output); empty = this run's reward_model stage output
    checkpoints: list[str] = field(default_factory=list)
    # weight of the (combined) normalised RM score in the GRPO reward
    weight: float = 1.0
    # how ensemble members' normalised scores combine: mean | min | mean_minus_std (mean - k * std)
    combine: str = "mean"
    k: float = 1.0
    backbone: RewardModelBackboneConfig = field(default_factory=RewardModelBackboneConfig)
    data: RewardModelDataConfig = field(default_factory=RewardModelDataConfig)
    training: RewardModelTrainingConfig = field(default_factory=RewardModelTrainingConfig)
    conditioning: RewardModelConditioningConfig = field(default_factory=RewardModelConditioningConfig)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerConfig:
    # adamw | sgd | adafactor | adamw_8bit (bitsandbytes, CUDA GPU only)
    name: str = "adamw"
    # peak learning rate (after warmup)
    lr: float = 1e-6
    weight_decay: float = 0.0
    # Adam beta1, beta2 (adamw, adamw_8bit)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    # SGD momentum (sgd only)
    momentum: float = 0.0
    # gradient-norm clipping threshold; 0 disables clipping
    max_grad_norm: float = 1.0
    # any transformers SchedulerType: constant, constant_with_warmup, linear, cosine, ...
    lr_scheduler: str = "constant_with_warmup"
    # warmup length: a fraction of max_steps when < 1, a number of optimizer steps when >= 1
    warmup: float = 0.0


@dataclass
class TrainerConfig:
    # preset name (grpo | dr_grpo | dapo); the fields below are what TRL receives
    name: str = "grpo"
    # completions sampled per prompt: the GRPO group size G
    num_generations: int = 4
    # per-device micro-batch counted in COMPLETIONS (prompts per micro-batch = this / num_generations)
    per_device_batch_completions: int = 8
    gradient_accumulation_steps: int = 1
    # optimizer steps of the run
    max_steps: int = 8
    # grpo | dr_grpo | dapo | bnpo | cispo | sapo: how token losses are aggregated (TRL loss_type)
    loss_type: str = "grpo"
    # KL coefficient against the reference model; a reference model is only built when > 0
    beta: float = 0.04
    # PPO clip range below 1 (and above, unless epsilon_high is set)
    epsilon: float = 0.2
    # DAPO clip-higher upper range; null = epsilon
    epsilon_high: float | None = None
    # advantage scaling: group (std of the prompt's group) | batch (std of the batch) | none (Dr. GRPO)
    scale_rewards: str = "group"
    # optimisation passes over each generated batch (mu in the GRPO paper)
    num_iterations: int = 1
    # sampling temperature and nucleus of training rollouts
    temperature: float = 1.0
    top_p: float = 1.0
    # tokens of the whole completion: every model turn plus the environment turns between them
    max_completion_length: int = 1024
    # completions that hit max_completion_length without EOS get no gradient (DAPO overlong masking)
    mask_truncated_completions: bool = False
    # optimizer steps between metric logs / between checkpoints
    logging_steps: int = 1
    save_steps: int = 50
    # checkpoints kept on disk (oldest removed first); null keeps all
    save_total_limit: int | None = 2
    # bf16 mixed precision (GPU); keep false on CPU
    bf16: bool = False
    # recompute activations in the backward pass: less memory, ~20-30% slower
    gradient_checkpointing: bool = False
    # write each logged batch's completions and rewards to <run_dir>/checkpoints/completions/*.parquet
    log_completions: bool = False
    seed: int = 0
    # any other trl.GRPOConfig field, passed through as is (e.g. {top_entropy_quantile: 0.2})
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationConfig:
    # hf | openai (evaluation only: text, no token ids) | vllm_colocate | vllm_server
    backend: str = "hf"
    # max new tokens of one model turn (the whole completion is bounded by trainer.max_completion_length)
    max_tokens_per_turn: int = 128
    # hf: conversations per generate() call (1 = one at a time); null = all active conversations at once
    batch_size: int | None = None
    # openai / vllm_server endpoint, e.g. http://127.0.0.1:8000/v1
    base_url: str | None = None
    # openai: the served model name
    model: str | None = None
    # NAME of the environment variable holding the API key (never the key itself); null = no auth
    api_key_var: str | None = None
    # openai: requests in flight at once (every conversation of a turn is sent together)
    max_concurrency: int = 32
    # openai: seconds one request may take before it is retried / fails
    timeout_s: float = 120.0
    # openai: retries on connection errors, timeouts, HTTP 429 and 5xx, with exponential backoff
    max_retries: int = 3
    # vllm_server
    host: str = "127.0.0.1"
    port: int = 8000
    # vllm_colocate: share of GPU memory vLLM may take
    gpu_memory_utilization: float = 0.3
    # backend extras: openai sends them in every request body (e.g. top_k for a vLLM server);
    # vllm_colocate reads max_model_length, tensor_parallel_size
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrackingConfig:
    # mlflow | none
    backend: str = "none"
    # null = $MLFLOW_TRACKING_URI if set, else sqlite:///<absolute output_root>/mlflow.db;
    # or a sqlite:///path.db / http://host:port tracking server
    uri: str | None = None
    # null = one experiment per environment: "grpo-<env name>"
    experiment: str | None = None
    # null = the command-line overrides (a sweep job: the overrides that vary between jobs)
    run_name: str | None = None
    # artifact root of a NEW experiment (fixed at its creation); null = <dir of the SQLite db>/mlartifacts/
    # <experiment> for a SQLite store, the server's own choice for a tracking server
    artifact_location: str | None = None
    # evaluation rollouts logged as a table of sample completions with their rewards (0 = none)
    log_samples: int = 16
    # PNG plots at the end of a run: reward and KL over steps, baseline vs final eval per reward function
    log_plots: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalConfig:
    # vf-eval -n: the first n rows of the env's eval split (>= 1; checked by grpo.evaluate.validate_eval)
    num_examples: int = 5
    # vf-eval -r: rollouts per example (>= 1)
    rollouts_per_example: int = 3
    # sampling of evaluation rollouts; temperature 0 = greedy
    temperature: float = 1.0
    top_p: float = 1.0
    # seeds evaluation sampling (same seed -> same rollouts on the hf backend); null = unseeded
    seed: int | None = 0
    # print the per-example table (one column per rollout index)
    show_examples: bool = True


@dataclass
class GrpoConfig:
    # what the entry point does, in order: reward_model, eval, train
    stages: list[str] = field(default_factory=lambda: ["eval"])
    seed: int = 0
    # a previous run's output dir to resume training from (its latest checkpoint)
    resume: str | None = None
    # absolute path of <repo or cwd>/outputs, set by the entry point; all run output goes under it
    output_root: str = "outputs"
    env: Any = None
    model: ModelConfig = field(default_factory=ModelConfig)
    language: LanguageConfig = field(default_factory=LanguageConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def register_schema() -> None:
    ConfigStore.instance().store(name="grpo_schema", node=GrpoConfig)


# ---- cross-field validation ---------------------------------------------------------------------
# Rules that no single field's type can express. Each failure is one UserError line naming the
# field and the fix; everything here runs before any model is loaded and imports nothing heavy.

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo")
SCALE_REWARDS = ("group", "batch", "none")
OPTIMIZERS = ("adamw", "sgd", "adafactor", "adamw_8bit")
VLLM_BACKENDS = ("vllm_colocate", "vllm_server")
# transformers.SchedulerType values (kept literal so validation needs no transformers import;
# tests/test_validation.py checks the list against the installed transformers)
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)
# a model turn needs room for at least a short answer and its end-of-turn token
MIN_TOKENS_PER_TURN = 16


def validate(cfg: Any) -> None:
    """Check the cross-field rules of a composed config; raise UserError (one line) on the first
    violation. Light: safe to call before anything heavy is imported."""
    from grpo.generation import check_generation_config
    from grpo.reward_model import validate_reward_model
    from grpo.tracking import validate_tracking

    _validate_stages(cfg.stages)
    _validate_trainer(cfg.trainer)
    _validate_optimizer(cfg.optimizer)
    _validate_model_vs_trainer(cfg.model, cfg.trainer)
    _validate_turn_budget(cfg)
    _validate_generation(cfg.generation, cfg.stages)
    _validate_resume(cfg)
    _validate_eval(cfg)
    check_generation_config(cfg.generation)
    validate_reward_model(cfg)
    validate_tracking(cfg)


STAGES = ("reward_model", "eval", "train")


def _validate_stages(stages: Any) -> None:
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        _fail(
            f"stages={list(stages)}: each stage must be one of {', '.join(STAGES)} (in the order to run them), "
            "e.g. stages=[eval,train,eval]"
        )


def _fail(message: str) -> None:
    from grpo.errors import UserError

    raise UserError(message)


def _validate_trainer(t: Any) -> None:
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
        if t[key] < 1:
            _fail(f"trainer.{key}={t[key]} must be >= 1")
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
    extra = t.extra or {}
    if extra.get("sync_ref_model") and t.beta == 0:
        _fail(
            "trainer.extra.sync_ref_model=true has no reference model to sync with trainer.beta=0: set "
            "trainer.beta > 0 or drop sync_ref_model"
        )


def _validate_optimizer(o: Any) -> None:
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
        import importlib.util

        if not _has_cuda_gpu():
            _fail(
                "optimizer=adamw_8bit needs a CUDA GPU (bitsandbytes 8-bit states): use optimizer=adamw on CPU"
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            _fail(
                "optimizer=adamw_8bit needs bitsandbytes: pip install bitsandbytes (or use optimizer=adamw)"
            )


def _has_cuda_gpu() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch (validation must stay light)."""
    import os

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def _validate_model_vs_trainer(m: Any, t: Any) -> None:
    lora = m.lora
    if not lora.enabled:
        return
    if lora.r < 1 or lora.alpha <= 0:
        _fail(
            f"model.lora.r={lora.r} and model.lora.alpha={lora.alpha} must be positive (e.g. r=16, alpha=32)"
        )
    if not 0 <= lora.dropout < 1:
        _fail(f"model.lora.dropout={lora.dropout} must be in [0, 1)")
    if "lm_head" in lora.target_modules:
        _fail(
            "model.lora.target_modules contains lm_head: GRPO computes log-probs from lm_head.weight directly, so "
            "an adapter there would never train; remove lm_head"
        )
    if (t.extra or {}).get("sync_ref_model"):
        _fail(
            "trainer.extra.sync_ref_model=true does not work with model.lora.enabled=true: under LoRA the reference "
            "model is the adapter-disabled base; drop sync_ref_model"
        )


def _env_max_turns(env: Any) -> int:
    if env is None:
        return 1
    value = env.get("max_turns") if hasattr(env, "get") else getattr(env, "max_turns", None)
    return int(value) if isinstance(value, int) and value >= 1 else 1


def _validate_turn_budget(cfg: Any) -> None:
    turns = _env_max_turns(cfg.get("env"))
    need = turns * MIN_TOKENS_PER_TURN
    if cfg.trainer.max_completion_length < need:
        _fail(
            f"trainer.max_completion_length={cfg.trainer.max_completion_length} leaves fewer than "
            f"{MIN_TOKENS_PER_TURN} tokens per model turn for env.max_turns={turns} (it covers all turns): set "
            f"trainer.max_completion_length >= {need}"
        )
    if cfg.generation.max_tokens_per_turn < 1:
        _fail(f"generation.max_tokens_per_turn={cfg.generation.max_tokens_per_turn} must be >= 1")


def _validate_generation(g: Any, stages: Any) -> None:
    if g.backend == "openai" and "train" in stages:
        _fail(
            "generation=openai is evaluation only (an endpoint returns text, not token ids): train with "
            "generation=hf or vllm_colocate / vllm_server, or set stages=[eval]"
        )
    if g.backend not in VLLM_BACKENDS:
        return
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        _fail(
            f"generation={g.backend} needs vLLM: pip install 'grpo[vllm]' on a GPU machine (or use generation=hf)"
        )
    if not 0 < g.gpu_memory_utilization <= 1:
        _fail(f"generation.gpu_memory_utilization={g.gpu_memory_utilization} must be in (0, 1]")


def _validate_resume(cfg: Any) -> None:
    if not cfg.get("resume"):
        return
    if "train" not in cfg.stages:
        _fail(f"resume={cfg.resume} needs the train stage: add train to stages (e.g. stages=[train,eval])")
    from grpo.train import latest_checkpoint

    latest_checkpoint(cfg.resume)  # raises UserError when there is nothing complete to resume from


def _validate_eval(cfg: Any) -> None:
    if "eval" not in cfg.stages:
        return
    try:
        from grpo.evaluate import validate_eval
    except ImportError:  # the evaluator module is optional for training-only installs
        return
    validate_eval(cfg)
