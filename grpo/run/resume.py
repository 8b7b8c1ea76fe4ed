"""`resume=<run dir>`: the resumed run's own settings, with only the overrides that extend or observe it.

    cfg = resumed_config(cfg, overrides, groups)   # composed from the command line, its task overrides

The base is the resumed run's composed config, `<run dir>/.hydra/config.yaml` (Hydra writes it;
`python -m grpo` rewrites it with these effective settings, so a resume of a resume starts from
what actually ran). Each command-line override then:
- is dropped when it restates the saved value (the original command line repeated);
- applies when its key only extends or observes the run (RESUMABLE_KEYS: trainer.max_steps,
  logging, saving and validation settings, eval.*, tracking.*, stages, output_root);
- is refused otherwise (lr, beta, loss, batch geometry, env, model, seed, ...): one UserError lists
  every difference as `key: saved -> new`, unless resume_force=true, which applies value
  overrides anyway. A config group choice (model=..., +env=...) that differs is always refused:
  the checkpoints belong to the saved model and env.

Stages on resume (grpo/stages.py): a run resumes the stage it was interrupted in and skips the
ones it finished. What a stage left behind is looked up along the resume chain (`resume_chain`:
the resumed dir, the dir that one resumed, ...), since a resumed run writes only what it redoes:
- reward_model / sft: their finished dir (reward_model/, sft/) is reused; else their latest
  complete checkpoint (reward_model_checkpoints/, sft_checkpoints/, written on interruption)
  continues; else the stage runs from the start;
- the baseline eval is skipped when the chain has eval_baseline/ (the MLflow run has it);
- train continues from the chain's latest complete GRPO checkpoint, or starts at step 0.

A run dir without .hydra/config.yaml (a run made by calling `train()` from Python) keeps the
command line's config, as before. Light module: omegaconf and Hydra's override parser only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError

# keys (and key prefixes, before a dot) a resume may change without resume_force
RESUMABLE_KEYS = (
    "resume",
    "resume_force",
    "stages",
    "output_root",
    "trainer.max_steps",
    "trainer.logging_steps",
    "trainer.save_steps",
    "trainer.save_total_limit",
    "trainer.log_completions",
    "trainer.eval_steps",
    "trainer.val_num_examples",
    "trainer.val_rollouts_per_example",
    "trainer.keep_best",
    "eval",
    "tracking",
)
SAVED_CONFIG = Path(".hydra") / "config.yaml"
SAVED_HYDRA = Path(".hydra") / "hydra.yaml"


def is_resumable_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)


def saved_config_path(run_dir: str | Path) -> Path:
    return Path(run_dir).expanduser() / SAVED_CONFIG


def resumed_config(cfg: Any, overrides: list[str], groups: set[str]) -> Any:
    """The config a resume runs with (see the module docstring); `cfg` unchanged when it does not
    resume or the resumed dir has no saved config. `groups`: the config group names (model, env,
    ...), to tell a group choice from a value override."""
    from omegaconf import OmegaConf

    resume = cfg.get("resume")
    if not resume:
        return cfg
    root = Path(str(resume)).expanduser()
    if not root.is_dir():
        raise UserError(
            f"resume={resume}: no such directory; pass a previous run's output dir (outputs/runs/...)"
        )
    saved_file = root / SAVED_CONFIG
    if not saved_file.is_file():
        return cfg
    try:
        saved = OmegaConf.load(saved_file)
        choices = _saved_choices(root)
    except Exception as ex:  # noqa: BLE001 - an unreadable file is the user's to fix, in one line
        raise UserError(f"resume={resume}: cannot read {saved_file}: {' '.join(str(ex).split())}") from None
    base = OmegaConf.merge(OmegaConf.structured(GrpoConfig), saved)
    force = bool(cfg.get("resume_force"))
    refused, applied = [], []
    for key, value, is_group in _parse(overrides, groups):
        if is_group:
            before = choices.get(key.lstrip("+~"))
            if before is not None and before != value:
                raise UserError(
                    f"resume={resume}: {key}={value} changes the config group {key.lstrip('+~')} "
                    f"(the resumed run used {before}); a resumed run keeps its groups: start a new run instead"
                )
            continue
        before = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
        if OmegaConf.is_config(before):
            before = OmegaConf.to_container(before, resolve=True)
        if _same(before, value):
            continue
        if is_resumable_key(key) or force:
            applied.append((key, value))
        else:
            refused.append(f"{key}: {before} -> {value}")
    if refused and not force:
        raise UserError(
            f"resume={resume} keeps the resumed run's settings; these overrides would change its optimisation "
            f"or data: {'; '.join(refused)} (drop them, or add resume_force=true to apply them anyway)"
        )
    for key, value in applied:
        OmegaConf.update(base, key, value, merge=False, force_add=True)
    OmegaConf.update(base, "resume", str(resume), force_add=True)
    OmegaConf.update(base, "resume_force", force, force_add=True)
    return base


def _saved_choices(root: Path) -> dict[str, str]:
    """The config group choices of the resumed run (hydra.runtime.choices), {} without hydra.yaml."""
    from omegaconf import OmegaConf

    path = root / SAVED_HYDRA
    if not path.is_file():
        return {}
    choices = OmegaConf.select(OmegaConf.load(path), "hydra.runtime.choices", default=None)
    return {str(k): str(v) for k, v in (choices or {}).items()}


def _parse(overrides: list[str], groups: set[str]) -> list[tuple[str, Any, bool]]:
    """(key, value, is a group choice) of each override; Hydra's own (hydra.*) are skipped."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group
        if key.startswith("hydra") or key in ("resume", "resume_force"):
            continue
        if o.is_sweep_override():
            raise UserError(f"resume: {o.input_line} is a sweep; resume one run at a time")
        if key in groups or "/" in key:
            out.append((key, o.value(), True))
        else:
            out.append((key, None if o.is_delete() else o.value(), False))
    return out


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, bool) or isinstance(after, bool):
        return before is after or before == after
    if isinstance(before, int | float) and isinstance(after, int | float):
        return float(before) == float(after)
    return before == after


# how many resumes deep a chain is followed (a guard against a dir that names itself)
MAX_CHAIN = 100


def resume_chain(run_dir: str | Path) -> list[Path]:
    """`run_dir`, the run it resumed (its saved config's `resume`), that run's, ... (existing dirs)."""
    from omegaconf import OmegaConf

    chain: list[Path] = []
    current: Path | None = Path(run_dir).expanduser().resolve()
    while current is not None and current.is_dir() and current not in chain and len(chain) < MAX_CHAIN:
        chain.append(current)
        saved = current / SAVED_CONFIG
        try:
            resumed = (
                OmegaConf.select(OmegaConf.load(saved), "resume", default=None) if saved.is_file() else None
            )
        except Exception:  # noqa: BLE001 - an unreadable config ends the chain
            resumed = None
        current = Path(str(resumed)).expanduser().resolve() if resumed else None
    return chain


def done_in_chain(run_dir: str | Path, relative: str) -> Path | None:
    """The first `<dir>/<relative>` that exists along the resume chain of `run_dir`."""
    return next((d / relative for d in resume_chain(run_dir) if (d / relative).exists()), None)


def checkpoint_in_chain(run_dir: str | Path, stage: str) -> Path | None:
    """The latest complete checkpoint of `stage` (train, sft, reward_model) along the chain."""
    from grpo.run.checkpoints import STAGE_CHECKPOINT_DIRS, latest_complete

    for d in resume_chain(run_dir):
        found = latest_complete(d / STAGE_CHECKPOINT_DIRS[stage])
        if found is not None:
            return found
    return None


def resumable(run_dir: str | Path) -> bool:
    """Whether `resume=<run_dir>` has anything to continue from: a finished SFT or reward model, or
    a complete checkpoint of any training stage, along the chain."""
    from grpo.run.checkpoints import STAGE_CHECKPOINT_DIRS

    finished = ("sft/sft_meta.json", "reward_model/rm_meta.json")
    return any(done_in_chain(run_dir, f) for f in finished) or any(
        checkpoint_in_chain(run_dir, stage) for stage in STAGE_CHECKPOINT_DIRS
    )
