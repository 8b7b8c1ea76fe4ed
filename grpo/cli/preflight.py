"""The front door's preflight: one-line errors, and the checks that run before Hydra.

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
import re
import sys
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from omegaconf import DictConfig

from grpo.cli.suggest import closest_key, did_you_mean, unknown_key_message, unknown_keys
from grpo.compose import compose, group_options, one_line, run_config, type_mismatch
from grpo.config import GrpoConfig, to_settings
from grpo.errors import EXIT_USER_ERROR, UserError, fail  # noqa: F401 - fail and EXIT_USER_ERROR are imported from here too
from grpo.run.resume import ResumePlan
from grpo.run.trained import TrainedModel, resolve_trained_model

# Hydra flags after which preflight stays out of the way (Hydra prints help / info itself)
_HYDRA_INFO_FLAGS = ("help", "hydra_help", "info", "shell_completion")
# sweeps with more jobs get each listed value checked once instead of every combination
MAX_CHECKED_JOBS = 64


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
                    raise UserError(
                        f"unknown {o.key_or_group} '{value}'{did_you_mean(value, options)} "
                        f"(available: {', '.join(options)})"
                    )
            swept[o.get_key_element()] = values
        # interval sweeps (Optuna) have no value to check until the sweeper samples one
    return plain, swept


class Checked(NamedTuple):
    """A checked command line: the (first job's) settings, its composed config, its resume plan,
    and the run checkpoint a model.path=<run folder> resolved to (grpo/run/trained.py)."""

    settings: GrpoConfig
    config: DictConfig
    resume: ResumePlan | None
    trained: TrainedModel | None = None


def check(overrides: list[str], machine: bool = True) -> GrpoConfig:
    """Compose and check a command line; every problem is a UserError with one line. A sweep is
    checked job by job for every combination of its listed values (up to MAX_CHECKED_JOBS; beyond
    that, each value once, the other keys at their first value). Returns the first job's settings.
    `machine`: also the rules about this machine (grpo/cli/checks.py)."""
    return check_command(overrides, machine=machine).settings


def check_command(overrides: list[str], multirun: bool = False, machine: bool = True) -> Checked:
    """`check`, returning the first job's composed config and resume plan too. The sweeper's search
    space is checked for a multirun, a +sweep= preset or hydra.sweeper.params overrides (composing
    the hydra node costs time a plain run need not spend)."""
    from grpo.cli.checks import check_once

    plain, swept = _checkable_overrides(overrides)
    if multirun or any(o.lstrip("+").startswith((SEARCH_SPACE, "sweep=")) for o in overrides):
        _check_search_space(overrides, plain)
    plans: dict[str, ResumePlan] = {}  # each resumed dir is read once
    jobs = [_composed([*plain, *job], plans) for job in _sweep_jobs(swept)]
    for job in jobs:
        check_once(job.settings, job.resume, machine)
    return jobs[0]


def _composed(overrides: list[str], plans: dict[str, ResumePlan]) -> Checked:
    """The settings, the composed config and the resume plan of one job's overrides (resume=
    applied to both); `plans`: the plans read so far, by resume= value."""
    try:
        cfg = compose(overrides)
        resume = str(cfg.get("resume") or "")
        cfg, plan = run_config(cfg, overrides, plans.get(resume))
        if plan is not None:
            plans[resume] = plan
    except UserError:
        raise
    except Exception as ex:  # Hydra / OmegaConf composition errors
        raise UserError(_composition_error(ex, overrides)) from None
    for key, allowed in unknown_keys(cfg):
        # Hydra's `+key=value` adds a key the schema does not have, which nothing would ever read
        raise UserError(unknown_key_message(cfg, key, allowed))
    try:
        settings = to_settings(cfg)
    except Exception as ex:  # a value of the wrong type
        raise UserError(one_line(ex)) from None
    if settings.env is None:
        raise UserError(
            f"no environment selected: add +env=NAME (available: {', '.join(group_options('env'))})"
        )
    settings, trained = resolve_trained_model(settings)
    return Checked(settings, cfg, plan, trained)


# Hydra's text for an override of a key the config does not have (its hint, "To append to your
# config use +key=value", would add a key nothing reads)
_NO_SUCH_KEY = re.compile(r"^Could not override '([^']+)'")


def _composition_error(ex: Exception, overrides: list[str]) -> str:
    """One line for a composition error: an unknown group option or key with its closest match."""
    from hydra.errors import MissingConfigException

    mismatch = type_mismatch(ex)
    if mismatch is not None:
        return mismatch
    if isinstance(ex, MissingConfigException) and ex.missing_cfg_file and ex.options is not None:
        group, _, name = ex.missing_cfg_file.rpartition("/")
        options = sorted(ex.options)
        return f"unknown {group} '{name}'{did_you_mean(name, options)} (available: {', '.join(options)})"
    found = _NO_SUCH_KEY.match(str(ex))
    if found and "not in" in one_line(ex):
        key = found.group(1)
        rest = [o for o in overrides if o.lstrip("+~").partition("=")[0] != key]
        try:
            return unknown_key_message(compose(rest), key)
        except Exception:  # noqa: BLE001 - another problem too: the key alone is still worth saying
            return f"unknown key {key}"
    return one_line(ex)


SEARCH_SPACE = "hydra.sweeper.params."


def _check_search_space(overrides: Sequence[str], plain: list[str]) -> None:
    """Every key a sweeper searches over (hydra.sweeper.params of a +sweep= preset or a sweep file
    of the user's) is a config group or a key of the composed config (a `+key` adds one): a typo
    would otherwise fail every job with Hydra's text, or an Optuna study with "Unexpected type".
    A search space written on the command line is refused with the form that works there."""
    from omegaconf import OmegaConf

    from grpo.compose import config_groups

    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key.startswith(SEARCH_SPACE) or key == SEARCH_SPACE.rstrip("."):
            swept = key[len(SEARCH_SPACE) :] or "KEY"
            raise UserError(
                f"{o}: Hydra takes no search space from the command line; sweep with {swept}=A,B (Optuna: "
                f"{swept}=interval(LOW,HIGH)), or write it under hydra.sweeper.params in a sweep file (+sweep=NAME)"
            )
    try:
        cfg = compose(plain, return_hydra_config=True)
    except Exception:  # noqa: BLE001 - composition errors are reported, in one line, by the caller
        return
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None)
    if params is None or not OmegaConf.is_dict(params) or not params:
        return
    groups = config_groups()
    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    missing = object()
    for key in (str(k) for k in params):
        if key.startswith(("+", "~")) or key.split("@", 1)[0] in groups:
            continue
        if OmegaConf.select(task, key, default=missing, throw_on_missing=False) is missing:
            raise UserError(
                f"hydra.sweeper.params: the sweep searches over {key}, which is not a config key"
                + (f"; did you mean {close}?" if (close := closest_key(task, key)) else "")
            )


def sweep_parts(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The plain overrides of a command line, and per swept key (a=1,2) the values it lists; a
    malformed override is a UserError. Every job of the sweep is one value of each swept key."""
    return _checkable_overrides(overrides)


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


def preflight(argv: Sequence[str]) -> Checked | None:
    """Check the command line before Hydra runs it; exit 2 with one line on a problem. Returns the
    (first job's) checked settings and resume plan, None when Hydra is left to answer alone (help,
    --info, argparse errors, and with HYDRA_FULL_ERROR=1 any problem)."""
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
        # the user asked for Hydra's own full errors: a command line that does not compose is left
        # to Hydra; one that does still hands on its settings (ranks > 0 of a launch need them to
        # find rank 0's run dir)
        try:
            return check_command(args.overrides or [], multirun=bool(args.multirun))
        except UserError:
            return None
    from grpo.cli.output_check import check_writable_outputs

    try:
        checked = check_command(args.overrides or [], multirun=bool(args.multirun))
        # --cfg only prints the config: it writes nothing, so it creates no output folder either
        if not args.cfg:
            check_writable_outputs(checked.settings)
    except UserError as ex:
        fail(str(ex))
    if args.cfg == "job" and not (args.package or args.multirun or checked.settings.resume):
        # what Hydra would compose a second time to print: the same job config, printed from here
        from omegaconf import OmegaConf

        sys.stdout.write(OmegaConf.to_yaml(checked.config, resolve=bool(args.resolve)))
        sys.exit(0)
    return checked
