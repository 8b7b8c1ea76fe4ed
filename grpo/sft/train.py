"""The `sft` stage: TRL's SFTTrainer on demonstrations, the loss on the assistant's tokens only.

    demonstrations (grpo/sft/data.py: every data error surfaces here, before any model loads)
      -> the policy (the run's, or loaded from settings.model)
      -> each demonstration replayed through the rollout engine (grpo/sft/replay.py): input ids
         in GRPO's exact token layout + the assistant mask
      -> SFTTrainer: every weight, or (sft.lora=true) a LoRA adapter shaped by model.lora
      -> the adapter merged into the weights -> saved to <run_dir>/sft

How it meets TRL (trl 1.16 sft_trainer.py): the dataset is pre-tokenised (`input_ids`) with an
`assistant_masks` column; SFTTrainer's dataset preparation sets the label of every token whose
mask bit is 0 to -100 (that column applies whatever assistant_only_loss says), so the loss and
`mean_token_accuracy` count the model's own tokens only. Sequences are cut to sft.max_length
before TRL sees them. sft.padding_free (default) sets TRL's padding_free: a micro-batch is its
conversations back to back in one row with position ids restarting at each, trained under an
attention that keeps them apart (grpo/models/packed_attention.py); the losses are the padded
batch's, without the padding tokens' work.

Saving: the model, the tokenizer (chat template included) and sft_meta.json, written last, go to
<run_dir>/sft.partial; every file is fsynced and the dir is renamed to <run_dir>/sft. A dir named
sft is always complete; an error before the rename removes the partial dir. Ctrl-C / SIGTERM
stop at a step boundary with a trainer checkpoint in <run_dir>/sft_checkpoints (grpo/run/interrupt.py);
`resume=<run_dir>` continues the SFT from it (grpo/run/resume.py). The trained
model's config then names <run_dir>/sft, so GRPO's reference model (beta > 0 without LoRA) and a
colocated vLLM engine load the SFT weights, and a later run loads them with
`model.source=pretrained model.path=<run_dir>/sft`.

Tracker: every TRL training metric as sft/<name> (sft/loss, sft/mean_token_accuracy, sft/entropy,
sft/grad_norm, sft/learning_rate, ...) at every logging step, step = the SFT step; the summary
as sft/summary/<name>; sft_meta.json as an artifact. One compact line printed per logging step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.envs.base import Environment
from grpo.errors import UserError
from grpo.files import replace_dir, write_json_atomic
from grpo.run.distributed import print_main
from grpo.run.eta import speed_and_eta
from grpo.run.layout import SFT_META_FILE, RunLayout
from grpo.sft import METRIC_PREFIX
from grpo.sft.data import Demonstration, demonstration_env, load_demonstrations
from grpo.sft.replay import Example, build_examples
from grpo.tracking.base import NullTracker, Tracker, best_effort
from grpo.trl_adapter.config import build_trl_config
from grpo.trl_adapter.devices import has_cuda
from grpo.trl_adapter.logs import quiet_progress_bars
from grpo.trl_adapter.trainer import make_trainer, point_model_at, run_trainer

# SFTConfig fields the stage decides (sft.extra may not override them)
_FIXED_ARGS = (
    "output_dir",
    "report_to",
    "save_strategy",
    "eval_strategy",
    "max_length",
    "assistant_only_loss",
    "completion_only_loss",
    "padding_free",
)
PARTIAL_SUFFIX = ".partial"


@dataclass
class SftResult:
    """What the sft stage leaves behind."""

    # the saved model dir (<run_dir>/sft)
    path: Path
    # the trained policy (LoRA merged: a plain model) and its tokenizer, for the later stages
    model: Any
    tokenizer: Any
    global_step: int
    # the last logged value of every TRL metric: loss, mean_token_accuracy, ..., train_loss
    metrics: dict[str, float]
    num_examples: int
    seconds: float
    log_history: list[dict[str, Any]] = field(default_factory=list, repr=False)


def sft_config(settings: GrpoConfig, output_dir: Path) -> Any:
    """trl.SFTConfig of the stage; TRL's own rejections become one-line UserErrors."""
    from trl import SFTConfig

    f = settings.sft
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": f.batch_size,
        "gradient_accumulation_steps": f.gradient_accumulation_steps,
        "learning_rate": f.lr,
        "num_train_epochs": f.epochs,
        "max_steps": f.max_steps,
        "weight_decay": f.weight_decay,
        "warmup_steps": f.warmup,
        "lr_scheduler_type": f.lr_scheduler,
        "max_grad_norm": f.max_grad_norm,
        "logging_steps": f.logging_steps,
        "bf16": f.bf16,  # TRL's default is bf16 unless fp16: the setting decides
        "seed": f.seed,
        "report_to": "none",  # the tracker gets metrics through our callback
        "save_strategy": "no",  # the stage saves the final model itself
        "eval_strategy": "no",
        # the examples are cut to sft.max_length already; packing (sft.extra) needs the number,
        # padding-free batches without packing must not have it (TRL rejects the pair)
        "max_length": None if f.padding_free and not f.extra.get("packing") else f.max_length,
        "padding_free": f.padding_free,
        # the loss mask is the dataset's assistant_masks column (GRPO's layout), not a template's
        "assistant_only_loss": False,
        "completion_only_loss": False,
        # TRL turns gradient checkpointing on by default (transformers 5 name: activation_checkpointing)
        "activation_checkpointing": False,
        "disable_tqdm": True,  # one compact line per log instead
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": has_cuda(),
    }
    fixed = sorted(k for k in f.extra if k in _FIXED_ARGS)
    if fixed:
        raise UserError(f"sft.extra: {', '.join(fixed)} is set by the stage; remove it")
    kwargs.update(f.extra)
    return build_trl_config(SFTConfig, kwargs, "sft", "sft.extra")


def sft_dataset(examples: Sequence[Example]) -> Any:
    """The pre-tokenised dataset SFTTrainer takes: input_ids and the assistant mask."""
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "input_ids": [e.input_ids for e in examples],
            "assistant_masks": [e.assistant_mask for e in examples],
        }
    )


def _progress() -> Any:
    """A TrainerCallback printing one line per logging step: step, loss, token accuracy, speed."""
    from transformers import TrainerCallback

    class SftProgress(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start, self.start_step = time.perf_counter(), state.global_step

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or "loss" not in logs or not state.is_world_process_zero:
                return
            parts = [f"step {state.global_step}/{state.max_steps}", f"loss {logs['loss']:.4f}"]
            if isinstance(logs.get("mean_token_accuracy"), (int, float)):
                parts.append(f"token accuracy {logs['mean_token_accuracy']:.3f}")
            done = state.global_step - self.start_step
            if done:
                parts.append(
                    speed_and_eta(time.perf_counter() - self.start, done, state.global_step, state.max_steps)
                )
            print("[sft] " + " | ".join(parts), flush=True)

    return SftProgress()


def build_sft_trainer(
    settings: GrpoConfig,
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    output_dir: Path,
    tracker: Tracker | None = None,
    callbacks: Sequence[Any] = (),
) -> Any:
    """TRL's SFTTrainer on `examples` (its train_dataset holds the labels it trains on); its
    metrics go to `tracker` as sft/<name>. `callbacks`: extra transformers TrainerCallbacks."""
    from trl import SFTTrainer

    tracker = tracker or NullTracker()
    peft_config = None
    if settings.sft.lora:
        from grpo.models import lora_config

        peft_config = lora_config(dataclasses.replace(settings.model.lora, enabled=True))
    return make_trainer(
        SFTTrainer,
        "sft",
        [_progress(), tracker.trainer_callback(METRIC_PREFIX), *callbacks],
        model=model,
        args=sft_config(settings, output_dir),
        train_dataset=sft_dataset(examples),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def prepare_examples(
    settings: GrpoConfig, env: Environment, demos: Sequence[Demonstration], model: Any, tokenizer: Any
) -> list[Example]:
    """The demonstrations replayed with the policy's tokenizer and stop tokens (grpo/sft/replay.py)."""
    from grpo.generation.hf import HFBackend

    # the hf backend renders, encodes and stops exactly as GRPO's rollouts do; it generates nothing here
    tokens = HFBackend(model, tokenizer, chat_template_kwargs=settings.model.chat_template_kwargs)
    return build_examples(demos, env, tokens, settings.sft.max_length)


def train_sft(
    settings: GrpoConfig,
    env: Environment,
    out_dir: str | os.PathLike[str],
    *,
    model: Any = None,
    tokenizer: Any = None,
    tracker: Tracker | None = None,
    resume_from: Path | None = None,
    callbacks: Sequence[Any] = (),
) -> SftResult:
    """Fine-tune the policy on the stage's demonstrations and save it to `out_dir` (see the module
    docstring). `model` / `tokenizer`: the run's policy if already loaded, else settings.model's.
    `tracker`: where its metrics and sft_meta.json go. `resume_from`: an SFT checkpoint of an
    interrupted run to continue from. `callbacks`: extra transformers TrainerCallbacks (e.g. a
    step timer). The trainer's checkpoints go to the run folder (the parent of `out_dir`),
    sft_checkpoints/."""
    start = time.perf_counter()
    tracker = tracker or NullTracker()
    differs = None
    if not settings.sft.data_path:
        env, differs = demonstration_env(settings, env)  # the demonstrator: the run's env unless set
    demos = load_demonstrations(settings, env)  # every data error surfaces here, before any model
    if model is None or tokenizer is None:
        from grpo.models import load_policy

        model, tokenizer = load_policy(settings.model)
    examples = prepare_examples(settings, env, demos, model, tokenizer)
    out = Path(out_dir).resolve()
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    print_main(f"[sft] {_header(settings, env, examples, demos)}", flush=True)  # rank 0 only
    if differs:
        print_main(
            f"[sft] the demonstrations come from another configuration than the rubric's ({differs}): SFT "
            "imitates that demonstrator, while GRPO and every evaluation score with the run's env",
            flush=True,
        )
    try:
        with quiet_progress_bars():
            checkpoints = RunLayout(out.parent).stage_checkpoints("sft")
            with _attention_for(settings, model):
                trainer = build_sft_trainer(
                    settings, model, tokenizer, examples, checkpoints, tracker, callbacks
                )
                run_trainer(trainer, "sft", resume_from)
        model = trainer.model
        if settings.sft.lora:
            model = model.merge_and_unload()  # a plain model: what model.path loads and GRPO wraps
        model.eval()
        step = int(trainer.state.global_step)
        history = list(trainer.state.log_history)
        metrics = _last_metrics(history)
        seconds = time.perf_counter() - start
        meta = {
            "global_step": step,
            "num_examples": len(examples),
            "data": settings.sft.data_path or _source(settings, env),
            "demonstrator": differs,
            "base_model": settings.model.path or settings.model.name,
            "lora": settings.sft.lora,
            "max_length": settings.sft.max_length,
            "metrics": metrics,
            "seconds": seconds,
        }
        main = trainer.is_world_process_zero()
        if main:  # one writer; the other ranks hold the same weights in memory
            with quiet_progress_bars():
                save_sft_model(model, tokenizer, meta, out)
        trainer.accelerator.wait_for_everyone()  # every rank may load <run_dir>/sft next (reference model)
        with contextlib.suppress(OSError):
            checkpoints.rmdir()  # only an interrupted SFT leaves a checkpoint there
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # nothing half-written is left behind
        raise
    point_model_at(model, out)  # GRPO's reference copy and a colocated vLLM engine: the SFT weights
    if main:
        with best_effort("sft", "sft_meta.json"):
            tracker.log_artifact(out / SFT_META_FILE, "sft")  # the small file; not the weights
            tracker.log_tags({"grpo.sft.path": str(out)})
        # fewer steps than sft.logging_steps log no step loss: the trainer's mean over the run then
        label, loss = (
            ("loss", metrics["loss"])
            if "loss" in metrics
            else ("mean loss", metrics.get("train_loss", math.nan))
        )
        accuracy = metrics.get("mean_token_accuracy", math.nan)
        print_main(
            f"[sft] {step} steps in {seconds:.1f} s | {label} {loss:.4f} | token accuracy {accuracy:.3f} | "
            f"saved to {out}",
            flush=True,
        )
    return SftResult(out, model, tokenizer, step, metrics, len(examples), seconds, history)


def _attention_for(settings: GrpoConfig, model: Any) -> contextlib.AbstractContextManager[None]:
    """Padding-free batches need an attention that keeps the packed conversations apart:
    FlashAttention's varlen kernels do it natively, any other implementation is swapped for
    grpo/models/packed_attention.py while the stage trains (TRL's bfd packing is padding-free too)."""
    packed = settings.sft.padding_free or (
        settings.sft.extra.get("packing") and settings.sft.extra.get("packing_strategy", "bfd") != "wrapped"
    )
    if not packed or str(model.config._attn_implementation).startswith("flash_attention"):
        return contextlib.nullcontext()
    from grpo.models.packed_attention import packed_attention

    return packed_attention(model)


def _header(
    settings: GrpoConfig, env: Environment, examples: Sequence[Example], demos: Sequence[Demonstration]
) -> str:
    f = settings.sft
    tokens = sum(len(e.input_ids) for e in examples)
    trained = sum(sum(e.assistant_mask) for e in examples)
    source = f.data_path or f"env {env.name} reference episodes"
    if not f.data_path and f.num_examples_per_language is not None:
        counts = Counter(d.language for d in demos)
        source += ": " + ", ".join(f"{code} {n}" for code, n in sorted(counts.items()))
    length = f"{f.max_steps} steps" if f.max_steps > 0 else f"{f.epochs:g} epoch(s)"
    return (
        f"{len(examples)} demonstrations ({source}) | {tokens} tokens, {trained} of them trained | {length} "
        f"of {f.batch_size} x {f.gradient_accumulation_steps} conversations"
        f"{' (padding-free)' if f.padding_free else ''} | lr {f.lr:g} | "
        f"{'LoRA (merged)' if f.lora else 'full'} | model {settings.model.name}"
    )


def _source(settings: GrpoConfig, env: Environment) -> str:
    """Where synthesised demonstrations came from (sft_meta.json's `data`)."""
    f = settings.sft
    if f.num_examples_per_language is not None:
        return f"env {env.name}: the first train rows of each language, {f.num_examples_per_language} per language"
    return f"env {env.name}: its first {f.num_examples} train rows"


def _last_metrics(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The last logged value of every numeric metric."""
    out: dict[str, float] = {}
    for logs in history:
        out.update(
            {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        )
    return out


def save_sft_model(model: Any, tokenizer: Any, meta: dict[str, Any], out: Path) -> Path:
    """Write the model dir next to `out` as <out>.partial (weights, config, tokenizer with its chat
    template, then SFT_META_FILE last, every file fsynced) and rename it to `out`, replacing an
    older one: a dir named `out` is never half-written."""
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    shutil.rmtree(partial, ignore_errors=True)  # the trainer's empty output dir, or a crashed save
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    files = sorted(str(p.relative_to(partial)) for p in partial.rglob("*") if p.is_file())
    write_json_atomic(partial / SFT_META_FILE, {**meta, "files": files})
    return replace_dir(partial, out)
