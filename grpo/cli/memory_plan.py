"""Will it fit? The memory plan of a run, without running it (and without a GPU).

    python -m grpo.cli.memory_plan +env=alphabet_sort model=qwen3_0_6b memory.device_gib=24
    python -m grpo.cli.memory_plan +env=alphabet_sort model=qwen3_0_6b memory.device_gib=80 --architecture qwen3_4b_random
    python -m grpo.cli.memory_plan ... --devices 24,48,80,141

The same overrides as `python -m grpo`, composed and checked the same way (a bad override is one
line, exit 2), except the rules about this machine (vLLM installed, a CUDA GPU): the run is planned
for its device, memory.device_gib, else this machine's first CUDA GPU, else its memory. The plan is
measured on CPU in seconds (grpo/memory/) and printed as a table: a row per phase, a column per
part, the peak, the verdict and what the plan assumed. Exit code 0 when the run fits, 1 when not.

    --architecture PRESET   the policy's architecture from a random-weights model preset
                            (qwen3_0_6b_random, qwen3_4b_random), every other setting as composed:
                            no config.json needed (offline, or a model not downloaded yet)
    --devices 24,48,...     the verdict on GPUs of these sizes (GiB) too, one line each
    --fresh                 measure again instead of reading the cached plan
"""

from __future__ import annotations

import sys

from grpo.cli.preflight import check, exit_on_user_error, fail
from grpo.errors import UserError


def _option(args: list[str], name: str) -> tuple[list[str], str | None]:
    """`args` without `name VALUE` (or `name=VALUE`), and VALUE."""
    for i, arg in enumerate(args):
        if arg == name:
            if i + 1 >= len(args):
                raise UserError(f"{name} needs a value")
            return args[:i] + args[i + 2 :], args[i + 1]
        if arg.startswith(name + "="):
            return args[:i] + args[i + 1 :], arg.partition("=")[2]
    return args, None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    from grpo.memory.models import PlanSkipped

    with exit_on_user_error():
        fresh = "--fresh" in args
        args = [a for a in args if a != "--fresh"]
        args, architecture = _option(args, "--architecture")
        args, devices = _option(args, "--devices")
        sizes = _sizes(devices)
        settings = check(args, machine=False)
        if architecture:
            from grpo.compose import group_options
            from grpo.memory.models import with_random_weights

            presets = [p for p in group_options("model") if p.endswith("_random")]
            if architecture not in presets:
                raise UserError(
                    f"--architecture {architecture}: not a random-weights model preset ({', '.join(presets)})"
                )
            settings = with_random_weights(settings, architecture)
        from grpo.memory.plan import plan_memory

        try:
            plan = plan_memory(settings, force=True, use_cache=not fresh)
        except PlanSkipped as ex:
            fail(f"no memory plan: {ex} (--architecture qwen3_0_6b_random plans an architecture without it)")
            return 2
    assert plan is not None
    print(plan.table())
    if sizes:
        from grpo.memory.device import GIB, Device

        print()
        for size in sizes:
            on = plan.on(Device("cuda", int(size * GIB), f"a {size:g} GiB GPU", plan.device.reserve_bytes))
            print(f"{size:g} GiB: peak {on.peak.total / GIB:.1f} GiB in {on.peak.name}, {on.verdict()}")
    return 0 if plan.fits else 1


def _sizes(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        sizes = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--devices {text}: GiB sizes separated by commas, e.g. 24,48,80,141") from None
    if not sizes or any(not size > 0 for size in sizes):
        raise UserError(f"--devices {text}: GiB sizes > 0 separated by commas, e.g. 24,48,80,141")
    return sizes


if __name__ == "__main__":
    from grpo.errors import quiet_closed_pipe

    quiet_closed_pipe()
    from grpo.trl_adapter.logs import quiet_library_notices

    quiet_library_notices()
    sys.exit(main())
