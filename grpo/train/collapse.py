"""Collapse: GRPO's per-step signals breaking down together, caught within a few steps, and what
the run does about it (trainer.on_collapse).

Signals, per optimizer step (read from the trainer's record of the step, `StepMetrics`, whatever
trainer.logging_steps is), for the whole batch ("all") and, where the batch holds several
languages, for each language:

    loss            the training loss of the step's micro-batches (TRL's compute_loss; all only)
    kl              the KL to the reference model (all only; logged when trainer.beta > 0)
    reward          the batch's reward (judged for the batch only: a language's reward over the
                    group or two it has a step swings by 0.5 in a healthy run; recorded per language)
    truncated       the share of completions cut by a token limit       (grpo/train/monitors.py)
    wrong_language  the share of completions in another language        (non-English runs)
    repetition      the mean share of repeated word n-grams

Each is compared with its own last WINDOW values: a signal JUMPS at a step when it moves, in its
bad direction, by more than its floor and more than SPREAD times its recent standard deviation
(`jump`; the loss either way, from its median), or SPREAD times its spread over the whole run when
that is larger (ten calm steps can hide a batch's noise). A language's floors are LANGUAGE_FLOOR times the
batch's (one group or two a step: one cut completion of 8 is 12.5 points). The loss of a batch
with cut completions is neither judged nor kept as the loss's past: masking them out moves it by
construction (measured: one cut completion of 32 moved it from 1e-8 to -0.05 in a healthy run),
and the cut share is the signal. Before WARMUP values of its own, only the whole
batch's signals can jump, by more than EARLY times their floor (a collapse in the first steps of a
too-high lr). A jump stays out of the signal's past, so a breakdown that lasts keeps jumping. One
signal moving once is noise (a hard batch, a few groups with one outlier); a COLLAPSE is two kinds
of the whole batch's signals jumping within two consecutive steps (the cut and repeated shares are
one kind, KIND: the cut completions are the looping ones, and so is a wrong-language share that
jumps with the cut share: the completions that run on are the ones with words to judge, `_kinds`;
a language's signals say where, not whether), or one kind jumping SUSTAIN steps in a row (not the
batch reward's early jumps: with a few prompts a step they are the prompts' mix), or, within the
first WINDOW steps, SUSTAIN batch rewards in a row under HALF the start and more than EARLY times
the reward's floor below it (a fall that lasts: a too-high lr); it is reported once, and again only after a calm step. A step with a jump is not calm
and vouches for no policy (below), whether or not it makes a collapse. It is said in one line naming the
numbers, logged as the metric `collapse/event` (1 at the step) with `collapse/kinds` (how many moved),
and every step's signals go to <run_dir>/collapse.jsonl, so a collapse's trajectory can be read back.

What the run then does (trainer.on_collapse):

    rollback   (default) the policy goes back to the last one whose rollouts were calm, the
               optimizer's moments are reset, and training continues with the learning rate times
               trainer.collapse_lr_factor (seed 003's remedy: a lower lr); after
               trainer.collapse_max_rollbacks rollbacks a further collapse stops as `stop` does
    stop       the policy goes back to the last calm one and training stops there: the run's final
               checkpoint and evaluation are of that policy
    none       the line and the event only: today's behaviour, the run ends on its last policy

The last calm policy: the signals of step t describe rollouts sampled by the weights after step
t - 1 - generation.num_batches_ahead; a calm step (no signal jumping) vouches for those weights. The
watch keeps CPU copies of the trainable parameters (all of them under full fine-tuning, the
adapters under LoRA) from the last vouched-for step on: usually 2 + num_batches_ahead copies of
the trainable weights in host memory (at most 1 + MAX_UNVOUCHED + num_batches_ahead while
signals jump short of a collapse), and one spare set of buffers the next copy reuses. Several processes (DDP, FSDP, ZeRO) shard or replicate them:
there rollback and stop only stop the run, saying so; the policy is then the one of that step.

Light: the detection (`CollapseWatch`) is pure Python; the callback (`collapse_callback`) imports
transformers and torch when made.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.train.monitors import PREFIX

# the steps a signal is compared with, and how many it needs before it can jump
WINDOW = 10
WARMUP = 5
# a jump: more than this many recent standard deviations, and more than the signal's floor; with a
# past shorter than WARMUP, the whole batch's signals jump by more than EARLY x their floor
SPREAD = 4.0
EARLY = 3.0
# the signals judged per language too (the shares: a language's reward is noise at a group a step)
PER_LANGUAGE = ("truncated", "wrong_language", "repetition")
# a language's signals come from a group or two per step: their floors are this many times larger
LANGUAGE_FLOOR = 2.5
# one kind of signal jumping this many steps in a row is a collapse on its own
SUSTAIN = 3
# the batch reward's early falls (before WARMUP values of its own) are not a collapse on their own:
# with a few prompts a step they are the prompts' mix (measured: a healthy five-language run of 4
# prompts a step went 0.60, 0.43, 0.36, 0.20, 0.64); a fall that lasts is: within the first WINDOW
# steps, SUSTAIN batch rewards in a row under HALF the start (the median of the first START rewards)
# and more than EARLY x the reward's floor below it
START = 3
HALF = 0.5
# copies of the weights kept after the last vouched-for one (plus one per batch generated ahead)
MAX_UNVOUCHED = 3
# name -> (direction: +1 a rise is bad, -1 a fall is bad, 0 either way; floor of a jump)
SIGNALS: dict[str, tuple[int, float]] = {
    "loss": (0, 0.01),
    "kl": (1, 0.02),
    "reward": (-1, 0.05),
    "truncated": (1, 0.10),
    "wrong_language": (1, 0.10),
    "repetition": (1, 0.05),
}
# signals that are one kind of evidence: cut completions are the ones that loop (measured: a healthy
# run's batch with 2 of a group's 8 completions cut had its repetition jump with them, step 57 of
# en fr es zh ja seed 4), so the two count as one kind, "runaway"
KIND = {"truncated": "runaway", "repetition": "runaway"}
# how the line names each signal
LABELS = {
    "loss": "loss",
    "kl": "kl",
    "reward": "reward",
    "truncated": "cut",
    "wrong_language": "wrong-lang",
    "repetition": "rep",
}


def step_signals(metrics: Mapping[str, float]) -> dict[str, float]:
    """One step's signals as `<signal>` or `<signal>/<lang>` -> value, from the trainer's metrics of
    the step (TRL's names and grpo's monitor/...; `loss`: the step's)."""
    out: dict[str, float] = {}
    for name, key in (("loss", "loss"), ("kl", "kl"), ("reward", "reward")):
        if _finite(metrics.get(key)):
            out[name] = float(metrics[key])
    for name in ("truncated", "wrong_language", "repetition"):
        for key, value in metrics.items():
            if not _finite(value):
                continue
            if key == f"{PREFIX}{name}":
                out[name] = float(value)
            elif key.startswith(f"{PREFIX}{name}/"):
                out[f"{name}/{key[len(PREFIX) + len(name) + 1 :]}"] = float(value)
    # per language, the first reward function's mean (TRL's order): recorded for the trajectory,
    # not judged (PER_LANGUAGE)
    by_language: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if key.startswith("rewards/") and key.endswith("/mean") and _finite(value):
            func, _, code = key[len("rewards/") : -len("/mean")].partition("/")
            if code and "/" not in code:
                by_language.setdefault(func, {})[code] = float(value)
    if by_language:
        out.update({f"reward/{code}": v for code, v in next(iter(by_language.values())).items()})
    return out


def jump(
    history: list[float],
    value: float,
    direction: int,
    floor: float,
    early: bool = False,
    scale: float = 0.0,
) -> float | None:
    """How far `value` moved, in the bad `direction`, from its recent past (the mean, or the median
    for direction 0, or while the past is short), when that is more than `floor` and more than
    SPREAD standard deviations of the past (or SPREAD x `scale`, the signal's spread over the whole
    run, when that is larger); else None. With fewer than WARMUP past values only an `early` signal
    (the whole batch's) can jump, by more than EARLY x its floor."""
    if not history or (len(history) < WARMUP and not early):
        return None
    short = len(history) < WARMUP
    center = statistics.median(history) if direction == 0 or short else statistics.fmean(history)
    moved = abs(value - center) if direction == 0 else (value - center) * direction
    if short:
        return moved if moved > EARLY * floor else None
    spread = max(statistics.pstdev(history), scale)
    return moved if moved > floor and moved > SPREAD * spread else None


@dataclass
class Collapse:
    """One collapse: the step, what jumped (signal -> (recent level, value)), and the line."""

    step: int
    moved: dict[str, tuple[float, float]]
    kinds: int
    line: str = ""


@dataclass
class CollapseWatch:
    """Per-step bookkeeping of the signals (see the module docstring). `update(step, signals)`
    returns a Collapse or None (one per breakdown: none again until a calm step); `calm` says
    whether the last step had no signal jumping."""

    window: int = WINDOW
    history: dict[str, deque[float]] = field(default_factory=dict)
    previous: dict[str, tuple[float, float]] = field(default_factory=dict)
    streak: dict[str, int] = field(default_factory=dict)
    calm: bool = True
    active: bool = False
    # the batch rewards of the first `window` steps (the start, and a fall that lasts)
    opening: list[float] = field(default_factory=list)
    # per signal, (count, mean, sum of squared deviations) of every value its past took in: its
    # spread over the run. Ten calm steps can hide the batch's noise (measured: a healthy run's
    # batch reward had an SD of 0.06 over ten steps and 0.17-0.21 over its run)
    whole: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    def update(self, step: int, signals: Mapping[str, float]) -> Collapse | None:
        moved: dict[str, tuple[float, float]] = {}
        early: set[str] = set()  # jumps judged against a short past
        # a batch with cut completions has a loss off its usual scale by construction (they are
        # masked out, and the group's advantages no longer sum to zero): the cut share speaks for it
        explained = _finite(signals.get("truncated")) and float(signals["truncated"]) > 0
        for key, value in signals.items():
            base = key.split("/", 1)[0]
            if base not in SIGNALS or not _finite(value):
                continue
            past = self.history.setdefault(key, deque(maxlen=self.window))
            direction, floor = SIGNALS[base]
            if "/" in key:
                if base not in PER_LANGUAGE:
                    continue
                floor *= LANGUAGE_FLOOR  # a language's share moves by a completion or two per step
            if base == "loss" and explained:
                continue  # off its scale by construction: neither judged nor part of the loss's past
            short = len(past) < WARMUP
            if jump(list(past), value, direction, floor, "/" not in key, self._spread(key)) is not None:
                level = statistics.median(past) if direction == 0 or short else statistics.fmean(past)
                moved[key] = (level, value)
                if short:
                    early.add(key)
                    self._take(key, past, value)  # a short past is no settled level yet: it follows
            else:
                # after the warm-up a jump is kept out of the signal's past: the next step is
                # compared with the calm level, so a breakdown that lasts keeps jumping
                self._take(key, past, value)
        lasting = self._lasting_fall(signals.get("reward"))
        if lasting is not None:
            moved["reward"] = lasting
            early.discard("reward")
        self.calm = not moved
        # a language's signals say where, the whole batch's whether: one group or two a step make a
        # language's shares noisy, and over many languages and steps two of them coincide (measured:
        # a healthy run's ja repetition 0.17 with a KL spike); a language that breaks down moves
        # its batch's share too (a group of 8 in a batch of 32: 25 points)
        kinds_now = _kinds(moved)
        # an early reward fall adds to another kind, never to a streak of its own
        self.streak = {k: self.streak.get(k, 0) + 1 for k in kinds_now if not (k == "reward" and k in early)}
        kinds = kinds_now | _kinds(self.previous)
        found = None
        # two kinds within two steps, one kind for SUSTAIN steps in a row, or a fall that lasts
        sustained = max(self.streak.values(), default=0) >= SUSTAIN or lasting is not None
        if kinds_now and (len(kinds) >= 2 or sustained) and not self.active:
            found = Collapse(step, {**self.previous, **moved}, len(kinds))
            self.active = True
        if self.calm:
            self.active = False
        self.previous = moved
        return found

    def _take(self, key: str, past: deque[float], value: float) -> None:
        """`value` into the signal's past and its spread over the run (Welford's update)."""
        past.append(value)
        n, mean, squares = self.whole.get(key, (0, 0.0, 0.0))
        n += 1
        delta = value - mean
        mean += delta / n
        self.whole[key] = (n, mean, squares + delta * (value - mean))

    def _spread(self, key: str) -> float:
        n, _, squares = self.whole.get(key, (0, 0.0, 0.0))
        return math.sqrt(squares / n) if n else 0.0

    def _lasting_fall(self, reward: Any) -> tuple[float, float] | None:
        """(start, reward) when, within the first `window` steps, the last SUSTAIN batch rewards
        are all under HALF the start (the median of the first START); else None."""
        if not _finite(reward) or len(self.opening) >= self.window:
            return None
        self.opening.append(float(reward))
        start = statistics.median(self.opening[:START])
        recent = self.opening[-SUSTAIN:]
        # under half the start and below it by more than EARLY x the reward's floor: a start near
        # 0 (a model that cannot do the task yet) has no half to fall to
        below = min(HALF * start, start - EARLY * SIGNALS["reward"][1])
        if len(self.opening) > START and len(recent) == SUSTAIN and all(r < below for r in recent):
            return start, float(reward)
        return None


def describe(collapse: Collapse) -> str:
    """`loss -0.027 (was 1e-08), ja cut 0% -> 42%, reward 0.465 -> 0.385` for the moved signals."""
    parts = []
    for key, (level, value) in sorted(collapse.moved.items(), key=lambda kv: (kv[0].count("/"), kv[0])):
        base, _, code = key.partition("/")
        label = (f"{code} " if code else "") + LABELS[base]
        if base in ("truncated", "wrong_language"):
            parts.append(f"{label} {level:.0%} -> {value:.0%}")
        else:
            parts.append(f"{label} {level:.3g} -> {value:.3g}")
    return ", ".join(parts)


def _kinds(moved: Mapping[str, Any]) -> set[str]:
    """The kinds of evidence among one step's moved signals of the whole batch (KIND). A
    wrong-language share that jumps in the step the cut share jumps is runaway too: completions
    that run on past their answer are the ones that have words to judge (an answer that is all
    names is no vote), so the two shares count the same completions (measured: a healthy run's one
    step with 8 of 32 completions cut read wrong-lang 0% -> 100%, its 8 run-on ones the only ones
    judged; the step after was calm)."""
    batch = {k for k in moved if "/" not in k}
    runaway = "truncated" in batch
    return {"runaway" if runaway and k == "wrong_language" else KIND.get(k, k) for k in batch}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---- the callback ------------------------------------------------------------------------------


def collapse_callback(
    settings: Any,
    run_dir: Path,
    log_metrics: Any = None,
    world_size: int = 1,
) -> Any:
    """A transformers TrainerCallback that feeds the watch each step, keeps the last calm policy
    and acts as trainer.on_collapse says (module docstring). Attach the trainer
    (`callback.trainer = trainer`) before training. `log_metrics(metrics, step)`: the run's tracker."""
    import torch
    from transformers import TrainerCallback

    from grpo.trl_adapter.internals import StepMetrics, record_losses

    t = settings.trainer
    action = str(t.on_collapse)
    lag = int(settings.generation.num_batches_ahead or 0)

    class CollapseCallback(TrainerCallback):
        def __init__(self) -> None:
            self._trainer: Any = None
            self.losses: list[float] = []
            self.watch = CollapseWatch()
            self.metrics = StepMetrics()
            self.path = Path(run_dir) / "collapse.jsonl"
            # step -> CPU copies of the trainable parameters after that step (0: before training)
            self.snapshots: dict[int, list[Any]] = {}
            self.spare: list[list[Any]] = []
            self.good = 0  # the newest step whose weights a calm batch vouched for
            self.rollbacks = 0
            self.collapses: list[Collapse] = []
            self.can_restore = world_size == 1
            self.ignore_until = -1

        @property
        def trainer(self) -> Any:
            return self._trainer

        @trainer.setter
        def trainer(self, trainer: Any) -> None:
            self._trainer = trainer
            self.losses = record_losses(trainer)

        def _step_metrics(self) -> dict[str, float]:
            metrics = self.metrics.take(self._trainer)
            if self.losses:
                metrics["loss"] = sum(self.losses) / len(self.losses)
                self.losses.clear()
            return metrics

        # -- the policy's copies ------------------------------------------------------------
        def _params(self, model: Any) -> list[Any]:
            return [p for p in model.parameters() if p.requires_grad]

        def _snapshot(self, step: int, model: Any) -> None:
            if not self.can_restore or action == "none":
                return
            params = self._params(model)
            spare = self.spare.pop() if self.spare else None
            with torch.no_grad():
                if spare is None:
                    copy = [p.detach().to("cpu", copy=True) for p in params]
                else:  # a retired copy's buffers: no new host allocation per step
                    for buffer, p in zip(spare, params, strict=True):
                        buffer.copy_(p.detach())
                    copy = spare
            self.snapshots[step] = copy
            # keep the vouched-for copy and the newest ones after it (the steps not yet vouched for)
            retired = [s for s in self.snapshots if s < self.good]
            newer = sorted(s for s in self.snapshots if s > self.good)
            retired += newer[: max(0, len(newer) - MAX_UNVOUCHED - lag)]
            for old in retired:
                self.spare.append(self.snapshots.pop(old))
            del self.spare[1:]  # one spare set of buffers is enough

        def _restore(self, model: Any) -> int:
            with torch.no_grad():
                for p, saved in zip(self._params(model), self.snapshots[self.good], strict=True):
                    p.copy_(saved.to(p.device))
            for later in [s for s in self.snapshots if s > self.good]:
                self.spare.append(self.snapshots.pop(later))
            del self.spare[1:]
            return self.good

        # -- the callback -------------------------------------------------------------------
        def on_train_begin(
            self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any
        ) -> None:
            self.good = int(state.global_step)
            if model is not None:
                self._snapshot(self.good, model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            step = int(state.global_step)
            signals = step_signals(self._step_metrics()) if self._trainer is not None else {}
            # after a rollback, the batches sampled before it (generation ahead) are not the policy's
            fresh = step > self.ignore_until
            collapse = self.watch.update(step, signals) if signals and fresh else None
            if self.watch.calm and signals and fresh:
                # this batch was sampled by the weights after step - 1 - lag: they are good
                vouched = step - 1 - lag
                if vouched in self.snapshots:
                    self.good = vouched
            if state.is_world_process_zero:
                self._record(step, signals, collapse)
            if collapse is not None:
                self.collapses.append(collapse)
                collapse.line = self._act(collapse, state, control, model, kwargs)
                if state.is_world_process_zero:
                    print(collapse.line, flush=True)
                    if log_metrics is not None:
                        try:
                            log_metrics(
                                {"collapse/event": 1.0, "collapse/kinds": float(collapse.kinds)}, step
                            )
                        except Exception:  # noqa: BLE001 - tracking must not kill a training run
                            pass
            if model is not None:
                # the weights after this step (restored ones after a rollback) for a later rollback
                self._snapshot(step, model)

        def _act(self, collapse: Collapse, state: Any, control: Any, model: Any, kwargs: dict) -> str:
            head = f"[train] collapse at step {collapse.step}: {describe(collapse)}"
            if action == "none":
                return head + "; trainer.on_collapse=none: training goes on (rollback or stop would undo it)"
            if not self.can_restore or model is None or self.good not in self.snapshots:
                control.should_training_stop = True
                return (
                    head + f"; stopped at step {collapse.step} on this policy: going back needs one process "
                    "(several processes shard the weights); with trainer.keep_best the best checkpoint "
                    "by validation is kept"
                )
            if action == "rollback" and self.rollbacks < int(t.collapse_max_rollbacks):
                back = self._restore(model)
                self.rollbacks += 1
                before, after = _scale_lr(
                    kwargs.get("optimizer"), kwargs.get("lr_scheduler"), float(t.collapse_lr_factor)
                )
                # the signals' calm past stays (jumps never enter it); batches already sampled by
                # the collapsed policy (generation ahead) are not judged
                self.watch.previous, self.watch.streak, self.watch.active = {}, {}, False
                self.ignore_until = collapse.step + lag
                return (
                    head + f"; rolled back to the policy of step {back} (rollback {self.rollbacks} of "
                    f"{t.collapse_max_rollbacks}), optimizer moments reset, lr {before:.3g} -> "
                    f"{after:.3g}; trainer.on_collapse=none keeps going instead"
                )
            back = self._restore(model)
            control.should_training_stop = True
            control.should_save = True  # the run's last checkpoint holds the policy it hands on
            why = f"after {self.rollbacks} rollbacks" if action == "rollback" else "trainer.on_collapse=stop"
            return (
                head + f"; {why}: stopped, the policy back to the one of step {back}, which the run's "
                "final checkpoint and evaluation take"
            )

        def _record(self, step: int, signals: dict[str, float], collapse: Collapse | None) -> None:
            entry: dict[str, Any] = {"step": step, **{k: round(v, 6) for k, v in signals.items()}}
            if collapse is not None:
                entry["collapse"] = sorted(collapse.moved)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
            except OSError:
                pass  # the record is for reading back; training goes on without it

    return CollapseCallback()


def _scale_lr(optimizer: Any, scheduler: Any, factor: float) -> tuple[float, float]:
    """The learning rate times `factor` from now on, and the optimizer's moments reset: the param
    groups' lr, and the scheduler's base lrs it recomputes them from at each step (both saved in a
    checkpoint, so a resumed run keeps the lower lr). Returns the peak lr before and after (the
    scheduler's first base lr, else the first group's lr; nan without either)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrappers hold torch's
    scheduler = getattr(scheduler, "scheduler", scheduler)
    before = math.nan
    if scheduler is not None and getattr(scheduler, "base_lrs", None):
        before = float(scheduler.base_lrs[0])
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
    if inner is not None:
        if math.isnan(before) and inner.param_groups:
            before = float(inner.param_groups[0]["lr"])
        for group in inner.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
        inner.state.clear()
    return before, before * factor
