"""Command-line front door: composition, one-line errors, and the checks that run before Hydra.

Hydra reports composition errors over several lines (and task errors with a traceback). Users of
`python -m grpo` get one line instead: `preflight` composes the command line with Hydra's compose
API first, and turns every problem (malformed override, unknown option, missing env, a type error
in a value, a cross-field rule) into `error: ...` on stderr with exit code 2. Only light modules
are imported here, so the answer comes back in about a second.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from omegaconf import DictConfig

from grpo.config import GrpoConfig, register_schema, to_settings
from grpo.errors import UserError
from grpo.files import register_new_dir_resolver

CONFIG_MODULE = "grpo.conf"
CONFIG_NAME = "config"
EXIT_USER_ERROR = 2
# Hydra flags after which preflight stays out of the way (Hydra prints help / info itself)
_HYDRA_INFO_FLAGS = ("help", "hydra_help", "info", "shell_completion")
# sweeps with more jobs get each listed value checked once instead of every combination
MAX_CHECKED_JOBS = 64


def _config_module() -> contextlib.AbstractContextManager[Any]:
    """Hydra initialised on our config tree: inside a running `python -m grpo` it already is (a
    second initialisation raises), anywhere else for the duration of the block."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return contextlib.nullcontext()
    return initialize_config_module(CONFIG_MODULE, version_base="1.3")


def compose(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The run's config for `overrides`, composed exactly as `python -m grpo` composes it."""
    from hydra import compose as hydra_compose

    register_schema()
    register_new_dir_resolver()  # the run dir, resolved only when the hydra node is
    with _config_module():
        return hydra_compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=return_hydra_config)


def group_options(group: str) -> list[str]:
    """The options of a config group (e.g. the available envs), sorted."""
    from hydra.core.global_hydra import GlobalHydra

    with _config_module():
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


def one_line(ex: BaseException) -> str:
    """An exception and its causes as one line (Hydra and OmegaConf messages span several)."""
    parts: list[str] = []
    seen: set[int] = set()
    while ex is not None and id(ex) not in seen:
        seen.add(id(ex))
        for line in str(ex).splitlines():
            line = line.strip()
            if line and line not in parts and not _is_noise(line):
                parts.append(line)
        ex = ex.__cause__ or ex.__context__
    return "; ".join(parts) or "unknown error"


def _is_noise(line: str) -> bool:
    """Lines of Hydra/OmegaConf messages that add nothing on a one-line error."""
    return (
        line == "None"
        or "$VALUE" in line
        or line.startswith(("object_type=", "reference_type=", "Config search path", "See https://hydra.cc"))
    )


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


@contextlib.contextmanager
def exit_on_user_error() -> Iterator[None]:
    """Turn a UserError into one line on stderr and exit code 2 (no traceback) in a single run;
    in a multirun the exception propagates so the launcher marks just that job failed."""
    try:
        yield
    except UserError as ex:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or _is_multirun():
            raise
        fail(str(ex))


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _checkable_overrides(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The plain overrides, and per swept key (as written, `+` included) the discrete values the
    sweep lists. Malformed overrides raise UserError; an unknown option of a swept group too."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as ex:
        raise UserError(f"malformed override: {one_line(ex)}") from None
    plain: list[str] = []
    swept: dict[str, list[str]] = {}
    for o in parsed:
        if not o.is_sweep_override():
            plain.append(o.input_line)
        elif o.is_discrete_sweep() and o.value_type.name != "GLOB_CHOICE_SWEEP":
            values = list(o.sweep_string_iterator())
            options = _options_if_group(o.key_or_group)
            for value in values if options else ():
                if value not in options:
                    raise UserError(f"unknown {o.key_or_group} '{value}' (available: {', '.join(options)})")
            swept[o.get_key_element()] = values
        # interval sweeps (Optuna) have no value to check until the sweeper samples one
    return plain, swept


def check(overrides: list[str]) -> GrpoConfig:
    """Compose and check a command line; every problem is a UserError with one line. A sweep is
    checked job by job for every combination of its listed values (up to MAX_CHECKED_JOBS; beyond
    that, each value once, the other keys at their first value). Returns the first job's settings."""
    return check_command(overrides)[0]


def check_command(overrides: list[str]) -> tuple[GrpoConfig, DictConfig]:
    """`check`, returning the first job's composed config too."""
    from grpo.cli.checks import check_once

    plain, swept = _checkable_overrides(overrides)
    jobs = [_composed([*plain, *job]) for job in _sweep_jobs(swept)]
    for settings, _ in jobs:
        check_once(settings)
    return jobs[0]


def config_groups() -> set[str]:
    """The top-level config group names (env, model, language, ...)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside the Hydra app (python -m grpo)
        return set(GlobalHydra.instance().config_loader().list_groups(""))
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        return set(GlobalHydra.instance().config_loader().list_groups(""))


def run_config(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """The config a run uses: the composed one, or with resume= the resumed run's (grpo/resume.py)."""
    if not cfg.get("resume"):
        return cfg
    from grpo.run.resume import resumed_config

    return resumed_config(cfg, list(overrides), config_groups())


def load_settings(overrides: Sequence[str] = ()) -> GrpoConfig:
    """The typed settings `python -m grpo <overrides>` runs with, composed but not checked."""
    return to_settings(run_config(compose(overrides), overrides))


def _composed(overrides: list[str]) -> tuple[GrpoConfig, DictConfig]:
    """The settings and the composed config of one job's overrides (resume= applied to both)."""
    try:
        cfg = run_config(compose(overrides), overrides)
        settings = to_settings(cfg)
    except UserError:
        raise
    except Exception as ex:  # Hydra / OmegaConf composition errors
        from hydra.errors import MissingConfigException

        if isinstance(ex, MissingConfigException) and ex.missing_cfg_file and ex.options is not None:
            group, _, name = ex.missing_cfg_file.rpartition("/")
            raise UserError(
                f"unknown {group} '{name}' (available: {', '.join(sorted(ex.options))})"
            ) from None
        raise UserError(one_line(ex)) from None
    if settings.env is None:
        raise UserError(
            f"no environment selected: add +env=NAME (available: {', '.join(group_options('env'))})"
        )
    return settings, cfg


def _sweep_jobs(swept: dict[str, list[str]]) -> list[list[str]]:
    """The swept overrides of the jobs to check, the sweep's first job first."""
    keys = list(swept)
    first = [f"{k}={swept[k][0]}" for k in keys]
    if math.prod(len(v) for v in swept.values()) <= MAX_CHECKED_JOBS:
        combos = itertools.product(*(swept[k] for k in keys))
        return [[f"{k}={v}" for k, v in zip(keys, combo, strict=True)] for combo in combos]
    # too many to compose each: vary one key at a time
    return [first] + [
        [*first[:i], f"{k}={v}", *first[i + 1 :]] for i, k in enumerate(keys) for v in swept[k][1:]
    ]


def _options_if_group(key: str) -> list[str]:
    if "." in key or key.startswith("hydra"):
        return []
    return group_options(key)


def preflight(argv: Sequence[str]) -> GrpoConfig | None:
    """Check the command line before Hydra runs it; exit 2 with one line on a problem. Returns the
    (first job's) settings, None when Hydra is left to answer alone (help, --info, argparse errors,
    HYDRA_FULL_ERROR=1)."""
    # Hydra has no public way to split a command line into its flags and overrides; this private
    # import is the project's only use of Hydra internals
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(list(argv))
    except SystemExit:
        return None  # argparse already explained; Hydra will too
    if any(getattr(args, flag, False) for flag in _HYDRA_INFO_FLAGS):
        return None
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return None  # the user asked for Hydra's own full errors
    from grpo.cli.output_check import check_writable_outputs

    try:
        settings, cfg = check_command(args.overrides or [])
        # --cfg only prints the config: it writes nothing, so it creates no output folder either
        if not args.cfg:
            check_writable_outputs(settings)
    except UserError as ex:
        fail(str(ex))
    if args.cfg == "job" and not (args.package or args.multirun or settings.resume):
        # what Hydra would compose a second time to print: the same job config, printed from here
        from omegaconf import OmegaConf

        sys.stdout.write(OmegaConf.to_yaml(cfg, resolve=bool(args.resolve)))
        sys.exit(0)
    return settings
