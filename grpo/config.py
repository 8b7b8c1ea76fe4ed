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
from typing import Any, Optional

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
    path: Optional[str] = None
    # Qwen3 config fields for source=random (hidden_size, num_hidden_layers, ...)
    architecture: Optional[dict[str, Any]] = None
    # tokenizer hub id or local dir; null = the model's own (pretrained) or the built-in offline one (random)
    tokenizer: Optional[str] = None
    dtype: str = "float32"
    trust_remote_code: bool = False
    # extra kwargs for tokenizer.apply_chat_template, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class LanguageConfig:
    # ISO 639-1 code carried by every dataset row
    code: str = "en"
    name: str = "English"
    # weight of the language-consistency reward; 0 disables it
    consistency_weight: float = 0.0
    # language=mix: {code: sampling weight}; empty for a single language
    mix: dict[str, float] = field(default_factory=dict)
    # language=mix: sample every listed language equally often, whatever its weight
    balance: bool = False
    # the rest of a language file (scripts, ICU locale, prompts) is free-form
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardModelConfig:
    # rubric | learned | ensemble | learned_only
    kind: str = "rubric"
    # weight of the environment's own rubric rewards relative to learned ones
    rubric_weight: float = 1.0
    checkpoints: list[str] = field(default_factory=list)
    weight: float = 1.0
    # ensemble combination: mean | min | mean_minus_std
    combine: str = "mean"
    k: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerConfig:
    # adamw | sgd | adafactor | adamw_8bit (GPU only)
    name: str = "adamw"
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    momentum: float = 0.0
    max_grad_norm: float = 1.0
    # any transformers SchedulerType: constant, constant_with_warmup, linear, cosine, ...
    lr_scheduler: str = "constant_with_warmup"
    # fraction of max_steps (< 1) or number of steps (>= 1)
    warmup: float = 0.0


@dataclass
class TrainerConfig:
    name: str = "grpo"
    # completions sampled per prompt (the GRPO group)
    num_generations: int = 4
    # per-device batch counted in COMPLETIONS (prompts per step = this / num_generations)
    per_device_batch_completions: int = 8
    gradient_accumulation_steps: int = 1
    max_steps: int = 20
    # grpo | dr_grpo | dapo | bnpo
    loss_type: str = "dapo"
    # KL coefficient; a reference model is only built when > 0
    beta: float = 0.0
    epsilon: float = 0.2
    # DAPO clip-higher; null = same as epsilon
    epsilon_high: Optional[float] = None
    # group | batch | none
    scale_rewards: str = "group"
    num_iterations: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    # tokens of the whole completion: every model turn plus the environment turns between them
    max_completion_length: int = 256
    max_prompt_length: Optional[int] = 512
    mask_truncated_completions: bool = False
    logging_steps: int = 1
    save_steps: int = 10
    # checkpoints kept on disk (oldest removed first); null keeps all
    save_total_limit: Optional[int] = 2
    bf16: bool = False
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationConfig:
    # hf | openai | vllm_colocate | vllm_server
    backend: str = "hf"
    # max new tokens of one model turn (the whole completion is bounded by trainer.max_completion_length)
    max_tokens_per_turn: int = 128
    # hf: conversations per generate() call; null = all active conversations at once
    batch_size: Optional[int] = None
    # openai / vllm_server endpoint
    base_url: Optional[str] = None
    model: Optional[str] = None
    # NAME of the environment variable holding the API key (never the key itself)
    api_key_var: Optional[str] = None
    max_concurrency: int = 32
    timeout_s: float = 120.0
    max_retries: int = 3
    # vllm_server
    host: str = "127.0.0.1"
    port: int = 8000
    # vllm_colocate: share of GPU memory vLLM may take
    gpu_memory_utilization: float = 0.3
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrackingConfig:
    # mlflow | none
    backend: str = "none"
    # null = sqlite:///<repo outputs>/mlflow.db, resolved to an absolute path once
    uri: Optional[str] = None
    # null = one experiment per environment: "grpo-<env name>"
    experiment: Optional[str] = None
    run_name: Optional[str] = None
    artifact_location: Optional[str] = None
    log_samples: int = 16
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalConfig:
    # vf-eval -n: examples drawn from the eval split
    num_examples: int = 5
    # vf-eval -r: rollouts per example
    rollouts_per_example: int = 3
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    # print the per-example table (one column per rollout index)
    show_examples: bool = True


@dataclass
class GrpoConfig:
    # what the entry point does, in order: reward_model, eval, train
    stages: list[str] = field(default_factory=lambda: ["eval"])
    seed: int = 0
    # a previous run's output dir to resume training from (its latest checkpoint)
    resume: Optional[str] = None
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
