"""What GRPO training prints: a header, one compact line per logging step, the zero-signal hint,
and a warning line when the share of truncated completions climbs (grpo/train/monitors.py).

    [train] env alphabet_sort | model tiny | 40 steps x 16 completions per step (4 prompts x 4) in 1 ...
    [train] step 4/40 | reward 0.2100 | lcs_ratio 0.2100 | kl 0.0012 | loss 0.01 | len 31 | 1.90 s/step, eta 0:01:08

The line is printed on the main process only; `ProgressPrinter.last` keeps the last logged
metrics (every process), which the stage hands back in its TrainResult. transformers is imported
when a printer is made.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.run.eta import speed_and_eta
from grpo.train.geometry import step_geometry
from grpo.train.monitors import PREFIX, ShortAnswerWatch, TruncationWatch, compact, truncated_shares


def progress_printer(
    settings: GrpoConfig, env: Any, resume_from: Path | None, reward_funcs: Sequence[Any] = ()
) -> Any:
    """A transformers TrainerCallback printing the header when training starts, then one line per
    logging step: step, reward, per-function rewards, KL, loss, length, monitors, speed, ETA; and
    the zero-signal hint, once. `reward_funcs`: the TRL reward functions; those that count their
    exceptions (`take_window`, grpo/rewards/reward_funcs.py) let the hint name a function that raised on
    every completion of the step instead of blaming the model."""
    from transformers import TrainerCallback

    header = train_header(settings, env, resume_from)

    class ProgressPrinter(TrainerCallback):
        def __init__(self) -> None:
            self.start = 0.0
            self.start_step = 0
            self.last: dict[str, float] = {}
            self.hinted = False
            self.truncation = TruncationWatch("[train]", settings)
            pays = getattr(env, "pays_short_answers", None)
            self.short = ShortAnswerWatch("[train]", pays() if callable(pays) else None)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start, self.start_step = time.perf_counter(), state.global_step
            if state.is_world_process_zero:
                resumed = f" (resumed at step {state.global_step})" if state.global_step else ""
                print(f"[train] {header}{resumed}", flush=True)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or "reward" not in logs:
                return
            windows = {f.__name__: f.take_window() for f in reward_funcs if hasattr(f, "take_window")}
            self.last = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
            if not state.is_world_process_zero:
                return
            done = state.global_step - self.start_step
            elapsed = time.perf_counter() - self.start
            parts = [f"step {state.global_step}/{state.max_steps}", f"reward {logs['reward']:.4f}"]
            parts += reward_parts(logs)
            for key, label in (("kl", "kl"), ("loss", "loss"), ("completions/mean_length", "len")):
                if isinstance(logs.get(key), (int, float)):
                    parts.append(f"{label} {logs[key]:.4g}")
            parts += compact(logs)
            if isinstance(logs.get("async/lag"), (int, float)):  # generation ahead of training
                parts.append(f"lag {logs['async/lag']:.3g} | waited {logs.get('async/wait_s', 0.0):.2f} s")
            if done:
                parts.append(speed_and_eta(elapsed, done, state.global_step, state.max_steps))
            print("[train] " + " | ".join(parts), flush=True)
            for watch, name in ((self.truncation, "truncated"), (self.short, "short_answer")):
                warning = watch.update(truncated_shares(logs, f"{PREFIX}{name}"), state.global_step)
                if warning:
                    print(warning, flush=True)
            zero_std = logs.get("frac_reward_zero_std")
            if not self.hinted and isinstance(zero_std, (int, float)) and zero_std >= 1.0:
                failing = [name for name, (scored, raised) in windows.items() if scored and raised == scored]
                if failing:
                    line = reward_error_hint(state.global_step, *failing)
                elif logs.get(f"{PREFIX}truncated") == 1.0 and settings.trainer.truncated_reward is not None:
                    line = truncation_hint(state.global_step, settings)
                else:
                    line = zero_signal_hint(state.global_step, env)
                print(line, flush=True)
                self.hinted = True

    return ProgressPrinter()


def reward_parts(logs: dict[str, Any]) -> list[str]:
    """Each reward function's mean, then the first one's per-language means in one short part
    (`by language en 0.39 ja 0.14`): one part per function and language made lines of 400
    characters; every per-language metric is in MLflow (rewards/<fn>/<lang>/mean)."""
    means: dict[str, float] = {}
    by_language: dict[str, dict[str, float]] = {}
    for key, value in logs.items():
        if not (key.startswith("rewards/") and key.endswith("/mean") and isinstance(value, (int, float))):
            continue
        name = key[len("rewards/") : -len("/mean")]
        func, _, language = name.partition("/")
        if language:
            by_language.setdefault(func, {})[language] = float(value)
        else:
            means[name] = float(value)
    parts = [f"{name} {value:.4f}" for name, value in means.items()]
    first = next((f for f in means if f in by_language), next(iter(by_language), None))
    if first is not None:
        parts.append("by language " + " ".join(f"{c} {v:.2f}" for c, v in sorted(by_language[first].items())))
    return parts


# envs with a CPU recipe that warms a model up and then learns (conf/experiment/)
CPU_RECIPES = {"alphabet_sort": "+experiment=alphabet_sort_cpu"}


def zero_signal_hint(step: int, env: Any = None) -> str:
    """The one-line hint printed the first time every group of a step got one reward for all its
    completions (TRL's frac_reward_zero_std = 1): the advantages are all 0, nothing is learned.
    What to do next fits `env`: a warm start on its reference answers where it has them (and its
    CPU recipe where there is one), demonstrations or a stronger model where it has none."""
    head = (
        f"hint: every group of step {step} got the same reward for all its completions, so GRPO has no "
        "signal (advantages are reward minus the group mean: all 0; typical of a random or untrained "
        "model that never produces a scorable answer); "
    )
    name = getattr(env, "name", None)
    if env is not None and not _has_reference_answers(env):
        return head + (
            f"env {name} has no reference answers to warm a model up on: give demonstrations "
            "(stages=[sft,eval,train,eval] sft.data_path=<a JSONL of conversations>) or start from a model "
            "that already answers it (model=... / model.path=...)"
        )
    recipe = CPU_RECIPES.get(str(name))
    return head + (
        "warm the model up first with stages=[sft,eval,train,eval] (supervised fine-tuning on the env's "
        "reference answers"
        + (f"; the CPU recipe for {name}: {recipe}" if recipe else "")
        + "), or use a stronger model / an easier env"
    )


def _has_reference_answers(env: Any) -> bool:
    """Whether `env` writes a perfect episode for its rows (what the sft stage trains on)."""
    try:
        rows = env.rows("train", 1)
        return bool(rows) and bool(env.reference_completion(rows[0]))
    except Exception:  # noqa: BLE001 - NotImplementedError, or an env that cannot say: none
        return False


def truncation_hint(step: int, settings: GrpoConfig) -> str:
    """The zero-signal hint when every completion of the step was cut by a token limit: each earned
    trainer.truncated_reward, so the groups are flat because of the limits, not the rubric."""
    t = settings.trainer
    return (
        f"hint: GRPO has no signal at step {step} because every completion was cut by a token limit "
        f"(generation.max_tokens_per_turn={settings.generation.max_tokens_per_turn}, "
        f"trainer.max_completion_length={t.max_completion_length}) and a truncated completion earns "
        f"trainer.truncated_reward={t.truncated_reward:g}: raise the limits so answers can end (a thinking "
        "model needs room for its thoughts), or warm the model up to end its answers"
    )


def reward_error_hint(step: int, *names: str) -> str:
    """The zero-signal hint when the cause is a reward function, not the model: every completion
    of the step was scored 0 because `names` raised on each."""
    which = ", ".join(names)
    return (
        f"hint: GRPO has no signal at step {step} because reward function {which} raised on every "
        "completion (each scored 0; the first error is the warning above, the count is "
        f"rewards/<name>/errors): fix the reward function, the model is not the cause"
    )


def train_header(settings: GrpoConfig, env: Any, resume_from: Path | None) -> str:
    """What trains, on what, how: the first line training prints."""
    t, o = settings.trainer, settings.optimizer
    checkpointing = ", gradient checkpointing" if t.gradient_checkpointing else ""
    text = (
        f"env {env.name} | model {settings.model.name} | {t.max_steps} steps x "
        f"{step_geometry(t).describe()}{checkpointing} | loss {t.loss_type}, beta {t.beta}, "
        f"scale {t.scale_rewards} | {o.name} lr {o.lr:g} | generation {settings.generation.backend}"
    )
    if settings.generation.num_batches_ahead:
        text += f", {settings.generation.num_batches_ahead} batch(es) ahead"
    return text + (f" | from {resume_from}" if resume_from else "")
