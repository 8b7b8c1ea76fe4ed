"""Close matches for mistakes on the command line: "did you mean" for a key or a group option.

Hydra answers a key typo with its append hint (`To append to your config use +trainer.max_stepz=4`),
which points the wrong way, and takes `+trainer.max_stepz=4` silently. The preflight asks here for
the key or option the user most likely meant, from the composed config tree (so env keys and
options of user config dirs count) and from the schema. Light: omegaconf and difflib only.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator

from omegaconf import DictConfig, OmegaConf

# difflib's ratio for a suggestion: 0.6 takes max_stepz -> max_steps, trainr -> trainer, and
# leaves unrelated words without one
CUTOFF = 0.6


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, or None when none is close."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the closest choice, or ""."""
    close = close_match(word, choices)
    return f"; did you mean {close}?" if close else ""


def closest_key(cfg: DictConfig, key: str) -> str | None:
    """The existing dotted key closest to `key`, part by part (`trainr.max_stepz` ->
    `trainer.max_steps`), or None when some part has no close match or the key exists."""
    node: object = cfg
    found: list[str] = []
    changed = False
    for part in key.split("."):
        if not OmegaConf.is_dict(node):
            return None
        keys = [str(k) for k in node]  # type: ignore[union-attr]
        if part not in keys:
            part = close_match(part, keys)  # type: ignore[assignment]
            if part is None:
                return None
            changed = True
        found.append(part)
        node = OmegaConf.select(cfg, ".".join(found), default=None, throw_on_resolution_failure=False)
    return ".".join(found) if changed else None


def keys_of(cfg: DictConfig, parent: str) -> list[str]:
    """The keys under `parent` ("" for the top), [] when it is not a mapping."""
    node = OmegaConf.select(cfg, parent, default=None, throw_on_resolution_failure=False) if parent else cfg
    return [str(k) for k in node] if OmegaConf.is_dict(node) else []


def unknown_key_message(cfg: DictConfig, key: str, choices: Iterable[str] | None = None) -> str:
    """One line for a key the config does not have, with the closest key (part by part through
    `cfg`, or among `choices`, the keys its parent allows) or else the keys its parent has."""
    parent, _, leaf = key.rpartition(".")
    dotted = f"{parent}." if parent else ""
    if choices is not None:
        siblings = sorted(set(choices))
        close = close_match(leaf, siblings)
        close = f"{dotted}{close}" if close else None
    else:
        siblings = keys_of(cfg, parent)
        close = closest_key(cfg, key)
    if close:
        return f"unknown key {key}; did you mean {close}?"
    where = parent or "the config"
    return f"unknown key {key}" + (f" (keys of {where}: {', '.join(siblings)})" if siblings else "")


def unknown_keys(cfg: DictConfig, prefix: str = "") -> Iterator[tuple[str, list[str]]]:
    """(dotted key, the keys its parent allows) for each key of `cfg` that its schema (the
    dataclass a node was composed on) does not have: what `+trainer.max_stepz=4` or a typo in a
    YAML file adds. Nodes typed as plain dicts (env, the `extra` kwargs) take any key and are not
    searched."""
    schema = OmegaConf.get_type(cfg)
    if not dataclasses.is_dataclass(schema):
        return
    fields = [f.name for f in dataclasses.fields(schema)]
    for k in cfg:
        key = str(k)
        if key == "hydra":
            continue
        if key not in fields:
            yield f"{prefix}{key}", fields
            continue
        try:
            child = cfg[key]
        except Exception:  # noqa: BLE001 - an unresolvable value is the checks' business, not a key typo
            continue
        if isinstance(child, DictConfig):
            yield from unknown_keys(child, f"{prefix}{key}.")
