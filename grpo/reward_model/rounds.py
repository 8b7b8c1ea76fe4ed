"""Preference rounds on the policy's own samples (iterated RLHF), reward_model.rounds.

A reward model trained once, on pairs that never held what the policy writes, is judged on text
outside everything it saw as soon as GRPO moves the policy; the policy then finds what the RM
over-scores. A round brings the RM back to the policy (grpo/train/rounds.py calls `run` once before
the first GRPO step and every reward_model.rounds.every steps):

 1. sample: rounds.samples_per_prompt completions of the current policy (training sampling:
    trainer.temperature / top_p, the run's token limits) for train prompts drawn afresh each round
    (seeded by the run's seed and the round);
 2. pair: per prompt, every two of its candidates (the samples and the row's reference episode,
    where the env has one); identical episodes are not pairs; a completion cut by a token limit
    loses to one that ended without a label being spent when trainer.truncated_reward is set (GRPO
    pays it that; two cut ones are no pair);
 3. label: the labeler (grpo/reward_model/labelers.py) is asked about the pairs in turn until
    rounds.label_budget labels are spent; a tie costs a label and gives no pair;
 4. measure: each member's accuracy on the fresh pairs, per language, BEFORE it learns them: how
    far the policy has drifted from what the RM knows (printed, logged as rm/round/acc/<lang>);
 5. learn: each member goes on from its current weights (never re-initialised) for rounds.steps
    optimizer steps over its pairs so far (its stage's training pairs and every round's pairs,
    the rounds' pairs repeated to half of the data), then its calibration is refitted on its
    held-out reference set, and the scores the reward caches are forgotten.

Every round writes <run_dir>/reward_model_rounds/round_<k>/: pairs.jsonl (the labelled pairs),
round.json (labels, ties, accuracies; written last) and member_<i>/, a complete RM dir (its
train_pairs.jsonl holds everything it was trained on), which reward_model.checkpoints can name in a
later run. A resumed run reads them back (`resume`): its rounds go on as if never interrupted.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.files import write_json_atomic
from grpo.generation.base import Messages
from grpo.reward_model.data import CORRUPTION_KEY, PreferencePair, load_pairs, write_pairs
from grpo.reward_model.labelers import Labeler
from grpo.run.layout import (
    HELDOUT_PAIRS_FILE,
    RM_META_FILE,
    ROUND_FILE,
    TRAIN_PAIRS_FILE,
    RunLayout,
)

ROUND_PAIRS_FILE = "pairs.jsonl"
# the kinds of round pairs (their `corruption` key): two policy samples, a sample vs the reference
POLICY_KIND = "policy"
REFERENCE_KIND = "policy_vs_reference"


def counted(n: int, noun: str) -> str:
    """'1 label', '3 labels'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass
class Candidate:
    """One episode a round compares: a policy sample or the row's reference episode."""

    episode: Messages
    truncated: bool = False
    reference: bool = False


@dataclass
class RoundReport:
    """What one round did (round.json)."""

    index: int
    step: int
    prompts: int
    labels: int
    ties: int
    # pairs decided without the labeler: a cut completion against one that ended
    by_rule: int
    pairs: list[PreferencePair] = field(repr=False)
    # member -> language ("all" too) -> accuracy on the fresh pairs before learning them
    accuracy: list[dict[str, float]] = field(default_factory=list)
    rm_steps: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "step": self.step,
            "prompts": self.prompts,
            "labels": self.labels,
            "ties": self.ties,
            "by_rule": self.by_rule,
            "pairs": len(self.pairs),
            "accuracy_before": self.accuracy,
            "rm_steps": self.rm_steps,
            "seconds": self.seconds,
        }

    @classmethod
    def read(cls, round_dir: Path) -> RoundReport:
        """The report a finished round wrote (round.json, pairs.jsonl)."""
        import json

        data = json.loads((round_dir / ROUND_FILE).read_text(encoding="utf-8"))
        pairs_file = round_dir / ROUND_PAIRS_FILE
        pairs = load_pairs(pairs_file) if pairs_file.is_file() else []
        return cls(
            int(data["index"]), int(data["step"]), int(data["prompts"]), int(data["labels"]),
            int(data["ties"]), int(data["by_rule"]), pairs, list(data["accuracy_before"]),
            int(data["rm_steps"]), float(data["seconds"]),
        )  # fmt: skip

    def line(self) -> str:
        acc = self.accuracy[0] if self.accuracy else {}
        langs = " ".join(f"{k} {v:.3f}" for k, v in acc.items() if k != "all")
        who = f"{len(self.accuracy)} members, first: " if len(self.accuracy) > 1 else ""
        return (
            f"[reward_model] round {self.index} at step {self.step}: {counted(self.prompts, 'prompt')}, "
            f"{counted(self.labels, 'label')} "
            f"({counted(self.ties, 'tie')}), {counted(self.by_rule, 'cut-vs-ended pair')} by rule -> "
            f"{counted(len(self.pairs), 'pair')} | RM accuracy "
            f"on them before learning ({who}the policy's drift): {acc.get('all', math.nan):.3f}"
            + (f" ({langs})" if langs else "")
            + f" | {self.rm_steps} RM steps, {self.seconds:.0f} s"
        )


def candidate_pairs(
    candidates: Sequence[Candidate], truncated_loses: bool
) -> list[tuple[int, int, int | None]]:
    """Every two candidates worth comparing, as (i, j, decided): decided is 1 / -1 when a rule
    already says i / j is better (a cut completion against one that ended, with truncated_loses),
    None when the labeler must say. Identical episodes and two cut completions are no pair."""
    out: list[tuple[int, int, int | None]] = []
    for i in range(len(candidates)):
        for j in range(i + 1, len(candidates)):
            a, b = candidates[i], candidates[j]
            if a.episode == b.episode:
                continue
            if truncated_loses and (a.truncated or b.truncated):
                if a.truncated and b.truncated:
                    continue
                out.append((i, j, -1 if a.truncated else 1))
            else:
                out.append((i, j, None))
    return out


def label_pairs(
    rows: Sequence[Any],
    candidates: Sequence[Sequence[Candidate]],
    labeler: Labeler,
    budget: int,
    truncated_loses: bool,
    round_index: int,
) -> tuple[list[PreferencePair], int, int, int]:
    """The labelled pairs of a round's rows: (pairs, labels spent, ties, decided by rule). Rows are
    visited in order, each row's pairs in turn, until `budget` labels are spent."""
    pairs: list[PreferencePair] = []
    labels = ties = by_rule = 0
    for row, cands in zip(rows, candidates, strict=True):
        for i, j, decided in candidate_pairs(cands, truncated_loses):
            if decided is None:
                if labels >= budget:
                    return pairs, labels, ties, by_rule
                labels += 1
                decided = labeler.prefer(row, cands[i].episode, cands[j].episode)
                if decided == 0:
                    ties += 1
                    continue
            else:
                by_rule += 1
            win, lose = (cands[i], cands[j]) if decided > 0 else (cands[j], cands[i])
            kind = REFERENCE_KIND if win.reference or lose.reference else POLICY_KIND
            pairs.append(
                PreferencePair(
                    prompt=[dict(m) for m in row.prompt],
                    chosen=[dict(m) for m in win.episode],
                    rejected=[dict(m) for m in lose.episode],
                    language=str(row.language),
                    meta={"source": f"round:{round_index}:{labeler.name}", CORRUPTION_KEY: kind},
                )
            )
    return pairs, labels, ties, by_rule


def mixed(old: Sequence[PreferencePair], new: Sequence[PreferencePair]) -> list[PreferencePair]:
    """A round's training data: the old pairs and the rounds' pairs repeated to about half of it."""
    if not new:
        return list(old)
    repeat = max(1, round(len(old) / len(new)))
    return [*old, *(list(new) * repeat)]


class PreferenceRounds:
    """The rounds of one GRPO run (see the module docstring). `learned` is the run's
    grpo.rewards.learned.LearnedReward (its members are trained in place)."""

    def __init__(
        self,
        settings: GrpoConfig,
        env: Any,
        learned: Any,
        run_dir: Path,
        labeler: Labeler,
        log_metrics: Callable[[Mapping[str, float], int], None] | None = None,
    ):
        from grpo.envs.base import reference_of

        self.settings = settings
        self.env = env
        self.learned = learned
        self.layout = RunLayout(run_dir)
        self.out = self.layout.rounds
        self.labeler = labeler
        # the row's reference episode joins its candidates (None: the env has none)
        self.reference = reference_of(env)
        self.log_metrics = log_metrics
        self.rounds = settings.reward_model.rounds
        self.reports: list[RoundReport] = []
        # per member: (its stage's training pairs, its held-out reference set)
        self.data = [self._member_data(scorer) for scorer in learned.scorers]
        self.new: list[PreferencePair] = []

    @staticmethod
    def _member_data(scorer: Any) -> tuple[list[PreferencePair], list[PreferencePair]]:
        root = Path(scorer.rm.path)
        train = load_pairs(root / TRAIN_PAIRS_FILE) if (root / TRAIN_PAIRS_FILE).is_file() else []
        heldout = load_pairs(root / HELDOUT_PAIRS_FILE) if (root / HELDOUT_PAIRS_FILE).is_file() else []
        return train, heldout

    def pairs_per_prompt(self) -> int:
        k = int(self.rounds.samples_per_prompt) + (1 if self.reference is not None else 0)
        return max(1, k * (k - 1) // 2)

    def sample_rows(self, index: int) -> list[Any]:
        rows = self.env.rows("train")
        n = min(len(rows), math.ceil(int(self.rounds.label_budget) / self.pairs_per_prompt()))
        return random.Random(f"rounds:{self.settings.seed}:{index}").sample(list(rows), n)

    def run(self, step: int, backend: Any) -> RoundReport:
        """One round with the policy behind `backend` (a generation backend), at GRPO step `step`."""
        from grpo.generation.base import Sampling
        from grpo.reward_model.train import PairScorer, continue_training
        from grpo.rollout import run_rollouts

        start = time.perf_counter()
        index = len(self.reports)
        s, t = self.settings, self.settings.trainer
        rows = self.sample_rows(index)
        sampling = Sampling(
            temperature=float(t.temperature),
            top_p=float(t.top_p),
            max_tokens_per_turn=s.generation.max_tokens_per_turn,
            seed=s.seed * 1000 + index,
        )
        k = int(self.rounds.samples_per_prompt)
        rollouts = run_rollouts(
            self.env, rows, backend, rollouts_per_row=k, sampling=sampling,
            max_completion_tokens=t.max_completion_length,
        )  # fmt: skip
        candidates = []
        for i, row in enumerate(rows):
            cands = [Candidate(list(r.completion), bool(r.truncated)) for r in rollouts[i * k : (i + 1) * k]]
            if self.reference is not None:
                cands.insert(0, Candidate(self.reference(row), reference=True))
            candidates.append(cands)
        pairs, labels, ties, by_rule = label_pairs(
            rows,
            candidates,
            self.labeler,
            int(self.rounds.label_budget),
            t.truncated_reward is not None,
            index,
        )
        accuracy = []
        for scorer in self.learned.scorers:
            meta = scorer.rm.meta
            judge = PairScorer(scorer.rm.model, scorer.encoder, meta.languages, meta.per_language_heads,
                               scorer.batch_size)  # fmt: skip
            known = [p for p in pairs if p.language in meta.languages]
            m = judge.metrics(known) if known else None
            accuracy.append({"all": m.overall_accuracy, **m.accuracy} if m else {})
        self.new.extend(pairs)
        rm_steps = 0
        lr = self.rounds.lr if self.rounds.lr is not None else s.reward_model.training.lr
        round_dir = self.layout.round(index)
        for i, scorer in enumerate(self.learned.scorers):
            train, heldout = self.data[i]
            meta = scorer.rm.meta
            ours = [p for p in self.new if p.language in meta.languages]
            if not ours:
                continue
            reference_set = heldout or ours
            model, calibration, rm_steps = continue_training(
                s, scorer.rm.model, scorer.rm.tokenizer, scorer.encoder, meta.languages, mixed(train, ours),
                reference_set, int(self.rounds.steps), float(lr), round_dir / f"member_{i}_trainer",
            )  # fmt: skip
            scorer.rm.model, scorer.rm.calibration = model, calibration
            self._save(scorer, round_dir / f"member_{i}", [*train, *ours], heldout)
        self.learned.changed()
        report = RoundReport(index, step, len(rows), labels, ties, by_rule, pairs, accuracy, rm_steps)
        report.seconds = time.perf_counter() - start
        round_dir.mkdir(parents=True, exist_ok=True)
        write_pairs(round_dir / ROUND_PAIRS_FILE, pairs)
        write_json_atomic(round_dir / ROUND_FILE, report.to_json())  # last: the round is complete
        self.reports.append(report)
        if self.log_metrics is not None:
            metrics = {
                "rm/round/labels": float(labels),
                "rm/round/ties": float(ties),
                "rm/round/pairs": float(len(pairs)),
            }
            for i, acc in enumerate(accuracy):
                tag = "" if len(accuracy) == 1 else f"member_{i}/"
                metrics.update(
                    {f"rm/round/{tag}acc" + ("" if k == "all" else f"/{k}"): v for k, v in acc.items()}
                )
            self.log_metrics(metrics, step)
        return report

    def resume(self, step: int, finished: Mapping[int, Path]) -> tuple[str, bool]:
        """Go on at GRPO step `step` of a resumed run from the rounds it had finished by then
        (`finished`: round index -> its dir along the resume chain, ResumePlan.rounds; rounds 0, 1,
        ... while their step is at most `step`: a round runs before its step's checkpoint is
        saved): their reports and labelled pairs carry on, and each member takes the weights and
        calibration the last of them left it. Returns the line that says so, and whether the round
        due by `step` (every reward_model.rounds.every steps) is missing and is to run now."""
        from grpo.reward_model.backbone import load_reward_model

        kept: list[tuple[Path, RoundReport]] = []
        while len(kept) in finished:
            folder = finished[len(kept)]
            try:
                report = RoundReport.read(folder)
            except (OSError, ValueError, TypeError, KeyError) as ex:
                from grpo.errors import UserError

                raise UserError(f"resume: cannot read the preference round {folder} ({ex})") from None
            if report.step > step:
                break
            kept.append((folder, report))
        self.reports = [report for _, report in kept]
        self.new = [pair for report in self.reports for pair in report.pairs]
        where = []
        for i, scorer in enumerate(self.learned.scorers):
            member = next(
                (
                    f / f"member_{i}"
                    for f, _ in reversed(kept)
                    if (f / f"member_{i}" / RM_META_FILE).is_file()
                ),
                None,
            )
            if member is None:
                continue  # no round had pairs in its languages: the stage's weights are its last
            loaded = load_reward_model(member, "resume", device=next(scorer.rm.model.parameters()).device)
            scorer.rm.model, scorer.rm.calibration, scorer.rm.path = (
                loaded.model,
                loaded.calibration,
                loaded.path,
            )
            where.append(member)
        self.learned.changed()
        every = int(self.rounds.every)
        due = not kept or kept[-1][1].step < (step // every) * every
        if kept:
            last = self.reports[-1]
            line = (
                f"[reward_model] resumed at step {step}: the RM goes on as preference round {last.index} "
                f"(step {last.step}) left it ({where[-1].parent if where else 'no member changed'}); "
                f"{counted(len(self.new), 'labelled pair')} of {counted(len(kept), 'round')} carried on"
            )
        else:
            line = (
                f"[reward_model] resumed at step {step}: the resumed run finished no preference round, so "
                "the RM goes on from the reward_model stage's weights"
            )
        return line + (f"; the round due by step {step} runs now" if due else ""), due

    @staticmethod
    def _save(
        scorer: Any, out: Path, train: Sequence[PreferencePair], heldout: Sequence[PreferencePair]
    ) -> None:
        import shutil

        from grpo.reward_model.backbone import save_reward_model

        rm = scorer.rm
        save_reward_model(rm.model, rm.tokenizer, rm.meta, rm.calibration, out)
        write_pairs(out / TRAIN_PAIRS_FILE, train)
        if heldout:
            write_pairs(out / HELDOUT_PAIRS_FILE, heldout)
        shutil.rmtree(out.parent / f"{out.name}_trainer", ignore_errors=True)
        rm.path = out

    def labels_used(self) -> int:
        return sum(r.labels for r in self.reports)

    def summary(self) -> dict[str, Any]:
        return {"rounds": [r.to_json() for r in self.reports], "labels": self.labels_used()}

    def write_summary(self) -> Path:
        """<run_dir>/reward_model_rounds/rounds.json: every round's report and the labels spent."""
        return write_json_atomic(self.out / "rounds.json", self.summary())
