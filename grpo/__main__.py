"""`python -m grpo +env=NAME [group=option ...] [key=value ...]`: compose, check once, run the stages.

Composition and the checks run before any heavy import, so a bad override comes back in about
a second as one line; torch, transformers and trl are imported by the stages that use them.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from grpo.cli import exit_on_user_error, preflight
from grpo.config import register_schema, to_settings

register_schema()


@hydra.main(version_base="1.3", config_path="pkg://grpo.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> float | None:
    with exit_on_user_error():
        from grpo.validation import check_once

        settings = to_settings(cfg)
        # a no-op for what the preflight checked; a sweep job with sampled values is checked here
        check_once(settings)
        from grpo.stages import run_stages

        return run_stages(settings)


def main() -> None:
    preflight(sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
