"""The GRPO stage: TRL's GRPOTrainer for an environment, from checked settings.

    bundle = build_trainer(settings, env, run_dir, rewards=rewards, tracker=tracker, resume=plan)
    result = train(settings, env, run_dir, ...)     # the same, then trainer.train() and a TrainResult

How the pieces meet TRL (trl 1.16, read its grpo_trainer.py):
- Rollouts: grpo/train/rollout_func.py is TRL's `rollout_func` (the dataset, the prompt -> row
  index, the episodes and their fields).
- Rewards: the run's rewards (grpo.rewards.RunRewards, built once per run) become named TRL reward
  functions (grpo/rewards/reward_funcs.py) with their weights in `reward_weights`; TRL logs
  `rewards/<name>/mean` for each.
- Config: grpo/train/grpo_args.py; the batch geometry is checked against the train rows here (TRL
  would train 0 steps on fewer rows than one generation batch needs, silently).
- Reference model (beta > 0): under LoRA, TRL uses the adapter-disabled base (no second copy);
  without LoRA, TRL loads a copy from the policy's path, so random-weight policies are first saved
  to <run_dir>/initial_model.
- Held-out evaluation (trainer.eval_steps > 0): grpo/train/heldout.py evaluates the current policy
  on held-out rows every eval_steps steps and, with trainer.keep_best, keeps the best checkpoint.
- Tracking: TRL's metrics go to the run's tracker as train/<name> (its trainer callback), the
  held-out evaluations' as val/<name>.
- Progress: one compact line per logging step and the zero-signal hint (grpo/train/progress.py).
- Generation ahead of training (generation.num_batches_ahead > 0): grpo/train/ahead.py is the
  rollout function instead, generating on a generator apart from the trainer (started here, before
  the trainer is built, so that it loads meanwhile); a generator that fails mid-run stops the run
  with the checkpoint of its last complete step (GeneratorFailed, exit code 3).
- Checkpoints: every save_steps (and at the end) under <run_dir>/checkpoints, each marked complete
  once on disk (grpo/run/checkpoints.py). With a resume plan (grpo/run/resume.py) training restarts
  from the chain's latest complete checkpoint: weights, optimizer, scheduler, RNG states and global
  step, with the same data order (the sampler is seeded by trainer.seed and transformers skips the
  batches already consumed).

Settings arrive checked (grpo/cli/checks.py). torch, transformers and trl load inside the
functions that need them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.config import GrpoConfig, ModelConfig
from grpo.errors import GeneratorFailed, UserError
from grpo.generation.served import GeneratorError
from grpo.run.checkpoints import BestCheckpoint, best_checkpoint, latest_complete
from grpo.run.distributed import barrier, is_main, rank, world_size
from grpo.run.layout import RunLayout
from grpo.run.resume import ResumePlan
from grpo.tracking.base import NullTracker, Tracker
from grpo.train.geometry import step_geometry
from grpo.train.grpo_args import make_grpo_config
from grpo.train.progress import progress_printer
from grpo.train.rollout_func import EnvRolloutFunc, PromptIndex, train_dataset
from grpo.train.vllm_cpu import install_engine
from grpo.trl_adapter.devices import is_sharded
from grpo.trl_adapter.internals import save_checkpoint_now, sync_vllm_weights, uses_vllm_engine, vllm_engine
from grpo.trl_adapter.trainer import make_trainer, point_model_at, run_trainer

if TYPE_CHECKING:
    from grpo.rewards import RunRewards


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
    # the collapses the watch saw (grpo/train/collapse.py), each its printed line, in order
    collapses: list[str] = field(default_factory=list)


@dataclass
class TrainerBundle:
    """A GRPOTrainer ready to train, with what `train` needs around it."""

    trainer: Any
    rollout: EnvRolloutFunc
    printer: Any
    tokenizer: Any
    resume_from: Path | None
    output_dir: Path
    # trainer.eval_steps > 0: the held-out evaluation callback (grpo/train/heldout.py)
    validation: Any = None
    # generation.num_batches_ahead > 0: the rollout function that generates ahead (grpo/train/ahead.py)
    ahead: Any = None
    # the collapse watch (grpo/train/collapse.py)
    collapse: Any = None


def build_trainer(
    settings: GrpoConfig,
    env: Any,
    run_dir: str | os.PathLike[str],
    *,
    model: Any = None,
    tokenizer: Any = None,
    callbacks: Sequence[Any] = (),
    rewards: RunRewards | None = None,
    tracker: Tracker | None = None,
    resume: ResumePlan | None = None,
) -> TrainerBundle:
    """Load the policy if not given, and build TRL's GRPOTrainer for `env` from checked settings.

    `callbacks`: extra transformers TrainerCallbacks. `rewards`: the run's rewards (None: built
    here from settings, reward_model.checkpoints for a learned RM). `tracker`: where TRL's metrics
    and the held-out evaluations go (None: nowhere). `resume`: the run's resume plan (None: read
    here when settings.resume is set); training continues from its latest GRPO checkpoint."""
    from grpo.rewards.learned import kl_guard

    settings, note = kl_guard(settings)
    if note and is_main():
        print(note, file=sys.stderr, flush=True)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tracker = tracker or NullTracker()
    if resume is None and settings.resume:
        resume = ResumePlan.read(settings.resume)
    resume_from = _resume_from(resume)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's documented hook

    from grpo.models import load_policy, lora_config
    from grpo.rewards import build_rewards, rubric_reward_funcs

    if rewards is None:
        rewards = build_rewards(settings, env)
    reward_funcs, weights = rubric_reward_funcs(rewards.training(), settings.trainer.truncated_reward)
    rows = env.rows("train")
    index = PromptIndex(rows)
    if index.ambiguous:
        print(
            f"[train] note: {index.ambiguous} train rows share their prompt with another row", file=sys.stderr
        )
    output_dir = RunLayout(run_dir).checkpoints
    args = make_grpo_config(settings, output_dir, weights)
    _check_rows(env, rows, args.generation_batch_size // settings.trainer.num_generations, settings)

    if model is None or tokenizer is None:
        model, tokenizer = load_policy(settings.model)
    peft_config = lora_config(settings.model.lora)
    if _needs_model_path(settings, peft_config):
        _ensure_loadable(model, tokenizer, settings.model, run_dir)

    ahead = generator = None
    if settings.generation.num_batches_ahead:
        from grpo.train.ahead import AheadRollouts, start_generator

        generator = start_generator(settings, model, tokenizer, run_dir)

    from trl import GRPOTrainer

    printer = progress_printer(settings, env, resume_from, reward_funcs)
    rollout = EnvRolloutFunc(
        env, index, tokenizer, settings.generation, settings.model, rewards.language_score
    )
    if settings.generation.num_batches_ahead:
        ahead = AheadRollouts(rollout, rows, settings, generator)
    validation = None
    if settings.trainer.eval_steps:
        from grpo.train.heldout import HeldoutEvaluation

        # the evaluator's rewards; a learned RM's score as its score column
        validation = HeldoutEvaluation(
            settings,
            env,
            run_dir,
            rollout.policy_backend,
            extra_reward_funcs=rewards.extra,
            score_funcs=rewards.learned,
            log_metrics=tracker.log_metrics,
        )
    rounds = None
    if rewards.learned and settings.reward_model.rounds.every:
        from grpo.train.rounds import rounds_callback

        # the RM is brought back to the policy's samples (grpo/reward_model/rounds.py)
        rounds = rounds_callback(
            settings, env, rewards.learned, run_dir, rollout.policy_backend, tracker.log_metrics,
            resumed=resume.rounds if resume_from is not None else None,
        )  # fmt: skip
    from grpo.train.collapse import collapse_callback

    # the collapse watch runs under every setting (on_collapse=none: the line and the event only)
    collapse = collapse_callback(settings, run_dir, tracker.log_metrics, world_size())
    table = tracker.completions_callback()
    own_callbacks = [
        printer,
        tracker.trainer_callback(),
        *([table] if table is not None else []),
        *callbacks,
        *([rounds] if rounds else []),
        *([validation] if validation else []),
        collapse,
    ]
    try:
        trainer = make_trainer(
            GRPOTrainer,
            "train",
            own_callbacks,
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=ahead if ahead is not None else rollout,
        )
        install_engine(trainer, settings, str(model.name_or_path))
        if ahead is not None:
            ahead.attach(trainer, settings.generation.timeout_s)
    except BaseException:
        # a refused or failed start leaves no generator process behind
        if ahead is not None:
            ahead.close()
        elif generator is not None:
            generator.close()
        raise
    for needs_trainer in (validation, table, rounds, collapse):
        if needs_trainer is not None:
            needs_trainer.trainer = trainer
    return TrainerBundle(
        trainer, rollout, printer, tokenizer, resume_from, output_dir, validation, ahead, collapse
    )


def train(
    settings: GrpoConfig,
    env: Any,
    run_dir: str | os.PathLike[str],
    *,
    model: Any = None,
    tokenizer: Any = None,
    callbacks: Sequence[Any] = (),
    rewards: RunRewards | None = None,
    tracker: Tracker | None = None,
    resume: ResumePlan | None = None,
) -> TrainResult:
    """Train the policy on `env` with GRPO; checkpoints go to <run_dir>/checkpoints.

    `model`/`tokenizer`: an already loaded policy (e.g. from the baseline evaluation), else it is
    loaded from settings.model. The other arguments are `build_trainer`'s."""
    bundle = build_trainer(
        settings,
        env,
        run_dir,
        model=model,
        tokenizer=tokenizer,
        callbacks=callbacks,
        rewards=rewards,
        tracker=tracker,
        resume=resume,
    )
    trainer = bundle.trainer
    try:
        # a first Ctrl-C / SIGTERM: the checkpoint of this step is on disk, then Interrupted
        seconds = run_trainer(trainer, "train", bundle.resume_from)
        if bundle.ahead is not None:
            bundle.ahead.push_final()
    except (GeneratorFailed, GeneratorError) as ex:
        # the generator failed before this step's batch came (ahead, or a vLLM server's client in
        # a synchronous run): nothing of the step has run, and the state is the last complete
        # step's, which a resume continues from
        save_checkpoint_now(trainer)
        if isinstance(ex, GeneratorError):
            raise GeneratorFailed(f"[generation] {ex}", "train", int(trainer.state.global_step)) from None
        raise
    finally:
        if bundle.ahead is not None:
            bundle.ahead.close()

    if uses_vllm_engine(trainer) and bundle.ahead is None:
        # the engine last synced before the final optimizer step: push the final weights so an
        # evaluation after training generates with the trained policy
        from grpo.generation.vllm import use_trainer_engine

        sync_vllm_weights(trainer)
        use_trainer_engine(vllm_engine(trainer), trainer.eos_token_ids)
    if world_size() > 1:
        # one line per process: data parallelism leaves every rank with the same weights. One write
        # of the whole line: print() writes the text and its newline apart, and on an unbuffered
        # stdout shared by the ranks another rank's line could land between them
        line = f"[train] rank {rank()}/{world_size()}: weights checksum {weights_checksum(trainer.model)}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
    return TrainResult(
        global_step=int(trainer.state.global_step),
        metrics=dict(bundle.printer.last),
        checkpoint_dir=latest_complete(bundle.output_dir),
        model=trainer.model,
        tokenizer=bundle.tokenizer,
        run_dir=Path(run_dir),
        seconds=seconds,
        log_history=list(trainer.state.log_history),
        val_rewards=dict(bundle.validation.rewards) if bundle.validation is not None else {},
        best=best_checkpoint(bundle.output_dir) if settings.trainer.keep_best else None,
        sharded=is_sharded(trainer),
        collapses=[c.line for c in bundle.collapse.collapses] if bundle.collapse is not None else [],
    )


def _resume_from(resume: ResumePlan | None) -> Path | None:
    """The resume chain's latest GRPO checkpoint (None for a fresh run, or when the resumed run
    stopped before training); a warning line when resume_force changed the settings."""
    checkpoint = resume.checkpoints.get("train") if resume is not None else None
    if checkpoint is not None and resume.forced:
        print(
            f"[train] warning: resuming with settings that differ from {resume.source} (resume_force=true: "
            f"the data order and batches will not continue exactly): {'; '.join(resume.forced)}",
            file=sys.stderr,
        )
    return checkpoint


def _check_rows(env: Any, rows: Sequence[Any], needed: int, settings: GrpoConfig) -> None:
    """TRL takes each generation batch's `needed` distinct prompts from whole chunks of the dataset
    and drops a short last chunk: with fewer rows it would train 0 steps, silently."""
    if len(rows) < needed:
        geometry = step_geometry(settings.trainer)
        raise UserError(
            f"env {env.name} has {len(rows)} train rows, fewer than the {needed} distinct "
            f"prompts of one generation batch ({geometry.describe()}): lower trainer.completions_per_step "
            "or give the env more train rows"
        )


def _needs_model_path(settings: GrpoConfig, peft_config: Any) -> bool:
    reference_copy = settings.trainer.beta > 0 and peft_config is None
    return reference_copy or settings.generation.backend == "vllm_colocate"


def _ensure_loadable(model: Any, tokenizer: Any, model_cfg: ModelConfig, run_dir: Path) -> None:
    """TRL loads a second copy of the policy from its path (the reference model when beta > 0
    without LoRA; the colocated vLLM engine). A random-weight policy has no such path: save its
    initial weights under the run dir and point the model there."""
    name = str(getattr(model.config, "_name_or_path", "") or "")
    if name and (Path(name).is_dir() or model_cfg.source == "pretrained"):
        return
    out = RunLayout(run_dir).initial_model
    if is_main():  # one writer; every rank holds the same seeded initial weights
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    barrier()  # the process group exists once the trainer's arguments are made
    point_model_at(model, out)


def weights_checksum(model: Any) -> str:
    """A checksum of a model's parameters (sum and sum of squares in float64, in a fixed order):
    equal weights give equal text on every process. Sharded (FSDP2) parameters are gathered first,
    so every rank must call it."""
    import torch

    def full(param: Any) -> Any:
        # FSDP2 holds a DTensor shard per rank: the whole tensor (a collective, every rank calls it)
        return param.full_tensor() if hasattr(param, "full_tensor") else param

    with torch.no_grad():
        params = [full(p.detach()).double() for _, p in sorted(model.named_parameters())]
        total = sum(float(p.sum()) for p in params)
        squares = sum(float((p * p).sum()) for p in params)
    return f"{total:.17g}/{squares:.17g}"
