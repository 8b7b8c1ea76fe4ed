"""GRPO training: TRL's GRPOTrainer, configured from the trainer / optimizer / model / generation groups.

How the pieces meet TRL (trl 1.16, read its grpo_trainer.py):
- Dataset: the environment's train rows as conversational prompts (+ row_id, language). TRL's
  sampler repeats every prompt `num_generations` times, consecutively, and hands each process its
  generation batch of prompts.
- `rollout_func(prompts, trainer)`: maps each group of identical prompts back to its Row, runs ALL
  of the batch's conversations through the rollout engine (grpo.rollout.run_rollouts: one batched
  generate call per turn) with the trainer's current policy (the hf backend on the unwrapped model,
  or TRL's own vLLM engine), and returns per completion: `prompt_ids`, `completion_ids` (model and
  environment tokens interleaved), `logprobs`, `env_mask` (TRL's tool mask: environment tokens get
  no gradient and do not count as completion length) and the extra fields the reward adapters read
  (the episode's messages, state and the row's info).
- Rewards: every rubric function becomes a named TRL reward function (grpo.rewards.rubric) with
  its weight in `reward_weights`; TRL logs `rewards/<name>/mean` for each.
- Batch geometry: `per_device_batch_completions` completions per micro-batch, a multiple of the
  group size, so a group never straddles two batches; one generation per optimizer step
  (steps_per_generation = gradient_accumulation_steps, TRL's default).
- Reference model (beta > 0): under LoRA, TRL uses the adapter-disabled base (no second copy);
  without LoRA, TRL loads a copy from the policy's path, so random-weight policies are first saved
  to <run_dir>/initial_model.
- Monitors: the rollout function also computes the batch's reward-hacking monitors
  (grpo/train_monitors.py: tokens per turn, repetition, format failures, wrong language) and hands
  them to TRL's metric log (the `log_metric` path reward functions use), so they are logged with
  TRL's own metrics at the step, as monitor/<name> (train/monitor/<name> in MLflow).
- Validation (trainer.eval_steps > 0): grpo/train_validation.py evaluates the current policy on
  held-out rows every eval_steps steps and, with trainer.keep_best, keeps the best checkpoint.
- Zero signal: when TRL logs frac_reward_zero_std = 1 (every group's completions got the same
  reward, so every advantage is 0), a hint line is printed once (`zero_signal_hint`).
- Checkpoints: every save_steps (and at the end) under <run_dir>/checkpoints, each marked complete
  once on disk (grpo/checkpoints.py). `resume=<run dir>` restarts from that run's latest complete
  checkpoint: weights, optimizer, scheduler, RNG states and global step, with the same data order
  (the sampler is seeded by trainer.seed and transformers skips the batches already consumed).

Settings arrive checked (grpo/validation.py). torch, transformers and trl load inside the
functions that need them.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import OPTIMIZERS, VLLM_MODES, GenerationConfig, GrpoConfig, ModelConfig
from grpo.errors import UserError
from grpo.run.checkpoints import (
    CHECKPOINTS_DIR,
    BestCheckpoint,
    best_checkpoint,
    checkpoints_of,
    is_complete_checkpoint,
    resume_drift,
)
from grpo.run.distributed import any_rank, barrier, is_main, rank, world_size
from grpo.run.resume import checkpoint_in_chain
from grpo.train.monitors import LanguageScore, batch_monitors, compact

INITIAL_MODEL_DIR = "initial_model"


@dataclass
class TrainResult:
    """What a training stage leaves behind."""

    global_step: int
    # the last logged training metrics (TRL names: reward, rewards/<fn>/mean, kl, loss, ...)
    metrics: dict[str, float]
    # the latest complete checkpoint of this run (None when none was written)
    checkpoint_dir: Path | None
    # the trained policy (a peft model under LoRA) and its tokenizer, for the final evaluation
    model: Any = None
    tokenizer: Any = None
    run_dir: Path | None = None
    seconds: float = 0.0
    # every log TRL emitted (one dict per logging step)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    # trainer.eval_steps: global step -> validation reward (this run's validations)
    val_rewards: dict[int, float] = field(default_factory=dict)
    # trainer.keep_best: the checkpoint with the best validation reward (None without one)
    best: BestCheckpoint | None = None
    # trained under ZeRO-3 or FSDP: each process holds a shard of `model` (no in-process evaluation)
    sharded: bool = False


# ---- dataset and prompt -> row mapping ---------------------------------------------------------


def prompt_key(prompt: Any) -> str:
    """A canonical text key of a conversational prompt. Arrow fills keys missing from some
    messages with None, so None-valued keys are dropped to match the env's own rows."""
    if isinstance(prompt, list):
        prompt = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in prompt]
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


class PromptIndex:
    """Maps the prompts TRL hands to the rollout function back to environment rows.

    TRL passes only the prompts, so rows are found by their prompt. Rows sharing an identical
    prompt are interchangeable to the model; a group of such a prompt takes them in turn."""

    def __init__(self, rows: Sequence[Any]):
        self.rows: dict[str, list[Any]] = {}
        for row in rows:
            self.rows.setdefault(prompt_key(row.prompt), []).append(row)
        self._turn: dict[str, int] = {}

    @property
    def ambiguous(self) -> int:
        """Rows whose prompt is shared with another row."""
        return sum(len(v) for v in self.rows.values() if len(v) > 1)

    def row_for(self, prompt: Any) -> Any:
        key = prompt_key(prompt)
        candidates = self.rows.get(key)
        if not candidates:
            raise RuntimeError(
                "rollout_func received a prompt that is not one of the environment's train rows"
            )
        if len(candidates) == 1:
            return candidates[0]
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        return candidates[turn % len(candidates)]


def train_dataset(rows: Sequence[Any]) -> Any:
    """The dataset GRPOTrainer samples from: conversational prompts plus row id and language."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": list(row.prompt), "row_id": int(row.id), "language": str(row.language)} for row in rows]
    )


# ---- the rollout function ---------------------------------------------------------------------


class EnvRolloutFunc:
    """TRL `rollout_func`: the environment's episodes for a generation batch of prompts."""

    def __init__(
        self,
        env: Any,
        index: PromptIndex,
        tokenizer: Any,
        gen_cfg: GenerationConfig,
        model_cfg: ModelConfig,
        language_score: LanguageScore | None = None,
    ):
        self.env = env
        self.index = index
        self.tokenizer = tokenizer
        self.gen_cfg = gen_cfg
        self.model_cfg = model_cfg
        self.max_tokens_per_turn = gen_cfg.max_tokens_per_turn
        # the wrong-language monitor's scorer (non-English runs), see grpo/train_monitors.py
        self.language_score = language_score
        # filled after each call, for tests and debugging: the rollouts of the last batch and
        # their monitors
        self.last_rollouts: list[Any] = []
        self.last_monitors: dict[str, float] = {}

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        group = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        rows = self._rows(prompts, group)
        from grpo.generation import Sampling

        sampling = Sampling(
            temperature=float(trainer.temperature),
            top_p=float(trainer.top_p),
            max_tokens_per_turn=self.max_tokens_per_turn,
            seed=None,  # the global RNG, which transformers checkpoints and restores on resume
        )
        budget = int(trainer.max_completion_length)
        lockstep = self._lockstep(trainer)
        with self.policy_backend(trainer) as backend:
            if lockstep:
                backend.lockstep = True  # hf (vLLM generates for all ranks itself)
            rollouts = self._run(rows, group, backend, sampling, budget, any_rank if lockstep else None)
        self.last_rollouts = rollouts
        # a third-party env need not have has_answer (then: no format-failure monitor)
        has_answer = getattr(self.env, "has_answer", None)
        self.last_monitors = batch_monitors(rollouts, has_answer, self.language_score)
        # TRL's metric log (what it hands reward functions as `log_metric`): averaged over the
        # processes and logged with its own metrics at this step
        log_metric = getattr(trainer, "_log_metric", None)
        if log_metric is not None:
            for name, value in self.last_monitors.items():
                log_metric(name, value)
        return rollout_fields(rollouts)

    @contextlib.contextmanager
    def policy_backend(self, trainer: Any) -> Iterator[Any]:
        """A generation backend over the trainer's current policy: the hf backend on the unwrapped
        model, or TRL's vLLM engine with this step's weights (synced once per step, as TRL does
        before it calls rollout_func). Training rollouts and validation both generate through it."""
        if trainer.use_vllm:
            if trainer.state.global_step != trainer._last_loaded_step:
                trainer.vllm_generation.sync_weights()
                trainer._last_loaded_step = trainer.state.global_step
            yield self._vllm_backend(trainer)
            return
        from trl.models import unwrap_model_for_generation

        from grpo.generation import make_backend

        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as policy:
            yield make_backend(self.gen_cfg, policy, self.tokenizer, self.model_cfg)

    def _rows(self, prompts: list[Any], group: int) -> list[Any]:
        """One row per group of `group` consecutive identical prompts (TRL's RepeatSampler order;
        validate() keeps every per-device batch a whole number of groups)."""
        if len(prompts) % group:
            raise RuntimeError(
                f"rollout_func got {len(prompts)} prompts, not a multiple of the group size {group}"
            )
        rows = []
        for start in range(0, len(prompts), group):
            key = prompt_key(prompts[start])
            if any(prompt_key(p) != key for p in prompts[start + 1 : start + group]):
                raise RuntimeError(
                    "rollout_func got a group whose prompts differ: the batch is not group-aligned"
                )
            rows.append(self.index.row_for(prompts[start]))
        return rows

    def _run(
        self,
        rows: list[Any],
        group: int,
        backend: Any,
        sampling: Any,
        budget: int,
        any_rank_active: Callable[[bool], bool] | None = None,
    ) -> list[Any]:
        from grpo.rollout import run_rollouts

        return run_rollouts(
            self.env,
            rows,
            backend,
            rollouts_per_row=group,
            sampling=sampling,
            max_completion_tokens=budget,
            any_rank_active=any_rank_active,
        )

    def _lockstep(self, trainer: Any) -> bool:
        """Whether every rank must make the same generate() calls (generation.lockstep; null: when
        generate is a collective, i.e. sharded parameters not gathered for generation)."""
        if trainer.use_vllm or world_size() <= 1:
            return False
        if self.gen_cfg.lockstep is not None:
            return bool(self.gen_cfg.lockstep)
        if getattr(trainer, "is_fsdp_enabled", False):
            return True
        return _sharded(trainer) and not trainer.args.ds3_gather_for_generation

    def _vllm_backend(self, trainer: Any) -> Any:
        from grpo.generation.vllm import trainer_backend

        return trainer_backend(trainer.vllm_generation, self.tokenizer, self.model_cfg, trainer.eos_token_ids)


def rollout_fields(rollouts: Sequence[Any]) -> dict[str, list[Any]]:
    """What rollout_func returns to TRL, one entry per completion."""
    from grpo.rewards.rubric import COMPLETION_FIELD, INFO_FIELD, STATE_FIELD

    return {
        "prompt_ids": [list(r.prompt_ids) for r in rollouts],
        "completion_ids": [list(r.completion_ids) for r in rollouts],
        # NaN where a backend has no log-prob; TRL neutralises NaN in its importance ratios
        "logprobs": [[float(x) for x in r.logprobs] for r in rollouts],
        # 1 = model token, 0 = environment token: TRL masks the latter out of the loss
        "env_mask": [list(r.env_mask) for r in rollouts],
        COMPLETION_FIELD: [list(r.completion) for r in rollouts],
        STATE_FIELD: [r.state for r in rollouts],
        INFO_FIELD: [r.row.info for r in rollouts],
        "row_id": [r.row.id for r in rollouts],
        "language": [r.row.language for r in rollouts],
        "rollout_truncated": [bool(r.truncated) for r in rollouts],
    }


# ---- TRL config ---------------------------------------------------------------------------------


def grpo_config_kwargs(
    settings: GrpoConfig, output_dir: Path, reward_weights: Sequence[float]
) -> dict[str, Any]:
    """trl.GRPOConfig keyword arguments for a run's settings."""
    t, o, g = settings.trainer, settings.optimizer, settings.generation
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        # batch geometry (TRL counts the per-device batch in completions)
        "per_device_train_batch_size": int(t.per_device_batch_completions),
        "gradient_accumulation_steps": int(t.gradient_accumulation_steps),
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
        "dataloader_pin_memory": _has_cuda(),
    }
    if o.name == "sgd" and o.momentum:
        kwargs["optim_args"] = f"momentum={float(o.momentum)}"
    if g.backend in VLLM_MODES:
        from grpo.generation.vllm import server_base_url

        extra = g.extra
        kwargs.update(
            use_vllm=True,
            vllm_mode=VLLM_MODES[g.backend],
            vllm_gpu_memory_utilization=float(g.gpu_memory_utilization),
            vllm_server_base_url=server_base_url(g),
            vllm_server_host=str(g.host),
            vllm_server_port=int(g.port),
            vllm_server_timeout=float(g.timeout_s),
            vllm_max_model_length=extra.get("max_model_length"),
            vllm_tensor_parallel_size=int(extra.get("tensor_parallel_size", 1)),
        )
    kwargs.update(t.extra)
    return kwargs


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def make_grpo_config(settings: GrpoConfig, output_dir: Path, reward_weights: Sequence[float]) -> Any:
    """The trl.GRPOConfig of a run; TRL's own rejections become one-line UserErrors."""

    from trl import GRPOConfig

    from grpo.trl_support import build_trl_config

    kwargs = grpo_config_kwargs(settings, output_dir, reward_weights)
    return build_trl_config(GRPOConfig, kwargs, "trainer", "trainer.extra")


# ---- callbacks (transformers is imported only when training starts) -----------------------------


def _callbacks(printer_header: str) -> tuple[Any, Any]:
    from transformers import TrainerCallback

    from grpo.run.checkpoints import marker_callback

    class ProgressPrinter(TrainerCallback):
        """One line per logging step: step, reward, per-function rewards, KL, loss, monitors,
        speed, ETA; and the zero-signal hint, once."""

        def __init__(self) -> None:
            self.start = 0.0
            self.start_step = 0
            self.last: dict[str, float] = {}
            self.hinted = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start, self.start_step = time.perf_counter(), state.global_step
            if state.is_world_process_zero:
                resumed = f" (resumed at step {state.global_step})" if state.global_step else ""
                print(f"[train] {printer_header}{resumed}", flush=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or "reward" not in logs:
                return
            self.last = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
            if not state.is_world_process_zero:
                return
            done = state.global_step - self.start_step
            elapsed = time.perf_counter() - self.start
            per_step = elapsed / done if done else math.nan
            eta = per_step * (state.max_steps - state.global_step)
            parts = [f"step {state.global_step}/{state.max_steps}", f"reward {logs['reward']:.4f}"]
            parts += [
                f"{k[len('rewards/') : -len('/mean')]} {v:.4f}"
                for k, v in logs.items()
                if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, (int, float))
            ]
            for key, label in (("kl", "kl"), ("loss", "loss"), ("completions/mean_length", "len")):
                if isinstance(logs.get(key), (int, float)):
                    parts.append(f"{label} {logs[key]:.4g}")
            parts += compact(logs)
            if done:
                parts.append(f"{per_step:.2f} s/step, eta {_clock(eta)}")
            print("[train] " + " | ".join(parts), flush=True)
            zero_std = logs.get("frac_reward_zero_std")
            if not self.hinted and isinstance(zero_std, (int, float)) and zero_std >= 1.0:
                print(zero_signal_hint(state.global_step), flush=True)
                self.hinted = True

    return marker_callback(), ProgressPrinter()


def zero_signal_hint(step: int) -> str:
    """The one-line hint printed the first time every group of a step got one reward for all its
    completions (TRL's frac_reward_zero_std = 1): the advantages are all 0, nothing is learned."""
    return (
        f"hint: every group of step {step} got the same reward for all its completions, so GRPO has no "
        "signal (advantages are reward minus the group mean: all 0; typical of a random or untrained "
        "model that never produces a scorable answer); warm the model up first with "
        "stages=[sft,eval,train,eval] (supervised fine-tuning on the env's reference answers; the CPU "
        "recipe for alphabet_sort: +experiment=alphabet_sort_cpu), or use a stronger model / an easier env"
    )


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# ---- the stage ------------------------------------------------------------------------------------


def _ensure_loadable(model: Any, tokenizer: Any, model_cfg: ModelConfig, run_dir: Path) -> None:
    """TRL loads a second copy of the policy from `model.name_or_path` (the reference model when
    beta > 0 without LoRA; the colocated vLLM engine). A random-weight policy has no such path:
    save its initial weights under the run dir and point the config there."""
    name = str(getattr(model.config, "_name_or_path", "") or "")
    if name and (Path(name).is_dir() or model_cfg.source == "pretrained"):
        return
    out = run_dir / INITIAL_MODEL_DIR
    if is_main():  # one writer; every rank holds the same seeded initial weights
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    barrier()  # the process group exists once the trainer's arguments are made
    # the reference copy is loaded from config._name_or_path, the vLLM engine from name_or_path
    model.config._name_or_path = str(out)
    model.name_or_path = str(out)


def _needs_model_path(settings: GrpoConfig, peft_config: Any) -> bool:
    reference_copy = settings.trainer.beta > 0 and peft_config is None
    return reference_copy or settings.generation.backend == "vllm_colocate"


def _processes() -> str:
    """ ", on each of N processes" in a data-parallel run (the global batch is N times larger)."""
    return f" on each of {world_size()} processes" if world_size() > 1 else ""


def _header(settings: GrpoConfig, env: Any, resume_from: Path | None) -> str:
    t, o = settings.trainer, settings.optimizer
    prompts = t.per_device_batch_completions // t.num_generations
    text = (
        f"env {env.name} | model {settings.model.name} | {t.max_steps} steps x {t.gradient_accumulation_steps} "
        f"micro-batch(es) of {t.per_device_batch_completions} completions ({prompts} prompts x "
        f"{t.num_generations}){_processes()} | loss {t.loss_type}, beta {t.beta}, scale {t.scale_rewards} | "
        f"{o.name} lr {o.lr:g} | generation {settings.generation.backend}"
    )
    return text + (f" | from {resume_from}" if resume_from else "")


@dataclass
class TrainerBundle:
    """A GRPOTrainer ready to train, with what `train` needs around it."""

    trainer: Any
    rollout: EnvRolloutFunc
    printer: Any
    tokenizer: Any
    resume_from: Path | None
    output_dir: Path
    # trainer.eval_steps > 0: the ValidationCallback (grpo/train_validation.py)
    validation: Any = None


def build_trainer(
    settings: GrpoConfig,
    env: Any,
    run_dir: str | os.PathLike[str],
    *,
    model: Any = None,
    tokenizer: Any = None,
    callbacks: Sequence[Any] = (),
    reward_model_checkpoints: Sequence[str] | None = None,
    log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
) -> TrainerBundle:
    """Load the policy if not given, and build TRL's GRPOTrainer for `env` from checked settings.
    `log_metrics(metrics, step)`: where validation metrics go (the run's tracker)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # the resume chain's latest GRPO checkpoint; none when the resumed run stopped before training
    resume_from = checkpoint_in_chain(settings.resume, "train") if settings.resume else None
    if resume_from is not None:
        drift = resume_drift(settings, settings.resume)
        if drift:
            print(
                f"[train] warning: resuming with settings that differ from {settings.resume} (the data order and "
                f"batches will not continue exactly): {'; '.join(drift)}",
                file=sys.stderr,
            )
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's documented hook

    from grpo.models import load_policy, lora_config
    from grpo.rewards import all_reward_funcs, rubric_reward_funcs
    from grpo.rewards.consistency import language_monitor

    funcs = all_reward_funcs(settings, env, reward_model_checkpoints)
    reward_funcs, weights = rubric_reward_funcs(funcs)
    rows = env.rows("train")
    index = PromptIndex(rows)
    if index.ambiguous:
        print(
            f"[train] note: {index.ambiguous} train rows share their prompt with another row", file=sys.stderr
        )
    output_dir = run_dir / CHECKPOINTS_DIR
    args = make_grpo_config(settings, output_dir, weights)

    if model is None or tokenizer is None:
        model, tokenizer = load_policy(settings.model)
    peft_config = lora_config(settings.model.lora)
    if _needs_model_path(settings, peft_config):
        _ensure_loadable(model, tokenizer, settings.model, run_dir)

    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    marker, printer = _callbacks(_header(settings, env, resume_from))
    rollout = EnvRolloutFunc(
        env, index, tokenizer, settings.generation, settings.model, language_monitor(settings, env)
    )
    validation = None
    if settings.trainer.eval_steps:
        from grpo.rewards import extra_reward_funcs
        from grpo.train.heldout import ValidationCallback

        validation = ValidationCallback(
            settings,
            env,
            run_dir,
            rollout.policy_backend,
            extra_reward_funcs=extra_reward_funcs(settings, env),
            # a learned RM's score, as the evaluator reports it (already loaded for training)
            score_funcs=[f for f in funcs if getattr(f.fn, "trl_batched", False)],
            log_metrics=log_metrics,
        )
        callbacks = [*callbacks, validation]
    from grpo.fused_head import score_labelled_positions_on_cpu
    from grpo.run.interrupt import stop_callback

    score_labelled_positions_on_cpu()  # the log-prob head skips prompt positions on CPU too
    # TRL takes each generation batch's distinct prompts from whole chunks of the dataset and drops
    # a short last chunk: with fewer rows than one batch needs it would train 0 steps, silently
    needed = args.generation_batch_size // settings.trainer.num_generations
    if len(rows) < needed:
        raise UserError(
            f"env {env.name} has {len(rows)} train rows, fewer than the {needed} distinct prompts of one "
            f"generation batch (trainer.per_device_batch_completions / trainer.num_generations x "
            f"gradient_accumulation_steps{_processes()}): lower trainer.per_device_batch_completions or "
            "give the env more train rows"
        )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_dataset(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        rollout_func=rollout,
        # the stop callback last: its save request follows the step's other callbacks
        callbacks=[marker, printer, *callbacks, stop_callback("train")],
    )
    trainer.remove_callback(PrinterCallback)  # ProgressPrinter prints a compact line instead
    if validation is not None:
        validation.trainer = trainer
    return TrainerBundle(trainer, rollout, printer, tokenizer, resume_from, output_dir, validation)


def train(
    settings: GrpoConfig,
    env: Any,
    run_dir: str | os.PathLike[str],
    *,
    model: Any = None,
    tokenizer: Any = None,
    callbacks: Sequence[Any] = (),
    reward_model_checkpoints: Sequence[str] | None = None,
    log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
) -> TrainResult:
    """Train the policy on `env` with GRPO; checkpoints go to <run_dir>/checkpoints.

    `model`/`tokenizer`: an already loaded policy (e.g. from the baseline evaluation), else it is
    loaded from settings.model. `callbacks`: extra transformers TrainerCallbacks (tracking adds
    one). `reward_model_checkpoints`: the RM dirs a learned reward scores with (None:
    reward_model.checkpoints). `log_metrics(metrics, step)`: where validation metrics go (the
    run's tracker; trainer.eval_steps > 0). With settings.resume set, training continues from that
    run's latest complete checkpoint."""
    bundle = build_trainer(
        settings,
        env,
        run_dir,
        model=model,
        tokenizer=tokenizer,
        callbacks=callbacks,
        reward_model_checkpoints=reward_model_checkpoints,
        log_metrics=log_metrics,
    )
    trainer = bundle.trainer
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(bundle.resume_from) if bundle.resume_from else None)
    seconds = time.perf_counter() - start
    from grpo.run.interrupt import check_stopped

    check_stopped("train")  # a first Ctrl-C / SIGTERM: the checkpoint of this step is on disk

    if trainer.use_vllm:
        # the engine last synced before the final optimizer step: push the final weights so an
        # evaluation after training generates with the trained policy
        from grpo.generation.vllm import use_trainer_engine

        trainer.vllm_generation.sync_weights()
        use_trainer_engine(trainer.vllm_generation, trainer.eos_token_ids)
    latest = next((c for c in checkpoints_of(bundle.output_dir) if is_complete_checkpoint(c)), None)
    if world_size() > 1:
        # one line per process: data parallelism leaves every rank with the same weights
        print(
            f"[train] rank {rank()}/{world_size()}: weights checksum {weights_checksum(trainer.model)}",
            flush=True,
        )
    return TrainResult(
        global_step=int(trainer.state.global_step),
        metrics=dict(bundle.printer.last),
        checkpoint_dir=latest,
        model=trainer.model,
        tokenizer=bundle.tokenizer,
        run_dir=Path(run_dir),
        seconds=seconds,
        log_history=list(trainer.state.log_history),
        val_rewards=dict(bundle.validation.rewards) if bundle.validation is not None else {},
        best=best_checkpoint(bundle.output_dir) if settings.trainer.keep_best else None,
        sharded=_sharded(trainer),
    )


def _sharded(trainer: Any) -> bool:
    """ZeRO-3 or FSDP: each process holds only a shard of the parameters."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return bool(
        getattr(trainer, "is_deepspeed_enabled", False) and plugin is not None and plugin.zero_stage == 3
    )


def weights_checksum(model: Any) -> str:
    """A checksum of a model's parameters (sum and sum of squares in float64, in a fixed order):
    equal weights give equal text on every process."""
    import torch

    with torch.no_grad():
        params = [p.detach().double() for _, p in sorted(model.named_parameters())]
        total = sum(float(p.sum()) for p in params)
        squares = sum(float((p * p).sum()) for p in params)
    return f"{total:.17g}/{squares:.17g}"


def checkpoint_policy(result: TrainResult, checkpoint: Path, model_cfg: ModelConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of a checkpoint of `result`'s run, loaded from disk next to the trained
    policy (which stays as it is): a LoRA checkpoint (adapter weights only) goes into a copy of the
    trained peft model (the base weights never train, so the copy's are the checkpoint's); a full
    checkpoint loads as a pretrained dir with model.dtype, on the trained model's device. The
    tokenizer is the trained policy's."""
    model = result.model
    device = next(model.parameters()).device
    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        best = copy.deepcopy(model)
        set_peft_model_state_dict(best, load_file(str(Path(checkpoint) / "adapter_model.safetensors")))
        return best.eval(), result.tokenizer
    from grpo.models import load_policy

    cfg = dataclasses.replace(model_cfg, source="pretrained", path=str(checkpoint), tokenizer=None)
    best, _ = load_policy(cfg, device=device)
    return best, result.tokenizer
