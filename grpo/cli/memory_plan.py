"""Will it fit? The memory plan of a run, without running it (and without a GPU).

    python -m grpo.cli.memory_plan +env=alphabet_sort model=qwen3_0_6b memory.device_gib=24
    python -m grpo.cli.memory_plan +experiment=alphabet_sort_hub_recipe memory.device_gib=80

The same overrides as `python -m grpo`, composed and checked the same way (a bad override is one
line, exit 2); then the plan of that run on its device (memory.device_gib, else this machine's
first CUDA GPU, else its memory), measured on CPU in seconds (grpo/memory/), printed as a table:
a row per phase, a column per part, the peak, the verdict and what the plan assumed. Exit code 0
when the run fits, 1 when it does not. `--fresh` measures again instead of reading the cache.
"""

from __future__ import annotations

import sys

from grpo.cli.preflight import check, exit_on_user_error, fail


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    fresh = "--fresh" in args
    args = [a for a in args if a != "--fresh"]
    from grpo.memory.models import PlanSkipped
    from grpo.memory.plan import plan_memory

    with exit_on_user_error():
        settings = check(args)
        try:
            plan = plan_memory(settings, force=True, use_cache=not fresh)
        except PlanSkipped as ex:
            fail(f"no memory plan: {ex}")
            return 2
    assert plan is not None
    print(plan.table())
    return 0 if plan.fits else 1


if __name__ == "__main__":
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()
    sys.exit(main())
