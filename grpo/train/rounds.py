"""Preference rounds inside GRPO training (reward_model.rounds; the rounds themselves are
grpo/reward_model/rounds.py).

`RoundsCallback` runs a round before the first optimizer step (from the policy GRPO starts with:
the SFT model in a warm-started run) and after every reward_model.rounds.every steps but the last,
with the trainer's current policy, under torch.random.fork_rng: training samples as it would
without the rounds. The RM is trained in place, so the next batch TRL scores is scored by the
updated RM. At the end, rounds.json sums up every round and the labels spent.

A resumed run (`resume=`) goes on from the rounds its checkpoint's step had seen: their pairs,
reports and the RM weights the last of them left (PreferenceRounds.resume, said in one line); the
round due at that step runs at once when the resumed run had not finished it.

One process only: under several processes every rank would need the same updated RM at the same
step; rounds are then skipped, said in one line.

Imports transformers: grpo/train/trainer.py imports this module when rounds are on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo.config import GrpoConfig
from grpo.reward_model.labelers import make_labeler
from grpo.reward_model.rounds import PreferenceRounds, counted
from grpo.run.distributed import world_size
from grpo.run.interrupt import inside_step


class RoundsCallback(TrainerCallback):
    """See the module docstring. Attach the trainer (`callback.trainer = trainer`) before training."""

    def __init__(
        self,
        settings: GrpoConfig,
        env: Any,
        learned: Any,
        run_dir: Path,
        policy_backend: Callable[[Any], AbstractContextManager[Any]],
        log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
        resumed: Mapping[int, Path] | None = None,
    ) -> None:
        labeler = make_labeler(settings, env)
        # a resumed run's finished rounds along its chain (ResumePlan.rounds); None: a fresh run
        self.resumed = resumed
        self.rounds = PreferenceRounds(settings, env, learned, run_dir, labeler, log_metrics)
        self.every = int(settings.reward_model.rounds.every)
        self.policy_backend = policy_backend
        self.trainer: Any = None
        print(
            f"[reward_model] preference rounds: before GRPO and every {self.every} steps, up to "
            f"{settings.reward_model.rounds.label_budget} labels each; {labeler.description}",
            flush=True,
        )

    def _round(self, step: int) -> None:
        import torch

        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        model = self.trainer.model
        was_training = model.training
        with (
            inside_step("preference round", "train", step),
            torch.random.fork_rng(devices=devices),
            self.policy_backend(self.trainer) as backend,
        ):
            report = self.rounds.run(step, backend)
        model.train(was_training)
        print(report.line(), flush=True)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 0:
            self._round(0)
            return
        line, due = self.rounds.resume(state.global_step, self.resumed or {})
        print(line, flush=True)
        if due:
            self._round(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every == 0 and state.global_step < state.max_steps:
            self._round(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.rounds.reports:
            path = self.rounds.write_summary()
            print(
                f"[reward_model] {counted(len(self.rounds.reports), 'preference round')}, "
                f"{counted(self.rounds.labels_used(), 'label')}; "
                f"{path}",
                flush=True,
            )


def rounds_callback(
    settings: GrpoConfig,
    env: Any,
    learned: list[Any],
    run_dir: Path,
    policy_backend: Callable[[Any], AbstractContextManager[Any]],
    log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
    resumed: Mapping[int, Path] | None = None,
) -> RoundsCallback | None:
    """The rounds of a run whose reward holds a learned RM, or None (no RM, rounds off, or
    several processes: said in one line). `resumed`: a resumed run's finished rounds."""
    rm = settings.reward_model
    if rm.kind == "rubric" or not learned or not rm.rounds.every:
        return None
    if world_size() > 1:
        print(
            "[reward_model] note: preference rounds run in one process only; skipped under "
            f"{world_size()} processes (reward_model.rounds.every=0 says it)",
            file=sys.stderr,
        )
        return None
    source = learned[-1].fn.source  # the combined reward: its LearnedReward holds every member
    return RoundsCallback(settings, env, source, run_dir, policy_backend, log_metrics, resumed)
