"""The memory plan of a run: what each stage holds on the device at its peak, before any model loads.

    plan = plan_memory(settings)              # None when the run is not planned (memory.plan)
    print(*plan.header(), sep="\n")          # the run's header lines; plan.table() in full
    plan.refusal(settings)                    # the one line of a run that cannot fit, or None
    plan_run(settings)                        # what `python -m grpo` does: print, or refuse (UserError)

How it measures (grpo/memory/phases.py): the run's models are built under PyTorch's FakeTensorMode
(tensors with shapes and dtypes, no storage) from their configs, and each phase of the run does
its real work on them under PyTorch's MemTracker (torch.distributed._tools.mem_tracker), which
counts every tensor's storage as the operations create and free it, by category (parameters,
gradients, optimizer states, activations, temporaries). The phases: the GRPO micro-step (the
policy with LoRA, TRL's fused LM head and gradient checkpointing as the trainer sets them, TRL's
per-token GRPO loss, the optimizer's step with its states), generation (grpo's hf KV cache filled
to the longest conversation; vLLM's share of the GPU), the learned reward model's scoring, and the
SFT and reward-model stages where the run lists them. A phase's peak is measured, not computed;
what no fake tensor can show (the CUDA context, the allocator's fragmentation, vLLM's own
reservation) is added from the settings and said in the plan.

Modules: device.py (which device, how much memory), tracker.py (MemTracker, peak only),
models.py (the run's models, fake), phases.py (each phase's peak), plan.py (the plan, its cache,
its report and verdict), checks.py (the memory group's settings rules). torch, transformers, trl
and peft are imported inside the functions that measure; importing this package is light.
"""

from __future__ import annotations

from grpo.memory.plan import MemoryPlan, plan_memory, plan_run

__all__ = ["MemoryPlan", "plan_memory", "plan_run"]
