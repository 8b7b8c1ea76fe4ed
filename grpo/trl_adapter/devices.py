"""Where the trainers run: CUDA and sharding probes, FSDP2 over CPU processes, and TRL's fused LM
head on CPU.

Probes: `has_cuda()` (pinned host memory only helps copies to a GPU) and `is_sharded(trainer)`
(ZeRO-3 / FSDP: each process holds a shard of the parameters).

FSDP2 on CPU processes (`shard_cpu_processes_if_asked`, called by make_trainer): an FSDP launch
(accelerate/cpu_fsdp2.yaml) over gloo is sharded with torch's fully_shard, which accelerate would
otherwise drop without a word for DDP.

TRL's fused LM head (`score_labelled_positions_on_cpu`): TRL 1.16's trainers replace the LM head's
forward with a chunked log-prob kernel, `model(..., labels=labels, fused_lm_head=True)`. On Triton
devices it projects only the positions whose label is not -100; everywhere else it projects EVERY
position and zeroes the unlabelled ones afterwards, because on compiled accelerators (e.g. Neuron)
a changing number of positions would recompile the kernel each batch. Eager CPU has no
compilation, so the full projection is pure waste there: an SFT row of alphabet-sort is ~75%
prompt, and a GRPO row scores only its completion, yet the head (hidden x vocab per position) and
its backward run over all of them. The switch makes TRL take its own compact path (gather the
labelled positions, run the same kernel, scatter back) for CPU tensors: the same numbers (the
kernel is per position), without the unlabelled positions' work. It wraps TRL's private switch of
that choice (grpo/trl_adapter/internals.py: `fused_head_switch`); when a TRL version no longer
has it, nothing is changed and the trainers run as before.

torch and accelerate are imported inside the functions.
"""

from __future__ import annotations

import os
from typing import Any

from grpo.errors import UserError
from grpo.trl_adapter.internals import fused_head_switch, set_fused_head_switch

_MARK = "_grpo_compact_on_cpu"


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def shard_cpu_processes_if_asked(stage: str = "train") -> bool:
    """FSDP over CPU processes (gloo), when the launch asked for FSDP (`accelerate launch` with an
    FSDP config sets ACCELERATE_USE_FSDP) and the processes run on CPU (ACCELERATE_USE_CPU).

    accelerate 1.15 turns FSDP on only for accelerator device types: AcceleratorState.__init__
    (accelerate/state.py) sets DistributedType.FSDP inside `elif self.distributed_type in
    [MULTI_GPU, MULTI_NPU, ...]`, and CPU processes are MULTI_CPU, so the FSDP config is dropped
    without a word and the run is DDP. torch's own FSDP2 (`fully_shard`) shards on CPU over gloo.
    This builds the accelerator state the trainer will use first, with the launch's FSDP plugin,
    and marks it FSDP: accelerate then prepares the model with `fully_shard` exactly as on GPUs
    (its fsdp2_prepare_model), and the trainers save and load sharded state through accelerate.
    `stage` prefixes its one line. True when it did so (idempotent); False when not asked, or not
    on CPU processes."""
    env = os.environ
    if env.get("ACCELERATE_USE_FSDP", "false").lower() != "true" or int(env.get("WORLD_SIZE", "1")) < 2:
        return False
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    from accelerate import Accelerator

    partial = PartialState()
    if partial.device.type != "cpu" or partial.distributed_type not in (
        DistributedType.MULTI_CPU,
        DistributedType.FSDP,
    ):
        return False  # accelerate's own FSDP (GPUs and other accelerators)
    plugin = FullyShardedDataParallelPlugin()  # from the launch's FSDP_* variables
    if plugin.fsdp_version != 2:
        raise UserError(
            f"FSDP on CPU processes needs fsdp_version: 2 (torch's fully_shard), not {plugin.fsdp_version}"
        )
    state = Accelerator(cpu=True).state  # the state every later Accelerator of this process shares
    if state.distributed_type != DistributedType.FSDP:
        state.fsdp_plugin = plugin
        # what accelerate does for FSDP on GPUs (the end of AcceleratorState.__init__): each later
        # AcceleratorState re-reads the distributed type from the PartialState
        state.distributed_type = DistributedType.FSDP
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        if state.is_main_process:
            print(
                f"[{stage}] FSDP2 over {state.num_processes} CPU processes (gloo): accelerate enables FSDP only "
                "on accelerators, so grpo marks its state FSDP; the model is sharded by torch's fully_shard"
            )
    return True


def is_sharded(trainer: Any) -> bool:
    """ZeRO-3 or FSDP: each process holds only a shard of the parameters."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return bool(
        getattr(trainer, "is_deepspeed_enabled", False) and plugin is not None and plugin.zero_stage == 3
    )


def score_labelled_positions_on_cpu() -> bool:
    """Make TRL's fused LM head project only the labelled positions of CPU tensors (see the module
    docstring). Idempotent; True when the switch is (now) in place, False when this TRL version
    has no such switch."""
    original = fused_head_switch()
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    def compact_on_cpu(device: Any) -> bool:
        return getattr(device, "type", None) == "cpu" or bool(original(device))

    setattr(compact_on_cpu, _MARK, True)
    compact_on_cpu.__wrapped__ = original  # type: ignore[attr-defined]
    set_fused_head_switch(compact_on_cpu)
    return True
