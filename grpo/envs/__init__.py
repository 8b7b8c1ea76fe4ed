"""Environments: one file per environment here, one YAML per environment in conf/env/.

`build_env(cfg.env)` turns the env config group into an Environment through its `_target_`; a
third-party class (`_target_: theirpkg.Env`) works the same way. Only light modules are imported
here: an environment's own module is imported when it is built.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from grpo.errors import UserError

_UNEXPECTED_ARG = re.compile(r"unexpected keyword argument '(\w+)'")
_MISSING_ARG = re.compile(r"missing \d+ required (?:positional |keyword-only )?arguments?: '(\w+)'")


def build_env(env_cfg: Any, language: str = "en") -> Any:
    """Instantiate the environment described by `env_cfg` (the `env` config group, a DictConfig or
    a dict with `_target_`). `language` fills `language` when the config leaves it unset or cannot
    resolve it (a standalone env YAML whose `${language.code}` has no root); a value set in the
    config wins. Bad arguments raise UserError naming `env.<key>` and the valid arguments."""
    from hydra.errors import InstantiationException
    from hydra.utils import get_class, instantiate

    from grpo.envs.base import Environment

    if env_cfg is None:
        raise UserError("env: no environment selected; add +env=NAME (e.g. +env=alphabet_sort)")
    args = _resolved_args(env_cfg, language)
    target = args.pop("_target_", None)
    if not isinstance(target, str) or not target:
        raise UserError(
            "env._target_: missing; set it to the environment class, e.g. grpo.envs.arithmetic.ArithmeticEnv"
        )
    try:
        cls = get_class(target)
    except Exception as ex:  # hydra wraps the ImportError/AttributeError; its message names the cause
        reason = str(ex.__cause__ or ex).strip().splitlines()[0]
        raise UserError(f"env._target_: cannot import {target!r} ({reason})") from None
    sig = _signature(cls)
    params = _keyword_params(sig) if sig is not None else []
    var_kwargs = sig is not None and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()
    )
    if args.get("language") is None:
        # only pass a language to a constructor that takes one (a third-party env may not)
        args.pop("language", None)
        if "language" in params or var_kwargs:
            args["language"] = language
    if sig is not None:
        _check_args(target, sig, args, params, var_kwargs)
    try:
        env = instantiate({"_target_": target, **args}, _convert_="all")
    except InstantiationException as ex:
        cause = ex.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if isinstance(cause, TypeError) and (
            m := _UNEXPECTED_ARG.search(str(cause)) or _MISSING_ARG.search(str(cause))
        ):
            raise UserError(f"env.{m.group(1)}: {cause}; valid arguments: {', '.join(params)}") from None
        raise
    if not isinstance(env, Environment):
        raise UserError(f"env._target_: {target} is not a grpo.envs.base.Environment subclass")
    return env


def _resolved_args(env_cfg: Any, language: str) -> dict[str, Any]:
    """Plain, resolved values of the config; an unresolvable `language` falls back to `language`."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(env_cfg, dict):
        env_cfg = OmegaConf.create(env_cfg)
    if not isinstance(env_cfg, DictConfig):
        raise UserError(f"env: expected a mapping with _target_, got {type(env_cfg).__name__}")
    args: dict[str, Any] = {}
    for key in env_cfg:
        try:
            value = env_cfg[key]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as ex:
            if key == "language":
                value = language
            else:
                reason = str(ex).strip().splitlines()[0]
                raise UserError(f"env.{key}: cannot resolve its value ({reason})") from None
        args[str(key)] = value
    return args


def _signature(cls: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(cls)
    except (TypeError, ValueError):  # some builtins / C classes have no inspectable signature
        return None


def _keyword_params(sig: inspect.Signature) -> list[str]:
    """Names of the arguments a config key can set."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _check_args(
    target: str, sig: inspect.Signature, args: dict[str, Any], params: list[str], var_kwargs: bool
) -> None:
    valid = ", ".join(params)
    if not var_kwargs:
        for key in args:
            if key not in params:
                raise UserError(f"env.{key}: not an argument of {target}; valid arguments: {valid}")
    for name in params:
        if sig.parameters[name].default is inspect.Parameter.empty and name not in args:
            raise UserError(f"env.{name}: required by {target} but not set; add env.{name}=VALUE")
