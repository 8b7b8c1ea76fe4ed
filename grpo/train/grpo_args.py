"""trl.GRPOConfig from a run's settings: the trainer, optimizer and generation groups in TRL's names.

Batch geometry (grpo/train/geometry.py): TRL counts the per-device batch in completions (the
micro-batch, trainer.per_device_batch_completions, a multiple of the group size, so a group never
straddles two micro-batches); the micro-batches per step follow from trainer.completions_per_step;
one generation per optimizer step (steps_per_generation = gradient_accumulation_steps, TRL's
default), so TRL's generation_batch_size is the completions per step. Sampling: our
rollout engine samples with the same temperature / top-p. Generation ahead of training: TRL's
truncated importance sampling per token (vllm_importance_sampling_mode=token_truncate). Tracking: report_to none (the run's
tracker gets the metrics through a callback). trainer.extra passes any other GRPOConfig field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.config import OPTIMIZERS, VLLM_MODES, GrpoConfig
from grpo.train.geometry import step_geometry
from grpo.trl_adapter.config import build_trl_config
from grpo.trl_adapter.devices import has_cuda


def grpo_builds_engine(backend: str) -> bool:
    """Whether grpo, not TRL, builds this run's vLLM engine (grpo/train/vllm_cpu.py): a colocated
    engine of vLLM's CPU build, or a vLLM server beside a trainer without CUDA (its weights go
    through a file: TRL's NCCL channel needs CUDA)."""
    from grpo.generation.vllm_cpu import vllm_build

    if backend == "vllm_server":
        return not has_cuda()
    return backend == "vllm_colocate" and vllm_build() == "cpu"


def grpo_config_kwargs(
    settings: GrpoConfig, output_dir: Path, reward_weights: Sequence[float]
) -> dict[str, Any]:
    """trl.GRPOConfig keyword arguments for a run's settings."""
    t, o, g = settings.trainer, settings.optimizer, settings.generation
    geometry = step_geometry(t)
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        # batch geometry (TRL counts the per-device batch in completions)
        "per_device_train_batch_size": geometry.micro_batch,
        "gradient_accumulation_steps": geometry.accumulation,
        "num_generations": int(t.num_generations),
        "max_steps": int(t.max_steps),
        # optimizer
        "optim": OPTIMIZERS[o.name],
        "learning_rate": float(o.lr),
        "weight_decay": float(o.weight_decay),
        "adam_beta1": float(o.betas[0]),
        "adam_beta2": float(o.betas[1]),
        "max_grad_norm": float(o.max_grad_norm),
        "lr_scheduler_type": str(o.lr_scheduler),
        "warmup_steps": float(o.warmup),
        # the GRPO objective
        "loss_type": str(t.loss_type),
        "beta": float(t.beta),
        "epsilon": float(t.epsilon),
        "epsilon_high": None if t.epsilon_high is None else float(t.epsilon_high),
        "scale_rewards": str(t.scale_rewards),
        "num_iterations": int(t.num_iterations),
        "mask_truncated_completions": bool(t.mask_truncated_completions),
        "reward_weights": [float(w) for w in reward_weights],
        # sampling (our rollout engine samples with the same temperature / top-p)
        "temperature": float(t.temperature),
        "top_p": float(t.top_p),
        "max_completion_length": int(t.max_completion_length),
        # logging and checkpoints
        "logging_steps": int(t.logging_steps),
        "save_strategy": "steps",
        "save_steps": int(t.save_steps),
        "save_total_limit": None if t.save_total_limit is None else int(t.save_total_limit),
        "log_completions": bool(t.log_completions),
        "report_to": "none",  # tracking comes in as a callback
        "disable_tqdm": True,  # one compact line per log instead (ProgressPrinter)
        "bf16": bool(t.bf16),
        # transformers 5 name of gradient checkpointing
        "activation_checkpointing": bool(t.gradient_checkpointing),
        "seed": int(t.seed),
        "remove_unused_columns": False,
        # pinned host memory only helps copies to a GPU
        "dataloader_pin_memory": has_cuda(),
    }
    if o.name == "sgd" and o.momentum:
        kwargs["optim_args"] = f"momentum={float(o.momentum)}"
    if g.backend in VLLM_MODES:
        from grpo.generation.vllm import server_base_url

        extra = g.extra
        kwargs.update(
            # where TRL's engine cannot run (vLLM's CPU build, no CUDA for NCCL) the trainer is
            # built without it and given grpo's (grpo/train/vllm_cpu.py)
            use_vllm=not grpo_builds_engine(g.backend),
            vllm_mode=VLLM_MODES[g.backend],
            vllm_gpu_memory_utilization=float(g.gpu_memory_utilization),
            vllm_server_base_url=server_base_url(g),
            vllm_server_host=str(g.host),
            vllm_server_port=int(g.port),
            vllm_server_timeout=float(g.timeout_s),
            vllm_max_model_length=extra.get("max_model_length"),
            vllm_tensor_parallel_size=int(extra.get("tensor_parallel_size", 1)),
        )
    if g.num_batches_ahead:
        # rollouts sampled apart from the trainer, up to max_off_policy_steps old: TRL's per-token
        # truncated importance sampling (grpo/train/ahead.py turns its correction on for them)
        kwargs.update(
            vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_correction=True
        )
    kwargs.update(t.extra)
    return kwargs


def make_grpo_config(settings: GrpoConfig, output_dir: Path, reward_weights: Sequence[float]) -> Any:
    """The trl.GRPOConfig of a run; TRL's own rejections become one-line UserErrors."""
    from trl import GRPOConfig

    kwargs = grpo_config_kwargs(settings, output_dir, reward_weights)
    return build_trl_config(GRPOConfig, kwargs, "trainer", "trainer.extra")
