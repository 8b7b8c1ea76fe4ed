"""Held-out evaluation during GRPO training (validation), and the best checkpoint kept
(trainer.eval_steps, trainer.keep_best).

Every trainer.eval_steps optimizer steps, `HeldoutEvaluation` runs the evaluator
(grpo.evaluation.evaluator.evaluate_rows: the rollouts, scoring and statistics of the final evaluation) with the
trainer's current policy on a fixed held-out subset: the LAST trainer.val_num_examples rows of the
env's eval split, each rolled out trainer.val_rollouts_per_example times, sampled as eval.* says
(temperature, top_p, seed). The final evaluation takes the FIRST eval.num_examples rows, so the two
share no row when the split holds both (grpo/train/checks.py checks it when the env config gives
num_eval_examples). Validation runs in on_step_end, after optimizer step N and before that step's
log and checkpoint, inside torch.random.fork_rng: training samples exactly as it would without it.

Per validation:
- metrics at step N through `log_metrics` (the run's tracker): val/reward, val/reward_std,
  val/func/<fn>, val/truncated, val/lang/<code>/mean|std|count|truncated, val/pass_at_<k>,
  val/score/<name>/... (a learned RM's unclipped score), val/seconds;
- results.jsonl and metadata.json under <run_dir>/val/step_<N>/, as the evaluator writes them (what
  the policy wrote at step N, for a later look);
- one printed line: `[val] step N | reward X | <fn> X ... | <lang> X ...`, and a warning line when
  the share of truncated rollouts climbs (grpo/train/monitors.py, TruncationWatch).

keep_best: a validation reward above every earlier one (ties keep the earlier) is recorded in
transformers' own best-model state (state.best_metric, state.best_global_step) and a checkpoint of
that step is requested (control.should_save): transformers then points state.best_model_checkpoint
at it, and its checkpoint rotation (save_total_limit) never deletes that checkpoint. The callback
also writes <run_dir>/checkpoints/grpo_best.json (grpo.run.checkpoints.best_checkpoint reads it). One
transformers rule is opted out of: at the end of training with save_total_limit=1 it deletes every
checkpoint but the best, which would lose the last one that resume needs; after the final save the
in-memory best_model_checkpoint is cleared (the saved trainer_state.json keeps it). A resumed run
goes on from the best_metric its checkpoint recorded.

Processes: every process runs the same validation (same rows, same seed: generation may be a
collective under ZeRO-3); the main process alone writes, logs and prints, and its reward decides
the best checkpoint for all of them.

Imports transformers and torch: grpo/train/trainer.py imports this module when it builds a trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo.config import GrpoConfig
from grpo.envs.base import Environment, Row
from grpo.envs.rubric import RewardFunc
from grpo.evaluation.setup import EvalSetup
from grpo.run.checkpoints import CHECKPOINT_PREFIX, write_best_marker
from grpo.run.layout import RunLayout
from grpo.train.monitors import HackingWatch, TruncationWatch

log = logging.getLogger(__name__)

# the tracker metrics of a held-out evaluation: val/reward, val/func/<fn>, ...
VAL_PREFIX = "val/"


def heldout_rows(env: Environment, n: int) -> list[Row]:
    """The last `n` rows of the env's eval split (all of them when it has no more)."""
    rows = env.rows("eval")
    return rows[len(rows) - n :] if 0 < n < len(rows) else rows


def heldout_metrics(result: Any) -> dict[str, float]:
    """An EvalResult as val/ metrics: val/reward and val/reward_std (the total's mean and std),
    then the evaluator's own names (func/<fn>, lang/<code>/mean, pass_at_<k>, score/..., seconds)."""
    metrics = result.to_metrics()
    metrics["seconds"] = result.seconds  # per validation: a curve, unlike an evaluation's constant
    metrics["reward"], metrics["reward_std"] = metrics.pop("mean"), metrics.pop("std")
    return {f"{VAL_PREFIX}{name}": value for name, value in metrics.items()}


def heldout_line(step: int, result: Any, best: bool = False) -> str:
    """`[val] step N | reward X | <fn> X ... | <lang> X ...` (languages when there are several)."""
    parts = [f"step {step}", f"reward {result.mean:.4f}"]
    parts += [f"{name} {value:.4f}" for name, value in result.per_function.items()]
    parts += [f"{name} {stats['mean']:.4f}" for name, stats in result.scores.items()]
    if len(result.per_language) > 1:
        parts += [f"{code} {stats['mean']:.4f}" for code, stats in result.per_language.items()]
    if best:
        parts.append("best so far")
    return "[val] " + " | ".join(parts)


class HeldoutEvaluation(TrainerCallback):
    """Validates every trainer.eval_steps steps and, with trainer.keep_best, keeps the best
    checkpoint (see the module docstring). Attach the trainer (`callback.trainer = trainer`) before
    training: `policy_backend(trainer)` is a context manager yielding a generation backend over the
    trainer's current policy."""

    def __init__(
        self,
        settings: GrpoConfig,
        env: Environment,
        run_dir: Path,
        policy_backend: Callable[[Any], AbstractContextManager[Any]],
        *,
        extra_reward_funcs: Sequence[RewardFunc] = (),
        score_funcs: Sequence[RewardFunc] = (),
        log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
    ) -> None:
        t = settings.trainer
        self.setup = EvalSetup.of(settings)
        self.env = env
        self.every = int(t.eval_steps)
        self.keep_best = bool(t.keep_best)
        self.rollouts_per_example = int(t.val_rollouts_per_example)
        self.rows = heldout_rows(env, int(t.val_num_examples))
        self.run_dir = Path(run_dir)
        self.policy_backend = policy_backend
        self.extra_reward_funcs = list(extra_reward_funcs)
        self.score_funcs = list(score_funcs)
        self.log_metrics = log_metrics
        self.trainer: Any = None
        # global step -> validation reward, for the validations of this process
        self.rewards: dict[int, float] = {}
        self._warned = False
        self.truncation = TruncationWatch("[val]", settings)
        self.hacking = HackingWatch("[val]", keep_best=self.keep_best)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # a resumed run whose best checkpoint is in the run it resumed: record it here too
        best = state.best_model_checkpoint
        if self.keep_best and state.best_global_step and best and state.is_world_process_zero:
            if Path(best).is_dir() and state.best_metric is not None:
                write_best_marker(
                    Path(args.output_dir), Path(best), state.best_global_step, state.best_metric
                )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every:
            return
        result, reward = self.validate(state.global_step, state.is_world_process_zero)
        better = self.keep_best and (state.best_metric is None or reward > state.best_metric)
        if better:
            state.best_metric = reward
            state.best_global_step = state.global_step
            control.should_save = True
        if state.is_world_process_zero:
            print(heldout_line(state.global_step, result, better), flush=True)
            shares = {"all": result.truncated}
            if len(result.per_language) > 1:
                shares.update({code: s["truncated"] for code, s in result.per_language.items()})
            warning = self.truncation.update(shares, state.global_step)
            if warning:
                print(warning, flush=True)
            hacking = self.watch_hacking(state.global_step, result)
            if hacking:
                print(hacking, flush=True)

    def watch_hacking(self, step: int, result: Any) -> str | None:
        """A learned RM's score against the gold reward (the evaluation's: the env's rubric), per
        language, into the HackingWatch; its warning line, if any."""
        from grpo.rewards.learned import MEMBER_PREFIX, REWARD_NAME

        rm = result.scores.get(REWARD_NAME)
        if not rm:
            return None
        per_language = {code: float(v) for code, v in (rm.get("per_language") or {}).items()}
        gold = {code: float(stats["mean"]) for code, stats in result.per_language.items()}
        # the gold mean's standard error over the held-out examples (their rollouts are not independent)
        gold_se = {
            code: float(stats["std"]) / max(int(stats["examples"]), 1) ** 0.5
            for code, stats in result.per_language.items()
        }
        members = [v for k, v in result.scores.items() if k.startswith(MEMBER_PREFIX)]
        disagreement = None
        if len(members) > 1:
            import statistics

            disagreement = {
                code: statistics.pstdev(float(m["per_language"][code]) for m in members)
                for code in per_language
                if all(code in (m.get("per_language") or {}) for m in members)
            }
        return self.hacking.update(step, per_language, gold, disagreement, gold_se)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.keep_best or not state.best_global_step:
            return
        if state.best_global_step == state.global_step and state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            write_best_marker(Path(args.output_dir), checkpoint, state.global_step, state.best_metric)
        if state.global_step >= state.max_steps:
            # rotation has protected the best; transformers' end-of-training rule for
            # save_total_limit=1 would now delete the last checkpoint (see the module docstring)
            state.best_model_checkpoint = None

    def validate(self, step: int, main_process: bool = True) -> tuple[Any, float]:
        """Evaluate the current policy on the validation rows: (EvalResult, the reward every
        process agrees on). The main process writes the files and logs the metrics."""
        import torch

        from grpo.evaluation.evaluator import evaluate_rows

        out_dir = RunLayout(self.run_dir).val(step) if main_process else None
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices), self.policy_backend(self.trainer) as backend:
            result = evaluate_rows(
                self.setup,
                self.env,
                self.rows,
                self.rollouts_per_example,
                backend,
                out_dir,
                label=f"val_step_{step}",
                extra_reward_funcs=self.extra_reward_funcs,
                score_funcs=self.score_funcs,
                step=step,
            )
        reward = self._agreed(float(result.mean))
        self.rewards[step] = reward
        if main_process and self.log_metrics is not None:
            try:
                self.log_metrics(heldout_metrics(result), step)
            except Exception as ex:  # noqa: BLE001 - tracking must not kill a training run
                if not self._warned:
                    log.warning("validation metrics could not be logged at step %s: %s", step, ex)
                    self._warned = True
        return result, reward

    def _agreed(self, value: float) -> float:
        """The main process's value, on every process (keep-best decides the same everywhere)."""
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is None or accelerator.num_processes == 1:
            return value
        from accelerate.utils import broadcast_object_list

        return float(broadcast_object_list([value])[0])
