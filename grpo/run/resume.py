"""`resume=<run dir>`: what the resumed run left, read once, and the settings the resume runs with.

    plan = ResumePlan.read(resume)                       # once per process: the chain, its files
    cfg, plan = plan.apply(cfg, overrides, groups)       # the resumed run's settings (+ what was forced)
    plan.finished["sft"], plan.checkpoints.get("train")  # what the stages continue from

The plan: the resumed run folder, its resume chain (the folder, the run it resumed, that run's, ...:
a resumed run writes only what it redoes, so what a stage left is looked up along the chain), the
resumed run's saved settings and config group choices, and per stage what is done:
- reward_model / sft: their finished model dir (reward_model/, sft/) is reused; else their latest
  complete checkpoint (reward_model_checkpoints/, sft_checkpoints/, written on interruption)
  continues; else the stage runs from the start;
- the baseline eval is skipped when the chain has eval_baseline/ (the MLflow run has it);
- train continues from the chain's latest complete GRPO checkpoint, or starts at step 0; its
  preference rounds (reward_model.rounds) are looked up along the chain too: the newest run's
  round K wins, and the rounds then continue from those the checkpoint's step had seen.
It is read from disk once, by the process's entry (grpo/__main__.py, or grpo.compose for an API
caller), and handed to the checks and the stages: nothing else walks the chain or re-reads a saved
config.

The settings (`apply`): the base is the resumed run's composed config, `<run dir>/.hydra/config.yaml`
(Hydra writes it; `python -m grpo` rewrites it with the effective settings, so a resume of a resume
starts from what actually ran). Each command-line override then:
- is dropped when it restates the saved value (the original command line repeated);
- applies when its key only extends or observes the run (RESUMABLE_KEYS: trainer.max_steps,
  logging, saving and validation settings, eval.*, tracking.*, stages, output_root);
- is refused otherwise (lr, beta, loss, batch geometry, env, model, seed, ...): one UserError lists
  every difference as `key: saved -> new`, unless resume_force=true, which applies value
  overrides anyway and records them in `plan.forced` (the train stage warns that the run then does
  not continue exactly). A config group choice (model=..., +env=...) that differs is always
  refused: the checkpoints belong to the saved model and env.

A run dir without .hydra/config.yaml (a run made by calling `train()` from Python, or a deleted
file) keeps the command line's config, and `read` says so in one warning line: its settings cannot
be checked against the resumed run's. Light module: omegaconf and Hydra's override parser only.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError
from grpo.run.checkpoints import checkpoint_problem, checkpoint_step, checkpoints_of, latest_complete
from grpo.run.layout import STAGE_CHECKPOINT_DIRS, RunLayout

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
    # the memory plan observes the run; an OOM'd run resumes with another device's plan
    "memory",
)
# how many resumes deep a chain is followed (a guard against a dir that names itself)
MAX_CHAIN = 100


def is_resumable_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)


@dataclass(frozen=True)
class ResumePlan:
    """What `resume=<source>` continues from (see the module docstring)."""

    # the resumed run folder, and the chain of folders it continues (itself first)
    source: Path
    chain: tuple[Path, ...]
    # its saved config (.hydra/config.yaml; None without one) and config group choices
    saved: Any = None
    choices: dict[str, str] = field(default_factory=dict)
    # finished stage -> what it left along the chain: "reward_model" / "sft" (the model dir),
    # "baseline" (the baseline evaluation's dir)
    finished: dict[str, Path] = field(default_factory=dict)
    # training stage (train, sft, reward_model) -> its latest complete checkpoint along the chain
    checkpoints: dict[str, Path] = field(default_factory=dict)
    # resume_force=true: the settings changed against the saved ones, as `key: saved -> new`
    forced: tuple[str, ...] = ()
    # preference round index -> its complete dir along the chain (reward_model_rounds/round_K)
    rounds: dict[int, Path] = field(default_factory=dict)

    @classmethod
    def read(cls, resume: str | os.PathLike[str]) -> ResumePlan:
        """Walk the chain of `resume` and look up what each stage left (one-line UserError when
        `resume` is no folder or its saved config cannot be read)."""
        root = Path(resume).expanduser()
        if not root.is_dir():
            raise UserError(
                f"resume={resume}: no such directory; pass a previous run's output dir (outputs/runs/...)"
            )
        saved_file = RunLayout(root).saved_config
        saved = None
        if saved_file.is_file():
            try:
                saved = _load(saved_file)
                choices = _saved_choices(root)
            except Exception as ex:  # noqa: BLE001 - an unreadable file is the user's to fix, in one line
                raise UserError(
                    f"resume={resume}: cannot read {saved_file}: {' '.join(str(ex).split())}"
                ) from None
        else:
            choices = {}
        chain = _chain(root.resolve(), saved)
        finished: dict[str, Path] = {}
        checkpoints: dict[str, Path] = {}
        rounds: dict[int, Path] = {}
        for folder in map(RunLayout, chain):  # the newest run first: what it left wins
            for index, round_dir in folder.complete_rounds().items():
                rounds.setdefault(index, round_dir)
            for stage, mark in folder.finished_marks().items():
                if stage not in finished and mark.exists():
                    finished[stage] = mark.parent
            for stage in STAGE_CHECKPOINT_DIRS:
                latest = None if stage in checkpoints else latest_complete(folder.stage_checkpoints(stage))
                if latest is not None:
                    checkpoints[stage] = latest
                    _say_skipped(folder.stage_checkpoints(stage), latest)
        plan = cls(root, chain, saved, choices, finished, checkpoints, rounds=rounds)
        if saved is None and plan.resumable:
            print(
                f"warning: resume={resume}: {saved_file} is missing (a run started from Python, or the file "
                "was removed), so the resume runs with the command line's settings and cannot check them "
                "against the resumed run's",
                file=sys.stderr,
            )
        return plan

    @property
    def resumable(self) -> bool:
        """Whether the chain has anything to continue from: a finished SFT or reward model, or a
        complete checkpoint of a training stage."""
        return bool(self.checkpoints) or "sft" in self.finished or "reward_model" in self.finished

    def apply(self, cfg: Any, overrides: list[str], groups: set[str]) -> tuple[Any, ResumePlan]:
        """The config the resume runs with (see the module docstring), and this plan with the
        forced changes; `cfg` (composed from the command line, `overrides` its task overrides) as
        it is when the resumed dir has no saved config. `groups`: the config group names (model,
        env, ...), to tell a group choice from a value override."""
        from omegaconf import OmegaConf

        resume = cfg.get("resume")
        if self.saved is None:
            return cfg, self
        base = OmegaConf.merge(OmegaConf.structured(GrpoConfig), self.saved)
        force = bool(cfg.get("resume_force"))
        refused, applied = [], []
        for key, value, is_group in _parse(overrides, groups):
            if is_group:
                before = self.choices.get(key.lstrip("+~"))
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
            if not is_resumable_key(key):
                refused.append(f"{key}: {before} -> {value}")
            if is_resumable_key(key) or force:
                applied.append((key, value))
        if refused and not force:
            raise UserError(
                f"resume={resume} keeps the resumed run's settings; these overrides would change its optimisation "
                f"or data: {'; '.join(refused)} (drop them, or add resume_force=true to apply them anyway)"
            )
        for key, value in applied:
            OmegaConf.update(base, key, value, merge=False, force_add=True)
        OmegaConf.update(base, "resume", str(resume), force_add=True)
        OmegaConf.update(base, "resume_force", force, force_add=True)
        return base, dataclasses.replace(self, forced=tuple(refused))


def resumable(run_dir: str | os.PathLike[str], plan: ResumePlan | None = None) -> bool:
    """Whether `resume=<run_dir>` would have anything to continue from: what `run_dir` holds now
    (a finished SFT or reward model, a complete checkpoint of a training stage), or, for a resumed
    run, what its plan found along the chain."""
    here = RunLayout(run_dir)
    marks = here.finished_marks()
    if marks["sft"].exists() or marks["reward_model"].exists():
        return True
    if any(latest_complete(here.stage_checkpoints(stage)) for stage in STAGE_CHECKPOINT_DIRS):
        return True
    return plan is not None and plan.resumable


def _say_skipped(root: Path, chosen: Path) -> None:
    """One line per checkpoint newer than `chosen` that the resume skips, with why (killed while
    saving, a file cut short or damaged): the resume goes on from an earlier step than the newest."""
    step = checkpoint_step(chosen) or 0
    for newer in checkpoints_of(root):
        if (checkpoint_step(newer) or 0) > step:
            print(
                f"resume: skipping {newer} ({checkpoint_problem(newer)}); continuing from {chosen.name}",
                file=sys.stderr,
            )


def _load(path: Path) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.load(path)


def _chain(root: Path, saved: Any) -> tuple[Path, ...]:
    """`root`, the run it resumed (its saved config's `resume`), that run's, ... (existing dirs;
    an unreadable config ends the chain)."""
    from omegaconf import OmegaConf

    chain: list[Path] = []
    current: Path | None = root
    config = saved
    while current is not None and current.is_dir() and current not in chain and len(chain) < MAX_CHAIN:
        chain.append(current)
        if current != root:
            saved_file = RunLayout(current).saved_config
            try:
                config = _load(saved_file) if saved_file.is_file() else None
            except Exception:  # noqa: BLE001 - an unreadable config ends the chain
                config = None
        resumed = OmegaConf.select(config, "resume", default=None) if config is not None else None
        current = Path(str(resumed)).expanduser().resolve() if resumed else None
    return tuple(chain)


def _saved_choices(root: Path) -> dict[str, str]:
    """The config group choices of the resumed run (hydra.runtime.choices), {} without hydra.yaml."""
    from omegaconf import OmegaConf

    path = RunLayout(root).saved_hydra
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
