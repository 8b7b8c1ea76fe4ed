"""The arms of the learning benchmarks, side by side in one process (imported by
learning_alphabet_sort.py, learning_multilingual.py and learning_reward_model.py).

Every policy is scored by the same evaluation: the first eval.num_examples rows of the env's eval
split x eval.rollouts_per_example rollouts, seeded by eval.seed, scored by the env's rubric (the
task reward; a run's extra training rewards, e.g. language consistency or a reward model, are not
in it). The arms:

    initial            the recipe's model before any training (model=small: random weights)
    after SFT          the warm start; also the lr=0 control (GRPO with lr=0 keeps these weights,
                       and the evaluation is seeded, so it would score exactly this)
    after GRPO s<k>    trainer.max_steps of GRPO from the SFT checkpoint, trainer.seed=k
    more SFT           SFT continued from the same checkpoint for the training seconds of one GRPO
                       run (the mean over the seeds), stopped by its own training clock:
                       "does GRPO beat spending the same time on more SFT?"

Differences are paired: per example, the mean over its rollouts (over both seeds for "GRPO"),
then the mean and standard error of the per-example differences, overall and per language.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from grpo.evaluation.summary import paired_difference  # noqa: E402 - after the offline settings

# the five-language recipe with 500 eval rows (~100 per language) and the 50 validation rows after
# them (learning_multilingual.py, learning_reward_model.py)
MULTILINGUAL = [
    "+experiment=alphabet_sort_multilingual",
    "eval.num_examples=500",
    "env.num_eval_examples=550",
]


@dataclass
class Arm:
    label: str
    # example -> its rollouts' rubric rewards (the same examples, in the same order, in every arm)
    rewards: list[list[float]]
    seconds: float
    note: str = ""
    # validation curves of a GRPO arm: metric name -> [(step, value)]
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # the share of truncated rollouts (cut by a token limit): "all" and each language
    truncated: dict[str, float] = field(default_factory=dict)
    # reward against training seconds on the held-out rows (WallClockCurve): language -> [(s, reward)]
    clock: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # a GRPO arm: the collapses its run saw (grpo/train/collapse.py), each its line
    collapses: list[str] = field(default_factory=list)
    # a GRPO arm whose run hands on another policy than its last one (trainer.keep_best chose an
    # earlier checkpoint): that policy's arm label; None when the final policy is the one handed on
    # (a rollback already makes the last policy the undone one)
    handed_on: str | None = None


def paired(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], keep: Sequence[bool] | None = None):
    """Mean of a - b over examples (each example's mean over its rollouts) and its standard error."""
    rows = [(x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if keep is None or keep[i]]
    return paired_difference([x for x, _ in rows], [y for _, y in rows])


def merged(*arms: Arm) -> list[list[float]]:
    """Each example's rollouts of several arms together (e.g. both GRPO seeds)."""
    return [[v for arm in arms for v in arm.rewards[i]] for i in range(len(arms[0].rewards))]


def mean_of(rewards: Sequence[Sequence[float]], keep: Sequence[bool]) -> float:
    return statistics.fmean(v for i, row in enumerate(rewards) if keep[i] for v in row)


def recorder() -> Any:
    """A tracker that keeps every metric it is given (validation and training curves), in memory."""
    from grpo.tracking.base import NullTracker

    class Recorder(NullTracker):
        def __init__(self) -> None:
            self.curves: dict[str, list[tuple[int, float]]] = {}

        def log_metrics(self, metrics, step: int) -> None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self.curves.setdefault(k, []).append((int(step), float(v)))

    return Recorder()


def wall_clock_curve(bench: Bench, interval_s: float, rows: Sequence[Any], rollouts: int) -> Any:
    """A TrainerCallback that scores the model being trained on `rows` x `rollouts` (the rubric, the
    evaluation's sampling) at the start and every `interval_s` seconds of training, and at its end.
    Its clock counts training only (the scoring pauses it), and the scoring runs on a forked RNG, so
    the arm trains exactly as it would without the curve. `.points`: language ("all" too) ->
    [(training seconds, mean reward)]; `.seconds()`: the training seconds so far."""
    import torch
    from transformers import TrainerCallback

    from grpo.evaluation.evaluator import evaluate_rows
    from grpo.evaluation.setup import EvalSetup
    from grpo.generation import make_backend

    class WallClockCurve(TrainerCallback):
        def __init__(self) -> None:
            self.points: dict[str, list[tuple[float, float]]] = {}
            self.trained = 0.0
            self.since = 0.0
            self.next_at = 0.0

        def seconds(self) -> float:
            return self.trained + (time.perf_counter() - self.since if self.since else 0.0)

        def _score(self, model: Any, tokenizer: Any) -> None:
            self.trained, self.since = self.seconds(), 0.0  # the clock stops while scoring
            was_training = model.training
            model.eval()
            with torch.random.fork_rng():
                backend = make_backend(bench.settings.generation, model, tokenizer, bench.settings.model)
                result = evaluate_rows(
                    EvalSetup.of(bench.settings), bench.env, rows, rollouts, backend, None, label="curve"
                )
            model.train(was_training)
            for code, stats in {"all": {"mean": result.mean}, **result.per_language}.items():
                self.points.setdefault(code, []).append((self.trained, float(stats["mean"])))
            self.next_at = self.trained + interval_s
            self.since = time.perf_counter()

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            self._score(model, processing_class)

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if self.seconds() >= self.next_at:
                self._score(model, processing_class)

        def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if self.since and time.perf_counter() - self.since > 1.0:
                self._score(model, processing_class)
            self.trained, self.since = self.seconds(), 0.0

    return WallClockCurve()


def clock_stop(budget_s: float, curve: Any = None) -> Any:
    """A TrainerCallback that stops training at the first step boundary at which the arm's own
    training clock reaches `budget_s`: the curve's clock (which pauses while it scores), else
    seconds since training began. `.seconds()`: the clock; `.steps`: the steps taken."""
    from transformers import TrainerCallback

    class ClockStop(TrainerCallback):
        def __init__(self) -> None:
            self.began: float | None = None
            self.ended: float | None = None
            self.steps = 0

        def seconds(self) -> float:
            if curve is not None:
                return curve.seconds()
            if self.began is None:
                return 0.0
            return (self.ended or time.perf_counter()) - self.began

        def on_train_begin(self, args, state, control, **kwargs):
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.steps = int(state.global_step)
            if self.seconds() >= budget_s:
                control.should_training_stop = True

        def on_train_end(self, args, state, control, **kwargs):
            self.ended = time.perf_counter()

    return ClockStop()


class Bench:
    """The recipe's settings and env, and each arm run and scored."""

    def __init__(self, overrides: Sequence[str]):
        import torch

        from grpo.envs import build_env

        if os.environ.get("GRPO_BENCH_THREADS"):
            torch.set_num_threads(int(os.environ["GRPO_BENCH_THREADS"]))
        self.overrides = [*overrides, "tracking=none"]
        self.settings = self.variant()
        self.env = build_env(self.settings.env, self.settings.language)
        rows = self.env.rows("eval", self.settings.eval.num_examples)
        self.languages = [row.language for row in rows]
        self.out = Path(tempfile.mkdtemp(prefix="grpo-learning-"))
        self.arms: dict[str, Arm] = {}
        self.sft_path: Path | None = None
        self.sft_seconds_per_step = math.nan

    def variant(self, *more: str) -> Any:
        """The recipe's settings with `more` overrides (checked), evaluation tables not printed."""
        from grpo.cli.checks import check
        from grpo.compose import load_settings

        settings = load_settings([*self.overrides, *more])
        check(settings)
        return dataclasses.replace(settings, eval=dataclasses.replace(settings.eval, show_examples=False))

    # ---- scoring ---------------------------------------------------------------------------

    def score(self, label: str, model: Any, tokenizer: Any, seconds: float, note: str = "", **extra) -> Arm:
        from grpo.evaluation.evaluator import evaluate
        from grpo.evaluation.setup import EvalSetup
        from grpo.generation import make_backend

        backend = make_backend(self.settings.generation, model, tokenizer, self.settings.model)
        result = evaluate(
            EvalSetup.of(self.settings), self.env, backend, self.out / f"eval_{label}", label=label
        )
        if len(result.rewards) != len(self.languages):
            raise RuntimeError(
                f"{label}: {len(result.rewards)} examples scored, expected {len(self.languages)}"
            )
        truncated = {"all": result.truncated, **{c: s["truncated"] for c, s in result.per_language.items()}}
        arm = Arm(label, result.rewards, seconds, note, truncated=truncated, **extra)
        self.arms[label] = arm
        print(f"[bench] {label}: mean {result.mean:.4f} ({seconds:.0f} s)", flush=True)
        return arm

    # ---- arms ------------------------------------------------------------------------------

    def initial(self) -> tuple[Any, Any]:
        """The recipe's starting model, before any training (model=small: random weights)."""
        from grpo.models import load_policy

        model, tokenizer = load_policy(self.settings.model)
        m = self.settings.model
        note = "random weights" if m.source == "random" else f"{m.name} ({m.path})"
        self.score("initial", model, tokenizer, 0.0, f"the starting model: {note}")
        return model, tokenizer

    def sft(self, model: Any, tokenizer: Any, reuse: str | None = None) -> Arm:
        """The warm start (or `reuse`: the sft dir of an earlier run of the same recipe)."""
        from grpo.models import load_policy
        from grpo.run.layout import SFT_META_FILE
        from grpo.sft.train import train_sft

        if reuse:
            self.sft_path = Path(reuse).resolve()
            meta = json.loads((self.sft_path / SFT_META_FILE).read_text())
            seconds, steps = float(meta["seconds"]), int(meta["global_step"])
            model, tokenizer = load_policy(self.sft_model())
            note = f"reused {self.sft_path}"
        else:
            start = time.perf_counter()
            result = train_sft(self.settings, self.env, self.out / "sft", model=model, tokenizer=tokenizer)
            seconds, steps = time.perf_counter() - start, result.global_step
            self.sft_path, model, tokenizer = result.path, result.model, result.tokenizer
            note = f"{steps} steps"
        self.sft_seconds_per_step = seconds / max(steps, 1)
        return self.score("sft", model, tokenizer, seconds, f"{note}; also the lr=0 control")

    def sft_model(self) -> Any:
        from grpo.config import ModelConfig

        return ModelConfig(
            name="sft", source="pretrained", path=str(self.sft_path), seed=self.settings.model.seed
        )

    def grpo(
        self, label: str, seed: int, settings: Any = None, rewards: Any = None, curve: Any = None
    ) -> Arm:
        """GRPO from the SFT checkpoint with trainer.seed=`seed` (and `settings` / `rewards` when
        given). With `curve` (wall_clock_curve), the arm's seconds are its training seconds."""
        from grpo.models import load_policy
        from grpo.train.trainer import train

        base = settings or self.settings
        run = dataclasses.replace(
            base, model=self.sft_model(), trainer=dataclasses.replace(base.trainer, seed=seed)
        )
        model, tokenizer = load_policy(run.model)
        tracker = recorder()
        start = time.perf_counter()
        trained = train(run, self.env, self.out / label, model=model, tokenizer=tokenizer, rewards=rewards,
                        tracker=tracker, callbacks=[curve] if curve else ())  # fmt: skip
        seconds = curve.seconds() if curve else time.perf_counter() - start
        note = f"{trained.global_step} steps, seed {seed}, {seconds / max(trained.global_step, 1):.2f} s/step"
        if trained.best is not None:
            note += f", best validation checkpoint (step {trained.best.global_step})"
        clock = curve.points if curve else {}
        if trained.collapses:
            note += f", {len(trained.collapses)} collapse(s)"
        arm = self.score(
            label, trained.model, trained.tokenizer, seconds, note, curves=tracker.curves, clock=clock,
            collapses=list(trained.collapses),
        )  # fmt: skip
        best = trained.best
        if best is not None and best.global_step != trained.global_step:
            from grpo.run.trained import checkpoint_model

            # loaded from disk, as the run's own `best` evaluation and a later model.checkpoint=best do
            model, tokenizer = load_policy(checkpoint_model(run.model, best.path, self.sft_path))
            arm.handed_on = f"{label}@best"
            self.score(arm.handed_on, model, tokenizer, seconds,
                       f"{label}'s best validation checkpoint (step {best.global_step}): the policy its run hands on")  # fmt: skip
        return arm

    def more_sft(self, seconds: float, curve: Any = None) -> Arm:
        """SFT continued from the SFT checkpoint until its own training clock reaches `seconds` (the
        GRPO arm's training seconds): it stops at the first step boundary past them, whatever speed
        it runs at (the SFT stage's s/step only sizes the schedule, at 4x the steps that speed
        would take). With `curve` (wall_clock_curve), the clock is the curve's (scoring paused)."""
        from grpo.models import load_policy
        from grpo.sft.train import train_sft

        planned = max(1, round(seconds / self.sft_seconds_per_step))
        f = self.settings.sft
        # the same recipe, a new pass over the demonstrations in another order, no second warm-up; a
        # schedule long enough that the clock, not the step count, ends it
        more = dataclasses.replace(
            self.settings, sft=dataclasses.replace(f, max_steps=4 * planned, seed=f.seed + 1, warmup=0)
        )
        model, tokenizer = load_policy(self.sft_model())
        stop = clock_stop(seconds, curve)
        result = train_sft(more, self.env, self.out / "more_sft", model=model, tokenizer=tokenizer,
                           callbacks=[*([curve] if curve else []), stop])  # fmt: skip
        took, steps = stop.seconds(), max(stop.steps, 1)
        note = f"{steps} more SFT steps on its own clock, {took:.0f} of {seconds:.0f} s, {took / steps:.2f} s/step"
        clock = curve.points if curve else {}
        return self.score("more_sft", result.model, result.tokenizer, took, note, clock=clock)

    # ---- the report ------------------------------------------------------------------------

    def report(self, title: str, grpo_labels: Sequence[str], control: str = "more_sft") -> dict[str, float]:
        """Print the per-language table of every arm and the paired gains; returns language -> GRPO − SFT."""
        arms = self.arms
        grpo = merged(*(arms[k] for k in grpo_labels))
        codes = sorted(set(self.languages))
        groups = [("all", [True] * len(self.languages))] + (
            [(c, [lang == c for lang in self.languages]) for c in codes] if len(codes) > 1 else []
        )
        r = self.settings.eval.rollouts_per_example
        print(f"\n{title}")
        print(
            f"{len(self.languages)} eval rows x {r} rollouts (temperature {self.settings.eval.temperature}), "
            f"scored by the rubric; {os.environ.get('GRPO_BENCH_THREADS') or 'default'} torch threads; {self.out}"
        )
        print(f"{'policy':<12} {'seconds':>8}  note")
        for arm in arms.values():
            print(f"{arm.label:<12} {arm.seconds:>8.0f}  {arm.note}")
        labels = [k for k in arms]
        header = f"{'language':<9} {'rows':>5} " + " ".join(f"{k:>9}" for k in labels) + f" {'GRPO':>9}"
        header += f"  {'GRPO-SFT (SE)':>16}  {'GRPO-moreSFT (SE)':>18}"
        print(header)
        gains: dict[str, float] = {}
        for name, keep in groups:
            cells = " ".join(f"{mean_of(arms[k].rewards, keep):>9.4f}" for k in labels)
            g, g_se = paired(grpo, arms["sft"].rewards, keep)
            line = f"{name:<9} {sum(keep):>5} {cells} {mean_of(grpo, keep):>9.4f}  {g:>+8.4f} ({g_se:.4f})"
            if control in arms:
                c, c_se = paired(grpo, arms[control].rewards, keep)
                line += f"  {c:>+9.4f} ({c_se:.4f})"
            print(line)
            gains[name] = g
        for k in grpo_labels:
            g, se = paired(arms[k].rewards, arms["sft"].rewards)
            print(f"{k} - sft: {g:+.4f} (SE {se:.4f})")
        self.policies(grpo_labels)
        return gains

    def gain_table(self, labels: Sequence[str], base: str = "sft") -> dict[str, dict[str, float]]:
        """Per language, each arm's mean and its paired gain over `base`; returns arm -> language -> gain."""
        codes = sorted(set(self.languages))
        groups = [("all", [True] * len(self.languages))] + [
            (c, [x == c for x in self.languages]) for c in codes
        ]
        print(
            f"{'language':<9} {'rows':>5} {base:>9} "
            + " ".join(f"{k + ' - ' + base + ' (SE)':>28}" for k in labels)
        )
        out: dict[str, dict[str, float]] = {k: {} for k in labels}
        for name, keep in groups:
            cells = []
            for k in labels:
                g, se = paired(self.arms[k].rewards, self.arms[base].rewards, keep)
                out[k][name] = g
                cells.append(f"{mean_of(self.arms[k].rewards, keep):.4f} {g:+.4f} ({se:.4f})".rjust(28))
            print(
                f"{name:<9} {sum(keep):>5} {mean_of(self.arms[base].rewards, keep):>9.4f} " + " ".join(cells)
            )
        return out

    def policies(self, grpo_labels: Sequence[str]) -> None:
        """Per GRPO arm: its final policy, the policy its run hands on (the best checkpoint by
        validation when keep_best chose an earlier one; after a rollback the final policy is the
        undone one) and its collapses."""
        print("| GRPO arm | final policy | handed on | which | collapses |")
        print("|---|---|---|---|---|")
        for k in grpo_labels:
            arm = self.arms[k]
            handed = self.arms[arm.handed_on] if arm.handed_on else arm
            which = arm.handed_on or "the final policy"
            every = [True] * len(arm.rewards)
            print(f"| {k} | {mean_of(arm.rewards, every):.4f} | {mean_of(handed.rewards, every):.4f} | {which} "
                  f"| {len(arm.collapses)} |")  # fmt: skip

    def arms_line(self) -> None:
        print(f"{'policy':<16} {'seconds':>8}  note")
        for arm in self.arms.values():
            print(f"{arm.label:<16} {arm.seconds:>8.0f}  {arm.note}")


def split_args(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """--name=value options of the script, and the Hydra overrides."""
    options, overrides = {}, []
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            options[k] = v
        else:
            overrides.append(a)
    return options, overrides
