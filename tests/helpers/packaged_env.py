"""Build an environment the way a run does: its packaged conf/env/<name>.yaml composed by Hydra
(`grpo.compose.compose`), with keyword arguments overriding the YAML's, through `build_env`. Tests use
this instead of calling an Environment class directly, so they get the real prompts of every
language without copying them."""

from __future__ import annotations

from functools import cache
from typing import Any

from omegaconf import OmegaConf

from grpo.compose import compose
from grpo.envs import build_env


@cache
def packaged_config(name: str) -> dict[str, Any]:
    return OmegaConf.to_container(compose([f"+env={name}"]).env, resolve=True)  # type: ignore[return-value]


def packaged_env(env: str, /, language: Any = "en", **args: Any) -> Any:
    """conf/env/<env>.yaml with `args` as `env.KEY=VALUE` overrides (`name` included), built in
    `language` (a code, a LanguageSpec or a composed `language` group)."""
    return build_env({**packaged_config(env), **args}, language)
