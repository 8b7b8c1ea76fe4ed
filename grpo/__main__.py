"""`python -m grpo +env=NAME [group=option ...] [key=value ...]`: compose, check once, run the stages.

Composition and the checks run before any heavy import (grpo/cli/preflight.py), so a bad override
comes back in about a second as one line; torch, transformers and trl are imported by the stages
that use them. With resume=<run dir> the run takes the resumed run's settings and resume plan
(grpo/run/resume.py: read once, by the preflight, and handed to the checks and the stages) and
saves the settings as its own .hydra/config.yaml. With model.path=<a run folder> the preflight picks
its final or best checkpoint once (grpo/run/trained.py) and the run says which in one line. A start
refused after Hydra made the run folder (exit 2) removes that folder when it holds only .hydra/ and
the log. Ctrl-C / SIGTERM stop at a step boundary with a checkpoint and one line saying how to
resume (grpo/run/interrupt.py); the exit code is 130 / 143. A generator apart from the trainer that
fails mid-run (generation ahead of training) stops it the same way, with its own line and exit 3.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from grpo.cli.preflight import Checked, exit_on_user_error, preflight
from grpo.compose import register_options_resolver, run_config
from grpo.config import register_schema
from grpo.config import to_settings as settings_of
from grpo.errors import EXIT_USER_ERROR, GeneratorFailed
from grpo.files import register_resolvers, release_claimed_dir
from grpo.run.distributed import (
    adopt_submitit_tasks,
    close_group,
    follower_overrides,
    is_main,
    publish_run_dir,
    wait_for_run_dir,
    world_size,
)
from grpo.run.layout import HYDRA_DIR, SAVED_CONFIG, output_root
from grpo.run.resume import ResumePlan, resumable

register_schema()
register_resolvers()
register_options_resolver()  # the --help page's env list

# what the preflight checked in this process: the Hydra task reuses its resume plan
_checked: Checked | None = None


@hydra.main(version_base="1.3", config_path="pkg://grpo.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from grpo.run.interrupt import Interrupted

    adopt_submitit_tasks()  # a data-parallel submitit job: each task is one rank
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    overrides = list(HydraConfig.get().overrides.task)
    plan = None
    with _no_folder_if_refused(run_dir), exit_on_user_error():
        if cfg.get("resume"):
            cfg, plan = run_config(cfg, overrides, _preflight_plan(str(cfg.resume)))
            # what this run really uses: a resume of this run starts from it (ranks > 0 save nothing)
            subdir = HydraConfig.get().output_subdir
            if subdir is not None:
                from grpo.files import write_text_atomic

                write_text_atomic(run_dir / subdir / SAVED_CONFIG, OmegaConf.to_yaml(cfg))
        if world_size() > 1 and is_main():
            publish_run_dir(output_root(settings_of(cfg)), run_dir)
        from grpo.api import run_in

        try:
            # the API's path from here: model.path=<run folder> (the checkpoint the preflight
            # picked; a sweep job's own otherwise), the checks (a no-op for what the preflight
            # checked), the memory plan, the stages
            trained = _checked.trained if _checked else None
            return run_in(settings_of(cfg), run_dir, plan, trained=trained).final
        except Interrupted as ex:
            if is_main():  # one line per run, not per process
                # after a newline: a progress bar may hold the current line
                print("\n" + interrupted_line(ex, run_dir, overrides, plan), file=sys.stderr)
            sys.exit(ex.exit_code)
        except GeneratorFailed as ex:
            # the generator apart from the trainer failed: its line, then where to go on from
            print(
                f"\n{ex}; "
                + interrupted_line(ex, run_dir, overrides, plan).replace("interrupted", "stopped", 1),
                file=sys.stderr,
            )
            sys.exit(ex.exit_code)
        finally:
            close_group()  # several processes: no abort at exit


@contextlib.contextmanager
def _no_folder_if_refused(run_dir: Path) -> Iterator[None]:
    """A refused start (exit 2: a check that needs the built env, a names file, ...) leaves no run
    folder: the one Hydra claimed for it goes when it holds nothing but .hydra/ and the job log.
    A folder this process did not claim (hydra.run.dir=<existing>) or that holds more is kept."""
    try:
        yield
    except SystemExit as ex:
        if ex.code == EXIT_USER_ERROR:
            from hydra.core.hydra_config import HydraConfig

            release_claimed_dir(run_dir, {HYDRA_DIR, f"{HydraConfig.get().job.name}.log"})
        raise


def _preflight_plan(resume: str) -> ResumePlan | None:
    """The resume plan the preflight of this process read for `resume`, if it did."""
    plan = _checked.resume if _checked is not None else None
    return plan if plan is not None and str(_checked.settings.resume) == resume else None


def interrupted_line(
    ex: BaseException, run_dir: Path, overrides: list[str], plan: ResumePlan | None = None
) -> str:
    """The one line an interrupted run ends with: where it stopped, and the command that goes on.
    `plan`: the interrupted run's own resume plan (what it continued from counts as resumable)."""
    stage, step = getattr(ex, "stage", None), getattr(ex, "step", None)
    if stage == "train" and step is not None:
        where = f"at step {step}"
    else:
        where = f"during {stage or 'the run'}" + (f" at its step {step}" if stage and step else "")
    if not resumable(run_dir, plan):
        again = " ".join(shlex.quote(o) for o in overrides)
        return f"interrupted {where}; nothing to resume yet, run again with: python -m grpo {again}"
    return f"interrupted {where}; resume with: python -m grpo resume={shlex.quote(str(run_dir))}"


def main() -> None:
    """The command, callable in process (tests, a notebook's `sys.argv`): changes no process-wide
    signal disposition; `cli()` is the program's entry."""
    global _checked
    # vLLM logs an INFO line per engine call (a prefix-cache reset at every weight sync): warnings
    # only, unless the shell says otherwise (read when vLLM is first imported)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    _checked = preflight(sys.argv[1:])
    if world_size() > 1 and not is_main() and _checked is not None:
        sys.argv += _follower_overrides(sys.argv[1:], _checked)
    _hydra_main()


def _follower_overrides(argv: list[str], checked: Checked) -> list[str]:
    """Ranks > 0 of a multi-process launch: rank 0's run dir (grpo/run/distributed.py)."""
    from grpo.cli.preflight import fail
    from grpo.errors import UserError

    if "-m" in argv or "--multirun" in argv:
        fail("a multirun sweep under torchrun / accelerate launch: sweep with a Hydra launcher instead")
    if any(a.startswith("hydra.run.dir=") for a in argv):
        return follower_overrides(None)
    try:
        return follower_overrides(wait_for_run_dir(output_root(checked.settings)))
    except UserError as ex:
        fail(str(ex))
        raise


def cli() -> None:
    """The program's entry (`python -m grpo`, the `grpo` console script): a cut output
    (`python -m grpo --help | head`) ends silently, then `main()`. Only here: SIGPIPE's default
    action in a process that goes on (a pytest worker, a notebook kernel) would kill it silently
    at its next write to a closed socket or pipe."""
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    main()


if __name__ == "__main__":
    cli()
