"""Environments: one file per environment here, one YAML per environment in conf/env/.

`build_env(cfg.env, cfg.language)` turns the env config group into an Environment through its
`_target_`; a third-party class (`_target_: theirpkg.Env`, its YAML on Hydra's search path) works
the same way. Only light modules are imported here: an environment's own module is imported when
it is built.

Language: the run's `language` group is passed explicitly and reaches the constructor as a
LanguageSpec, overrides included (`language=mix language.members=[en,zh] language.balance=true`).
Env YAMLs carry no `language` key; their `prompts:` mapping holds the texts of every language.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from grpo.errors import UserError

_UNEXPECTED_ARG = re.compile(r"unexpected keyword argument '(\w+)'")
_MISSING_ARG = re.compile(r"missing \d+ required (?:positional |keyword-only )?arguments?: '(\w+)'")


def build_env(env_cfg: Any, language: Any) -> Any:
    """Instantiate the environment described by `env_cfg` (the `env` config group: a DictConfig or
    a dict with `_target_`) in `language` (a LanguageSpec, a code, or the `language` group as a
    LanguageConfig, dict or DictConfig). Bad arguments raise UserError naming `env.<key>` and the
    valid arguments. A constructor without a `language` argument (a third-party env may have
    none) is built without it."""
    from hydra.errors import InstantiationException
    from hydra.utils import get_class, instantiate

    from grpo.envs.base import Environment
    from grpo.languages.spec import as_spec

    if env_cfg is None:
        raise UserError("env: no environment selected; add +env=NAME (e.g. +env=alphabet_sort)")
    args = _resolved_args(env_cfg)
    if "language" in args:
        raise UserError(
            f"env.language: the language is the run's, not the env's; use language={args['language']} "
            "instead (and drop env.language)"
        )
    spec = as_spec(language)
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
    pass_language = "language" in params or var_kwargs
    if sig is not None:
        _check_args(target, sig, {**args, "language": spec} if pass_language else args, params, var_kwargs)
    try:
        # the language goes to the constructor as is (a LanguageSpec is no config value), so the
        # env is instantiated as a partial and called with it
        factory = instantiate({"_target_": target, **args}, _partial_=True, _convert_="all")
        env = factory(language=spec) if pass_language else factory()
    except InstantiationException as ex:
        _reraise_user_error(ex.__cause__, params)
        raise
    except (UserError, TypeError) as ex:
        _reraise_user_error(ex, params)
        raise
    if not isinstance(env, Environment):
        raise UserError(f"env._target_: {target} is not a grpo.envs.base.Environment subclass")
    return env


def _reraise_user_error(cause: BaseException | None, params: list[str]) -> None:
    """A constructor's UserError as is, a bad-argument TypeError as a UserError naming the key."""
    if isinstance(cause, UserError):
        raise cause from None
    if isinstance(cause, TypeError) and (
        m := _UNEXPECTED_ARG.search(str(cause)) or _MISSING_ARG.search(str(cause))
    ):
        raise UserError(f"env.{m.group(1)}: {cause}; valid arguments: {', '.join(params)}") from None


def _resolved_args(env_cfg: Any) -> dict[str, Any]:
    """Plain, resolved values of the config."""
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
