"""The device a run is planned for, and how much memory it has.

A run is planned for a GPU when a CUDA GPU is visible (its total memory, torch.cuda) or when
`memory.device_gib` states one (a GPU you do not have here: the plan is the same, measured on
CPU); otherwise for the host (its physical memory). Light: torch is imported only when a CUDA GPU
is visible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from grpo.config import MemoryConfig
from grpo.run.distributed import has_cuda_gpu

GIB = 2**30


@dataclass(frozen=True)
class Device:
    """What the plan is measured for: `kind` cuda (TRL's Triton kernels, vLLM's share of the GPU)
    or cpu; its total memory; and how it was learned, for the plan's first line."""

    kind: str
    total_bytes: int
    name: str
    # GiB kept free for what the plan cannot see (a GPU's context and fragmentation; 0 on CPU)
    reserve_bytes: int = 0

    @property
    def usable_bytes(self) -> int:
        return max(0, self.total_bytes - self.reserve_bytes)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"


def target_device(m: MemoryConfig) -> Device:
    """The device of this run: memory.device_gib, else the first visible CUDA GPU, else the host."""
    reserve = int(m.reserve_gib * GIB)
    if m.device_gib is not None:
        return Device(
            "cuda", int(m.device_gib * GIB), f"a {m.device_gib:g} GiB GPU (memory.device_gib)", reserve
        )
    if has_cuda_gpu():
        import torch

        if torch.cuda.is_available():
            index = int(os.environ.get("LOCAL_RANK", "0") or 0) % torch.cuda.device_count()
            props = torch.cuda.get_device_properties(index)
            name = f"{props.name} (cuda:{index}, {props.total_memory / GIB:.1f} GiB)"
            return Device("cuda", int(props.total_memory), name, reserve)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Device("cpu", int(total), f"the host's memory ({total / GIB:.1f} GiB, CPU)")


def planned_for(m: MemoryConfig) -> bool:
    """Whether this run gets a plan: memory.plan, or (null) when it is planned for a GPU."""
    if m.plan is not None:
        return bool(m.plan)
    return m.device_gib is not None or has_cuda_gpu()
