"""`python -m grpo +env=NAME [group=option ...] [key=value ...]`: compose, check once, run the stages.

Composition and the checks run before any heavy import, so a bad override comes back in about
a second as one line; torch, transformers and trl are imported by the stages that use them.
With resume=<run dir> the run takes the resumed run's settings (grpo/resume.py) and saves them as
its own .hydra/config.yaml. Ctrl-C / SIGTERM stop at a step boundary with a checkpoint and one
line saying how to resume (grpo/interrupt.py); the exit code is 130 / 143.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from grpo.cli.preflight import exit_on_user_error, preflight, run_config
from grpo.config import GrpoConfig, register_schema, to_settings
from grpo.files import register_new_dir_resolver
from grpo.run.distributed import (
    adopt_submitit_tasks,
    close_group,
    follower_overrides,
    is_main,
    publish_run_dir,
    wait_for_run_dir,
    world_size,
)

register_schema()
register_new_dir_resolver()


@hydra.main(version_base="1.3", config_path="pkg://grpo.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from grpo.run.interrupt import Interrupted, handle_signals

    adopt_submitit_tasks()  # a data-parallel submitit job: each task is one rank
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    with exit_on_user_error():
        if cfg.get("resume"):
            cfg = run_config(cfg, list(HydraConfig.get().overrides.task))
            # what this run really uses: a resume of this run starts from it (ranks > 0 save nothing)
            subdir = HydraConfig.get().output_subdir
            if subdir is not None:
                from grpo.files import write_text_atomic

                write_text_atomic(run_dir / subdir / "config.yaml", OmegaConf.to_yaml(cfg))
        if world_size() > 1 and is_main():
            from grpo.tracking.store import output_root

            publish_run_dir(output_root(to_settings(cfg)), run_dir)
        from grpo.cli.checks import check_once

        settings = to_settings(cfg)
        # a no-op for what the preflight checked; a sweep job with sampled values is checked here
        check_once(settings)
        from grpo.stages import run_stages

        try:
            with handle_signals():
                return run_stages(settings, run_dir)
        except Interrupted as ex:
            if is_main():  # one line per run, not per process
                # after a newline: a progress bar may hold the current line
                line = interrupted_line(ex, run_dir, list(HydraConfig.get().overrides.task))
                print("\n" + line, file=sys.stderr)
            sys.exit(ex.exit_code)
        finally:
            close_group()  # several processes: no abort at exit


def interrupted_line(ex: BaseException, run_dir: Path, overrides: list[str]) -> str:
    """The one line an interrupted run ends with: where it stopped, and the command that goes on."""
    from grpo.run.resume import resumable

    stage, step = getattr(ex, "stage", None), getattr(ex, "step", None)
    if stage == "train" and step is not None:
        where = f"at step {step}"
    else:
        where = f"during {stage or 'the run'}" + (f" at its step {step}" if stage and step else "")
    if not resumable(run_dir):
        again = " ".join(shlex.quote(o) for o in overrides)
        return f"interrupted {where}; nothing to resume yet, run again with: python -m grpo {again}"
    return f"interrupted {where}; resume with: python -m grpo resume={shlex.quote(str(run_dir))}"


def main() -> None:
    settings = preflight(sys.argv[1:])
    if world_size() > 1 and not is_main() and settings is not None:
        sys.argv += _follower_overrides(sys.argv[1:], settings)
    _hydra_main()


def _follower_overrides(argv: list[str], settings: GrpoConfig) -> list[str]:
    """Ranks > 0 of a multi-process launch: rank 0's run dir (grpo/distributed.py)."""
    from grpo.cli.preflight import fail
    from grpo.errors import UserError
    from grpo.tracking.store import output_root

    if "-m" in argv or "--multirun" in argv:
        fail("a multirun sweep under torchrun / accelerate launch: sweep with a Hydra launcher instead")
    if any(a.startswith("hydra.run.dir=") for a in argv):
        return follower_overrides(None)
    try:
        return follower_overrides(wait_for_run_dir(output_root(settings)))
    except UserError as ex:
        fail(str(ex))
        raise


if __name__ == "__main__":
    main()
