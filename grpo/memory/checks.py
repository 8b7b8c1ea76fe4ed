"""The settings rules of the memory plan (walked by grpo/cli/checks.py). Light."""

from __future__ import annotations

from grpo.config import MemoryConfig
from grpo.errors import reject


def check_memory(m: MemoryConfig) -> None:
    if m.device_gib is not None and not m.device_gib > 0:
        reject(f"memory.device_gib={m.device_gib} must be > 0 (GiB of the GPU to plan for), or null")
    if m.reserve_gib < 0:
        reject(f"memory.reserve_gib={m.reserve_gib} must be >= 0 (GiB kept free for the CUDA context)")
    if m.device_gib is not None and m.reserve_gib >= m.device_gib:
        reject(
            f"memory.reserve_gib={m.reserve_gib:g} leaves nothing of memory.device_gib={m.device_gib:g}: "
            "lower the reserve"
        )
