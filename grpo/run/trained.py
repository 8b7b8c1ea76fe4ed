"""model.path=<a grpo run folder>: the checkpoint of a trained run that an evaluation loads.

    python -m grpo +env=alphabet_sort stages=[eval] model.path=outputs/runs/<day>/<time>
    ... model.checkpoint=best      # the best checkpoint by validation reward (trainer.keep_best)

A run folder (it holds .hydra/config.yaml, grpo/run/layout.py) given as model.path is evaluated at
its final checkpoint (the latest complete one under checkpoints/: a run saves one at its end) or,
with model.checkpoint=best, at the best one it recorded (grpo/run/checkpoints.py). A checkpoint-N
dir of a run's checkpoints/ is taken as it is. The model settings then load that checkpoint: a
full one as a pretrained dir; a LoRA run's (adapter weights only) as the run's own base weights
(its saved model settings, or its sft/ model when the run trained one) with model.adapter set.

`resolve_trained_model` runs once, in the preflight, before anything heavy is imported; a run
folder without the checkpoint asked for is a UserError (one line). Light: standard library,
OmegaConf, and the light run modules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from grpo.config import GrpoConfig, ModelConfig
from grpo.errors import UserError
from grpo.run.checkpoints import best_checkpoint, checkpoint_step, checkpoints_of, latest_complete
from grpo.run.layout import SFT_META_FILE, RunLayout

CHECKPOINT_CHOICES = ("final", "best")
# in a checkpoint of a LoRA run: the adapter, without the base model's config.json
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class TrainedModel:
    """A run's checkpoint that model.path named (`given`), and the model settings that load it."""

    given: str
    which: str
    run_dir: Path
    checkpoint: Path
    step: int
    model: ModelConfig

    def line(self, verb: str = "evaluating") -> str:
        """The one line saying what is evaluated (`verb`: what is done with it, e.g. "serving")."""
        where = (
            self.checkpoint.relative_to(self.run_dir)
            if self.checkpoint.is_relative_to(self.run_dir)
            else self.checkpoint
        )
        lora = ", a LoRA adapter on the run's base model" if self.model.adapter else ""
        if Path(self.given).expanduser().resolve() == self.checkpoint:
            return (
                f"model.path={self.given}: checkpoint of the grpo run {self.run_dir} (step {self.step}{lora})"
            )
        return (
            f"model.path={self.given}: a grpo run folder; {verb} its {self.which} checkpoint {where} "
            f"(step {self.step}{lora})"
        )


def is_run_folder(path: Path) -> bool:
    """A grpo run's output folder: it holds the run's saved config."""
    return RunLayout(path).saved_config.is_file()


def resolve_trained_model(
    settings: GrpoConfig, known: TrainedModel | None = None
) -> tuple[GrpoConfig, TrainedModel | None]:
    """`settings` with model.* loading the run checkpoint model.path names, and what was picked;
    unchanged settings and None when model.path is not a run folder or one of its checkpoints.
    `known`: an earlier resolution of the same model.path (the preflight's), reused as it is."""
    m = settings.model
    if m.checkpoint not in CHECKPOINT_CHOICES:
        raise UserError(f"model.checkpoint={m.checkpoint} is not one of {', '.join(CHECKPOINT_CHOICES)}")
    if known is not None and (known.given, known.which) == (m.path, m.checkpoint):
        return dataclasses.replace(settings, model=known.model), known
    trained = _trained(m, settings.generation.backend)
    if trained is None:
        return settings, None
    return dataclasses.replace(settings, model=trained.model), trained


def _trained(m: ModelConfig, backend: str) -> TrainedModel | None:
    path = Path(str(m.path)).expanduser() if m.path else None
    if path is not None and is_run_folder(path):
        run_dir = path.resolve()
        checkpoint, step = _pick(m, run_dir)
    elif (
        path is not None and checkpoint_step(path) is not None and is_run_folder(path.resolve().parent.parent)
    ):
        checkpoint, step = path.resolve(), checkpoint_step(path) or 0
        run_dir = checkpoint.parent.parent
    else:
        if m.checkpoint != "final":
            raise UserError(
                f"model.checkpoint={m.checkpoint} picks a checkpoint of a trained run: set model.path to the "
                f"run's folder (outputs/runs/<day>/<time>), not {m.path}"
            )
        return None
    if is_adapter(checkpoint):
        if backend != "hf":
            raise UserError(
                f"model.path={m.path}: a LoRA run's checkpoint (adapter weights) is evaluated with generation=hf, "
                f"not generation={backend} (which would serve the base weights alone)"
            )
        layout = RunLayout(run_dir)
        sft_dir = layout.sft if (layout.sft / SFT_META_FILE).is_file() else None
        model = dataclasses.replace(
            checkpoint_model(saved_model(run_dir), checkpoint, sft_dir), checkpoint=m.checkpoint
        )
    else:
        model = checkpoint_model(m, checkpoint)
    return TrainedModel(str(m.path), m.checkpoint, run_dir, checkpoint, step, model)


def _pick(m: ModelConfig, run_dir: Path) -> tuple[Path, int]:
    """The checkpoint model.checkpoint asks for, and its step."""
    if m.checkpoint == "best":
        best = best_checkpoint(run_dir)
        if best is None:
            raise UserError(
                f"model.path={m.path} model.checkpoint=best: the run recorded no best checkpoint (or it is gone); "
                "a run records one with trainer.keep_best=true and trainer.eval_steps=N; use model.checkpoint=final"
            )
        return best.path.resolve(), best.global_step
    latest = latest_complete(run_dir)
    if latest is None:
        skipped = len(checkpoints_of(run_dir))
        raise UserError(
            f"model.path={m.path}: a grpo run folder with no complete checkpoint under checkpoints/"
            + (f" ({skipped} incomplete)" if skipped else "")
            + "; a run writes one every trainer.save_steps steps and at the end of training"
        )
    return latest.resolve(), checkpoint_step(latest) or 0


def saved_model(run_dir: Path) -> ModelConfig:
    """The model settings a run ran with (its saved config); a damaged or foreign one is a
    UserError (one line)."""
    from omegaconf import OmegaConf

    from grpo.files import register_resolvers

    layout = RunLayout(run_dir)
    register_resolvers()  # a saved model.path may be ${grpo_asset:...}
    try:
        saved = OmegaConf.load(layout.saved_config)
        node = OmegaConf.to_container(saved.model, resolve=True)
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), node))
    except Exception as ex:  # noqa: BLE001 - a damaged or foreign config: said in one line
        raise UserError(f"{layout.saved_config}: cannot read the run's model settings ({ex})") from None


def example_prompt(run_dir: Path) -> list[dict] | None:
    """A prompt of the run's env, as the run saw it: the first row of one of its evaluations
    (results.jsonl of eval_baseline/, eval/, eval_final/, then a validation's); None when the run
    evaluated nothing or the file is unreadable."""
    import json

    from grpo.run.layout import RESULTS_FILE

    root = Path(run_dir)
    candidates = [root / name / RESULTS_FILE for name in ("eval_baseline", "eval", "eval_final")]
    candidates += sorted(root.glob(f"val/*/{RESULTS_FILE}"))
    for path in candidates:
        try:
            with path.open(encoding="utf-8") as f:
                prompt = json.loads(f.readline()).get("prompt")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
            return prompt
    return None


def is_adapter(checkpoint: Path) -> bool:
    """A LoRA run's checkpoint: adapter weights, without the base model's config.json."""
    return (checkpoint / ADAPTER_CONFIG).is_file() and not (checkpoint / "config.json").is_file()


def checkpoint_model(m: ModelConfig, checkpoint: Path, sft_dir: Path | None = None) -> ModelConfig:
    """`m` set to load `checkpoint` of a run, as a fresh process loads it (and the run's own
    evaluation of its best checkpoint): a full checkpoint as a pretrained dir (tokenizer included);
    a LoRA one as model.adapter on the weights the run trained it on, which for a LoRA checkpoint
    `m` must name (the run's model settings): their own (random weights are rebuilt from their
    seed), or `sft_dir` when the run's SFT stage trained them."""
    if not is_adapter(checkpoint):
        return dataclasses.replace(m, source="pretrained", path=str(checkpoint), tokenizer=None, adapter=None)
    if sft_dir is not None:
        m = dataclasses.replace(m, source="pretrained", path=str(sft_dir), tokenizer=None)
    return dataclasses.replace(m, lora=dataclasses.replace(m.lora, enabled=False), adapter=str(checkpoint))
