"""What identifies a run in MLflow: flattened config params and tags (Hydra choices, overrides, git).

Params are the resolved config flattened to dotted keys under the `cfg.` prefix
(`cfg.trainer.beta`), so they never collide with what transformers' MLflowCallback logs and they
line up column by column in the UI's compare view. Lists are one JSON value, not one key per item.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpo.config import GrpoConfig

PARAM_PREFIX = "cfg."
TAG_PREFIX = "grpo."
# MLflow limits (mlflow.utils.validation)
MAX_KEY_LENGTH = 250
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
_BAD_NAME_CHARS = re.compile(r"[^/\w.\- ]")
# Hydra's own config groups that say nothing about the experiment
_HYDRA_CHOICES_KEPT = ("hydra/sweeper", "hydra/launcher")


def safe_name(name: str) -> str:
    """A metric / param key MLflow accepts (alphanumerics, _ - . space /), within its length limit."""
    cleaned = _BAD_NAME_CHARS.sub("_", name).strip("/") or "_"
    cleaned = re.sub(r"/+", "/", cleaned)
    return cleaned[:MAX_KEY_LENGTH]


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple, dict)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    if len(text) > MAX_PARAM_VALUE_LENGTH:
        text = text[: MAX_PARAM_VALUE_LENGTH - 3] + "..."
    return text


def flatten(container: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts -> {"a.b.c": "value"}; lists stay one JSON value."""
    flat: dict[str, str] = {}
    for key, value in container.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[safe_name(name)] = _value(value)
    return flat


def config_params(settings: GrpoConfig) -> dict[str, str]:
    """The run's settings flattened as MLflow params, but for the env's prompt texts: a hundred
    translations are data, not knobs to compare runs by (the config.yaml artifact has them)."""
    tree = dataclasses.asdict(settings)
    if isinstance(tree["env"], dict):
        tree["env"].pop("prompts", None)
    return flatten(tree, PARAM_PREFIX)


def resolved_yaml(settings: GrpoConfig) -> str:
    """The run's resolved settings as YAML (the config.yaml artifact)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(dataclasses.asdict(settings)))


def tag_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_TAG_VALUE_LENGTH else text[: MAX_TAG_VALUE_LENGTH - 3] + "..."


def choice_tags(choices: Mapping[str, Any]) -> dict[str, str]:
    """One tag per config group choice: grpo.choice.model = tiny, grpo.choice.hydra/sweeper = optuna."""
    tags: dict[str, str] = {}
    for group, option in choices.items():
        if option is None or (group.startswith("hydra/") and group not in _HYDRA_CHOICES_KEPT):
            continue
        tags[f"{TAG_PREFIX}choice.{group}"] = str(option)
    return tags


def varied_overrides(job_overrides: Sequence[str], sweep_overrides: Sequence[str]) -> list[str]:
    """The overrides that tell one sweep job from the others: those not given verbatim to the whole
    sweep (a sweep's `lr=1e-6,3e-6` becomes the job's `lr=1e-06`, a shared `+env=x` stays as is)."""
    shared = {_canonical(o) for o in sweep_overrides}
    return [o for o in job_overrides if _canonical(o) not in shared]


# a run name: about what the UI's run-name column shows at its default width, and then some
MAX_RUN_NAME = 60
# overrides a run name leaves out: its first words say them (stages, env, language), or they are
# about where the run is logged, not what it is
_NAME_SKIPPED = ("env", "stages", "language", "output_root", "resume")
_NAME_SKIPPED_GROUPS = ("tracking.", "hydra.", "hydra/")
# keys said shorter in a run name (after the dotted prefix goes: trainer.max_steps -> steps)
_NAME_ALIASES = {
    "max_steps": "steps",
    "num_examples": "examples",
    "rollouts_per_example": "rollouts",
    "experiment": "exp",
}
# a preset: said after the overrides it is the context of
_NAME_LAST = ("experiment",)


def run_name(
    stages: Sequence[str], env: str, language: str, overrides: Sequence[str], limit: int = MAX_RUN_NAME
) -> str:
    """A run's name in the runs table, what tells it from its neighbours first: what ran (the
    stages but evaluations, or `eval`), on what (env, language), then the overrides that are not
    already said, by their last key part (`train alphabet_sort sv · lr=1e-5 steps=200`); a path
    value by its last part (`model.path=<run>/checkpoints/checkpoint-120` -> `checkpoint-120`).
    At most `limit` characters (the whole command line is the tag grpo.overrides; a sweep job's
    name is given room for all it varies)."""
    trained = [s for s in dict.fromkeys(stages) if s != "eval"]
    head = " ".join(part for part in ("+".join(trained) or "eval", env, language) if part)
    shown: dict[str, str] = {}
    last: dict[str, str] = {}
    for override in overrides:
        key, sep, value = override.partition("=")
        key = key.lstrip("+~")
        if not sep or key in _NAME_SKIPPED or key.startswith(_NAME_SKIPPED_GROUPS):
            continue
        (last if key in _NAME_LAST else shown)[key] = _short_value(key, value)
    given = {**shown, **last}
    parts = [
        value if full == "model.path" else f"{_NAME_ALIASES.get(key, key)}={value}"  # the model: its name
        for full, (key, value) in zip(given, short_keys(given).items(), strict=True)
    ]
    name = f"{head} · {' '.join(parts)}" if parts else head
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _short_value(key: str, value: str) -> str:
    """A path by its last part (and the one before, when the last is a time like 06-55-07)."""
    if "/" not in value or value.startswith(("[", "{")):
        return value
    parts = [p for p in value.rstrip("/").split("/") if p]
    if len(parts) > 1 and not any(c.isalpha() for c in parts[-1]):
        return "/".join(parts[-2:])
    return parts[-1] if parts else value


def short_keys(swept: Mapping[str, str]) -> dict[str, str]:
    """Each key by its last part (optimizer.lr -> lr) where that stays unambiguous among `swept`:
    the UI's run-name column shows about 40 characters, and the full keys are in params and tags."""
    leaves = [key.rsplit(".", 1)[-1] for key in swept]
    return {
        (leaf if leaves.count(leaf) == 1 else key): value
        for key, leaf, value in zip(swept, leaves, swept.values(), strict=True)
    }


def _canonical(override: str) -> tuple[str, str] | str:
    """An override as Hydra parses it, (key with its +/~ prefix, value): a sweep's `x=false` and
    its job's `x=False` are one override. Unparsable text stays as it is."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except Exception:  # noqa: BLE001 - any parse failure: compare the text
        return override
    return parsed.get_key_element(), repr(parsed.value())


def git_commit(start: Path | None = None) -> str | None:
    """HEAD of the repository holding this package (or `start`), '-dirty' when it has local changes;
    None outside a git checkout (an installed wheel)."""
    cwd = start or Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None
