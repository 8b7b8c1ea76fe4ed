"""A transformers TrainerCallback that sends every training log line to the tracker at step=global_step.

TRL's GRPOTrainer logs, per logging step: reward, reward_std, rewards/<fn>/mean|std, kl, entropy,
loss, grad_norm, learning_rate, completions/mean_length ..., clip_ratio/... They land under the
stage's prefix: `train/` for GRPO (`train/reward`, `train/rewards/<fn>/mean`), apart from the
`eval/` metrics of the evaluator; `sft/` for the SFT warm start; `rm/train/` for the reward model.
The end-of-training summary (train_runtime, train_loss, ...) goes to `<prefix>summary/<name>`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

log = logging.getLogger(__name__)

_SUMMARY_PREFIX = "train_"


def train_metrics(logs: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The numeric entries of a Trainer log line, renamed under `prefix` (None / text skipped)."""
    metrics: dict[str, float] = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, Real):
            if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a 0-d tensor / numpy scalar
                value = value.item()
            else:
                continue
        name = f"summary/{key[len(_SUMMARY_PREFIX) :]}" if key.startswith(_SUMMARY_PREFIX) else key
        metrics[f"{prefix}{name}"] = float(value)
    return metrics


class MetricsCallback(TrainerCallback):
    """Forwards `on_log` to `log_metrics(metrics, step)`, names under `prefix`. A store that stays
    unreachable after the tracker's retries costs metrics (with a warning), never the training run."""

    def __init__(self, log_metrics: Callable[[Mapping[str, float], int], None], prefix: str) -> None:
        self._log_metrics = log_metrics
        self.prefix = prefix
        self._warned = False

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        metrics = train_metrics(logs, self.prefix)
        if not metrics:
            return
        try:
            self._log_metrics(metrics, int(state.global_step))
        except Exception as ex:  # noqa: BLE001 - tracking must not kill a training run
            if not self._warned:
                log.warning("MLflow logging failed at step %s, training continues: %s", state.global_step, ex)
                self._warned = True
