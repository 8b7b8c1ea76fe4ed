"""The `reward_model` stage: Bradley-Terry training with TRL's RewardTrainer, then calibration.

    data (JSONL or synthetic) -> per-language train / held-out split -> backbone (+ tag tokens,
    + per-language heads) -> held-out accuracy at init -> RewardTrainer -> held-out accuracy and
    loss per language -> normalisation statistics on the held-out reference set -> save

How it meets TRL (trl 1.16 reward_trainer.py): the pairs are tokenized here, with the same
rendering the GRPO scorer uses (grpo/reward_model/scoring.py), and handed over as TRL's
"processed" format (`chosen_ids`, `rejected_ids`), so TRL neither re-renders nor re-truncates
them. TRL's collator puts the chosen sequences then the rejected ones in one batch and its loss is
-logsigmoid(r_chosen - r_rejected) (plus the optional center_rewards_coefficient term); our
collator adds each sequence's language head index for per-language heads.

Outputs, under the stage's dir (<run_dir>/reward_model): the HF model + tokenizer files,
rm_calibration.json, rm_metrics.json (held-out accuracy and loss per language, accuracy per
corruption kind and per language and kind, at init and after training), the train / held-out pairs
as JSONL (each keeping its `corruption` kind), and rm_meta.json written last. Tracker metrics:
rm/acc/<lang>, rm/acc, rm/loss/<lang>, rm/loss, rm/acc/kind/<kind>, rm/acc/<lang>/<kind> at step 0
(init) and at the last step;
rm/train/<TRL metric> every logging step (the end-of-training summary as rm/train/summary/<name>,
as GRPO and SFT name theirs). The returned RMResult carries the dir: a later train
stage of the same run scores with it when reward_model.checkpoints is empty (grpo/stages.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import CORRUPTIONS, GrpoConfig
from grpo.errors import UserError
from grpo.files import write_json_atomic
from grpo.reward_model.calibration import Calibration
from grpo.reward_model.data import (
    UNKNOWN_KIND,
    PreferencePair,
    languages_of,
    load_pairs,
    split_heldout,
    write_pairs,
)
from grpo.run.distributed import barrier, is_main, print_main
from grpo.run.layout import (
    HELDOUT_PAIRS_FILE,
    RM_CALIBRATION_FILE,
    RM_META_FILE,
    RM_METRICS_FILE,
    TRAIN_PAIRS_FILE,
    RunLayout,
)
from grpo.tracking.base import NullTracker, Tracker, best_effort
from grpo.trl_adapter.config import build_trl_config
from grpo.trl_adapter.internals import preference_collator
from grpo.trl_adapter.trainer import make_trainer, run_trainer

METRIC_PREFIX = "rm/"
# RewardConfig fields the stage decides (reward_model.training.extra may not override them)
_FIXED_ARGS = (
    "output_dir",
    "report_to",
    "save_strategy",
    "eval_strategy",
    "remove_unused_columns",
    "max_length",
)


@dataclass
class PairMetrics:
    """Pairwise accuracy and Bradley-Terry loss of a model on a set of pairs: per language, and
    accuracy per corruption kind of the rejected completion (PreferencePair.kind: a user's pairs
    without a `corruption` key count under "unknown") and per language and kind."""

    accuracy: dict[str, float]
    loss: dict[str, float]
    overall_accuracy: float
    overall_loss: float
    # {kind: accuracy}, kinds in CORRUPTIONS order, then others alphabetically, "unknown" last
    accuracy_by_kind: dict[str, float] = field(default_factory=dict)
    # {language: {kind: accuracy}}, only the kinds a language has pairs of
    accuracy_by_language_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    # pairs of each kind: how far one kind's accuracy can be trusted
    pairs_by_kind: dict[str, int] = field(default_factory=dict)
    # the scores behind them: chosen and rejected, in pair order (for calibration)
    chosen: list[float] = field(default_factory=list, repr=False)
    rejected: list[float] = field(default_factory=list, repr=False)

    def to_metrics(self, prefix: str = METRIC_PREFIX) -> dict[str, float]:
        out = {f"{prefix}acc": self.overall_accuracy, f"{prefix}loss": self.overall_loss}
        out.update({f"{prefix}acc/{lang}": v for lang, v in self.accuracy.items()})
        out.update({f"{prefix}loss/{lang}": v for lang, v in self.loss.items()})
        out.update({f"{prefix}acc/kind/{kind}": v for kind, v in self.accuracy_by_kind.items()})
        for lang, by_kind in self.accuracy_by_language_kind.items():
            out.update({f"{prefix}acc/{lang}/{kind}": v for kind, v in by_kind.items()})
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy,
            "loss": self.loss,
            "overall_accuracy": self.overall_accuracy,
            "overall_loss": self.overall_loss,
            "accuracy_by_kind": self.accuracy_by_kind,
            "accuracy_by_language_kind": self.accuracy_by_language_kind,
            "pairs_by_kind": self.pairs_by_kind,
        }


@dataclass
class RMResult:
    """What the reward_model stage leaves behind."""

    path: Path
    languages: list[str]
    # held-out pairwise accuracy / loss per language, before and after training
    initial: PairMetrics
    final: PairMetrics
    calibration: Calibration
    global_step: int
    num_train_pairs: int
    num_heldout_pairs: int
    seconds: float
    log_history: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def accuracy(self) -> dict[str, float]:
        return self.final.accuracy


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def _kind_order(kind: str) -> tuple[int, int, str]:
    """Sort key of corruption kinds: CORRUPTIONS order, then other kinds alphabetically, unknown last."""
    if kind in CORRUPTIONS:
        return (0, CORRUPTIONS.index(kind), "")
    return (2, 0, "") if kind == UNKNOWN_KIND else (1, 0, kind)


def _means(groups: dict[str, list[float]]) -> dict[str, float]:
    return {k: sum(v) / len(v) for k, v in groups.items()}


def pair_metrics(
    chosen: Sequence[float],
    rejected: Sequence[float],
    languages: Sequence[str],
    kinds: Sequence[str] | None = None,
) -> PairMetrics:
    """Accuracy (chosen scored strictly higher) and mean -logsigmoid(chosen - rejected), per
    language; accuracy per corruption kind and per (language, kind) too. `kinds`: each pair's
    PreferencePair.kind; None counts every pair as UNKNOWN_KIND."""
    kinds = [UNKNOWN_KIND] * len(languages) if kinds is None else kinds
    wins: dict[str, list[float]] = {}
    losses: dict[str, list[float]] = {}
    kind_wins: dict[str, list[float]] = {}
    cell_wins: dict[str, dict[str, list[float]]] = {}
    for c, r, lang, kind in zip(chosen, rejected, languages, kinds, strict=True):
        win = 1.0 if c > r else 0.0
        wins.setdefault(lang, []).append(win)
        losses.setdefault(lang, []).append(-_log_sigmoid(c - r))
        kind_wins.setdefault(kind, []).append(win)
        cell_wins.setdefault(lang, {}).setdefault(kind, []).append(win)
    all_wins = [w for ws in wins.values() for w in ws]
    all_losses = [v for vs in losses.values() for v in vs]
    by_kind = dict(sorted(kind_wins.items(), key=lambda item: _kind_order(item[0])))
    return PairMetrics(
        accuracy=_means(dict(sorted(wins.items()))),
        loss=_means(dict(sorted(losses.items()))),
        overall_accuracy=sum(all_wins) / len(all_wins) if all_wins else float("nan"),
        overall_loss=sum(all_losses) / len(all_losses) if all_losses else float("nan"),
        accuracy_by_kind=_means(by_kind),
        accuracy_by_language_kind={
            lang: _means(dict(sorted(cells.items(), key=lambda item: _kind_order(item[0]))))
            for lang, cells in sorted(cell_wins.items())
        },
        pairs_by_kind={kind: len(v) for kind, v in by_kind.items()},
        chosen=list(chosen),
        rejected=list(rejected),
    )


class PairScorer:
    """Scores both completions of pairs with an in-memory model (held-out accuracy, calibration)."""

    def __init__(
        self, model: Any, encoder: Any, languages: Sequence[str], per_language_heads: bool, batch_size: int
    ):
        self.model = model
        self.encoder = encoder
        self.heads = {lang: i for i, lang in enumerate(languages)} if per_language_heads else None
        self.batch_size = batch_size

    def score(
        self, prompts: Sequence[Any], completions: Sequence[Any], languages: Sequence[str]
    ) -> list[float]:
        from grpo.reward_model.scoring import score_ids

        ids = self.encoder.encode(prompts, completions, languages)
        heads = [self.heads[lang] for lang in languages] if self.heads is not None else None
        return score_ids(self.model, ids, self.encoder.tokenizer.pad_token_id, self.batch_size, heads)

    def metrics(self, pairs: Sequence[PreferencePair]) -> PairMetrics:
        prompts = [p.prompt for p in pairs] * 2
        completions = [p.chosen for p in pairs] + [p.rejected for p in pairs]
        languages = [p.language for p in pairs]
        scores = self.score(prompts, completions, languages * 2)
        return pair_metrics(scores[: len(pairs)], scores[len(pairs) :], languages, [p.kind for p in pairs])


def load_data(settings: GrpoConfig) -> list[PreferencePair]:
    """The stage's preference pairs: the JSONL file(s) of reward_model.data.path, else synthetic."""
    data = settings.reward_model.data
    if data.path:
        return load_pairs(data.path)
    from grpo.reward_model.synthetic import pairs_from_config

    return pairs_from_config(settings)


def reward_config(settings: GrpoConfig, output_dir: Path) -> Any:
    """trl.RewardConfig of the stage; TRL's own rejections become one-line UserErrors."""

    from trl import RewardConfig

    tr = settings.reward_model.training
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": tr.batch_size_pairs,
        "gradient_accumulation_steps": tr.gradient_accumulation_steps,
        "learning_rate": tr.lr,
        "num_train_epochs": tr.epochs,
        "max_steps": tr.max_steps,
        "weight_decay": tr.weight_decay,
        "warmup_steps": tr.warmup,
        "lr_scheduler_type": tr.lr_scheduler,
        "max_grad_norm": tr.max_grad_norm,
        "center_rewards_coefficient": tr.center_rewards_coefficient,
        "logging_steps": tr.logging_steps,
        "bf16": tr.bf16,
        # TRL turns gradient checkpointing on by default (transformers 5 name: activation_checkpointing)
        "activation_checkpointing": tr.activation_checkpointing,
        "seed": settings.reward_model.data.seed,
        "report_to": "none",  # the tracker gets metrics through our callback
        "save_strategy": "no",  # the stage saves the final model itself, with its calibration
        "eval_strategy": "no",  # held-out accuracy per language is computed by the stage
        "remove_unused_columns": False,  # keep language_id for per-language heads
        "max_length": None,  # sequences are already fitted to backbone.max_length
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": False,
        "train_sampling_strategy": "group_by_length",
        "length_column_name": "length",
    }
    fixed = sorted(k for k in tr.extra if k in _FIXED_ARGS)
    if fixed:
        raise UserError(f"reward_model.training.extra: {', '.join(fixed)} is set by the stage; remove it")
    kwargs.update(tr.extra)
    return build_trl_config(RewardConfig, kwargs, "reward_model.training", "reward_model.training.extra")


def _collator(pad_token_id: int, with_language: bool) -> Any:
    import torch

    base = preference_collator(pad_token_id)

    def collate(examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = base(examples)
        if with_language:
            heads = torch.tensor([int(e["language_id"]) for e in examples], dtype=torch.long)
            batch["language_ids"] = torch.cat([heads, heads])  # chosen rows first, then rejected
        return batch

    return collate


def _progress() -> Any:
    """A TrainerCallback printing one compact line per logging step: step, loss, accuracy, margin."""
    from transformers import TrainerCallback

    class RMProgress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs or not state.is_world_process_zero or not isinstance(logs.get("loss"), (int, float)):
                return
            parts = [f"step {state.global_step}/{state.max_steps}", f"loss {logs['loss']:.4f}"]
            for key, label in (("accuracy", "acc"), ("margin", "margin")):
                if isinstance(logs.get(key), (int, float)):
                    parts.append(f"{label} {logs[key]:.3f}")
            print("[reward_model] " + " | ".join(parts), flush=True)

    return RMProgress()


def _dataset(pairs: Sequence[PreferencePair], encoder: Any, heads: dict[str, int] | None) -> Any:
    from datasets import Dataset

    languages = [p.language for p in pairs]
    chosen = encoder.encode([p.prompt for p in pairs], [p.chosen for p in pairs], languages)
    rejected = encoder.encode([p.prompt for p in pairs], [p.rejected for p in pairs], languages)
    columns: dict[str, Any] = {
        "chosen_ids": chosen,
        "rejected_ids": rejected,
        # tokens of the pair: batches of similar length pad little (train_sampling_strategy below)
        "length": [len(c) + len(r) for c, r in zip(chosen, rejected, strict=True)],
    }
    if heads is not None:
        columns["language_id"] = [heads[lang] for lang in languages]
    return Dataset.from_dict(columns)


def _format_accuracy(metrics: PairMetrics) -> str:
    return ", ".join(f"{lang} {acc:.3f}" for lang, acc in metrics.accuracy.items())


def format_kind_table(metrics: PairMetrics) -> list[str]:
    """Accuracy per corruption kind as aligned text lines: a header of kinds, the row "all", one
    row per language ("-" where a language has no pair of a kind), and the pairs of each kind."""
    kinds = list(metrics.accuracy_by_kind)
    rows = [("all", metrics.accuracy_by_kind, metrics.overall_accuracy)]
    rows += [
        (lang, metrics.accuracy_by_language_kind.get(lang, {}), metrics.accuracy[lang])
        for lang in metrics.accuracy
    ]
    first = max(len("pairs"), *(len(name) for name, _, _ in rows))
    widths = [max(5, len(kind)) for kind in kinds]

    def line(name: str, cells: Sequence[str], total: str) -> str:
        body = " ".join(cell.rjust(w) for cell, w in zip(cells, widths, strict=True))
        return f"{name.ljust(first)} {body} {total.rjust(5)}"

    lines = [line("", kinds, "all")]
    for name, by_kind, total in rows:
        lines.append(
            line(name, [f"{by_kind[k]:.3f}" if k in by_kind else "-" for k in kinds], f"{total:.3f}")
        )
    lines.append(
        line(
            "pairs", [str(metrics.pairs_by_kind[k]) for k in kinds], str(sum(metrics.pairs_by_kind.values()))
        )
    )
    return lines


def train_reward_model(
    settings: GrpoConfig,
    out_dir: str | os.PathLike[str],
    tracker: Tracker | None = None,
    resume_from: Path | None = None,
    callbacks: Sequence[Any] = (),
) -> RMResult:
    """Train the run's reward model into `out_dir` (see the module docstring); returns its metrics.
    `resume_from`: a checkpoint of an interrupted run's reward_model stage to continue from (Ctrl-C
    / SIGTERM stop the stage at a step boundary with one, in <run_dir>/reward_model_checkpoints).
    `tracker`: where its metrics and small files go. `callbacks`: extra transformers
    TrainerCallbacks (e.g. a step timer)."""
    tracker = tracker or NullTracker()
    out = Path(out_dir)
    start = time.perf_counter()
    train_pairs, heldout, languages = _split(settings, out)  # data errors before any model is built
    model, tokenizer, encoder = _backbone(settings, languages, train_pairs)
    rm = settings.reward_model
    per_language = rm.conditioning.per_language_heads
    scorer = PairScorer(model, encoder, languages, per_language, rm.training.score_batch_size)
    initial = scorer.metrics(heldout)
    print_main(
        f"[reward_model] {len(train_pairs)} train / {len(heldout)} held-out pairs in {', '.join(languages)} | "
        f"backbone {rm.backbone.name} ({rm.backbone.source}) | tag {bool(rm.conditioning.tag_token)}, "
        f"per-language heads {per_language} | held-out accuracy at init: {_format_accuracy(initial)}",
        flush=True,
    )
    with best_effort("reward_model", "metrics"):
        tracker.log_metrics(initial.to_metrics(), 0)

    from trl import RewardTrainer

    checkpoints = RunLayout(out.parent).stage_checkpoints("reward_model")
    heads = {lang: i for i, lang in enumerate(languages)} if per_language else None
    trainer = make_trainer(
        RewardTrainer,
        "reward_model",
        [_progress(), tracker.trainer_callback(f"{METRIC_PREFIX}train/"), *callbacks],
        model=model,
        args=reward_config(settings, checkpoints),
        train_dataset=_dataset(train_pairs, encoder, heads),
        processing_class=tokenizer,
        data_collator=_collator(tokenizer.pad_token_id, per_language),
    )
    run_trainer(trainer, "reward_model", resume_from)
    with contextlib.suppress(OSError):
        checkpoints.rmdir()  # save_strategy=no: only an interrupted stage leaves a checkpoint there

    scorer.model = trainer.model
    final = scorer.metrics(heldout)
    result = RMResult(
        path=out,
        languages=list(languages),
        initial=initial,
        final=final,
        # the reference set: both completions of every held-out pair
        calibration=Calibration.fit(final.chosen + final.rejected, [p.language for p in heldout] * 2),
        global_step=int(trainer.state.global_step),
        num_train_pairs=len(train_pairs),
        num_heldout_pairs=len(heldout),
        seconds=time.perf_counter() - start,
        log_history=list(trainer.state.log_history),
    )
    _save(settings, result, trainer.model, tokenizer, encoder.tag_at_end, tracker)
    print_main(
        f"[reward_model] {result.global_step} steps in {result.seconds:.1f} s | held-out accuracy "
        f"{final.overall_accuracy:.3f} ({_format_accuracy(final)}), loss {final.overall_loss:.4f} | saved to {out}",
        flush=True,
    )
    # which corruptions the RM has learned to see; one row per language
    print_main(
        "\n".join(
            ["[reward_model] held-out accuracy by corruption kind:"]
            + [f"[reward_model]   {row}" for row in format_kind_table(final)]
        ),
        flush=True,
    )
    return result


def continue_training(
    settings: GrpoConfig,
    model: Any,
    tokenizer: Any,
    encoder: Any,
    languages: Sequence[str],
    pairs: Sequence[PreferencePair],
    reference: Sequence[PreferencePair],
    steps: int,
    lr: float,
    work_dir: Path,
) -> tuple[Any, Calibration, int]:
    """Go on training a loaded reward model from its current weights (a preference round, grpo/
    reward_model/rounds.py): `steps` optimizer steps of TRL's RewardTrainer at `lr` (no warmup) over
    `pairs`, then the calibration refitted on `reference` (the held-out pairs: both completions).
    Returns (the trained model in eval mode, its calibration, the steps taken)."""
    from trl import RewardTrainer

    rm = settings.reward_model
    per_language = rm.conditioning.per_language_heads
    heads = {lang: i for i, lang in enumerate(languages)} if per_language else None
    tuned = dataclasses.replace(settings.reward_model.training, max_steps=int(steps), lr=float(lr), warmup=0)
    run = dataclasses.replace(settings, reward_model=dataclasses.replace(rm, training=tuned))
    trainer = make_trainer(
        RewardTrainer,
        "reward_model",
        [],
        model=model,
        args=reward_config(run, work_dir),
        train_dataset=_dataset(pairs, encoder, heads),
        processing_class=tokenizer,
        data_collator=_collator(tokenizer.pad_token_id, per_language),
    )
    trainer.train()
    model = trainer.model.eval()
    scorer = PairScorer(model, encoder, languages, per_language, rm.training.score_batch_size)
    metrics = scorer.metrics(reference)
    calibration = Calibration.fit(metrics.chosen + metrics.rejected, [p.language for p in reference] * 2)
    return model, calibration, int(trainer.state.global_step)


def _split(settings: GrpoConfig, out: Path) -> tuple[list[PreferencePair], list[PreferencePair], list[str]]:
    """The stage's pairs split per language into train and held-out (both written under `out`),
    and their languages; a language without pairs on both sides is a UserError."""
    data = settings.reward_model.data
    pairs = load_data(settings)
    train_pairs, heldout = split_heldout(pairs, data.heldout_fraction, data.seed)
    languages = languages_of(pairs)
    missing = sorted(set(languages) - set(languages_of(heldout)))
    if missing:
        raise UserError(
            f"reward_model.data: language(s) {', '.join(missing)} have fewer than 2 pairs: every language needs "
            "training and held-out pairs"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_pairs(out / TRAIN_PAIRS_FILE, train_pairs)
    write_pairs(out / HELDOUT_PAIRS_FILE, heldout)
    return train_pairs, heldout, languages


def _backbone(settings: GrpoConfig, languages: list[str], train_pairs: Sequence[PreferencePair]) -> tuple:
    """(model, tokenizer, encoder): the backbone with the run's language conditioning, and the
    encoder rendering pairs as the GRPO scorer will (grpo/reward_model/scoring.py)."""
    from grpo.reward_model.backbone import build_backbone
    from grpo.reward_model.scoring import SequenceEncoder

    rm = settings.reward_model
    cond = rm.conditioning
    model, tokenizer = build_backbone(
        rm.backbone, languages, cond.tag_token, cond.per_language_heads, train_pairs=train_pairs
    )
    encoder = SequenceEncoder(tokenizer, rm.backbone.max_length, cond.tag_token, tag_at_end=True)
    return model, tokenizer, encoder


def _save(
    settings: GrpoConfig, result: RMResult, model: Any, tokenizer: Any, tag_at_end: bool, tracker: Tracker
) -> None:
    """rm_metrics.json, then the model dir (rm_meta.json last) by rank 0, then the tracker's copy
    of the metrics and small files."""
    from grpo.reward_model.backbone import RMMeta, save_reward_model

    rm, out = settings.reward_model, result.path
    report = {
        "languages": result.languages,
        "num_train_pairs": result.num_train_pairs,
        "num_heldout_pairs": result.num_heldout_pairs,
        "global_step": result.global_step,
        "seconds": result.seconds,
        "initial": result.initial.to_json(),
        "final": result.final.to_json(),
    }
    write_json_atomic(out / RM_METRICS_FILE, report)
    meta = RMMeta(
        languages=list(result.languages),
        tag_token=rm.conditioning.tag_token,
        per_language_heads=rm.conditioning.per_language_heads,
        max_length=rm.backbone.max_length,
        tag_at_end=tag_at_end,
        backbone={"name": rm.backbone.name, "source": rm.backbone.source, "path": rm.backbone.path},
    )
    if is_main():  # one writer; every rank holds the same trained weights
        save_reward_model(model, tokenizer, meta, result.calibration, out)
    barrier()  # a later train stage on any rank loads it
    with best_effort("reward_model", "metrics"):
        tracker.log_metrics(result.final.to_metrics(), result.global_step)
    with best_effort("reward_model", "its files"):
        for name in (RM_METRICS_FILE, RM_CALIBRATION_FILE, RM_META_FILE):  # the small files; not the weights
            tracker.log_artifact(out / name, "reward_model")
        tracker.log_tags({"grpo.reward_model.path": str(out.resolve())})
