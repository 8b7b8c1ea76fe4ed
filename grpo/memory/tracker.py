"""PyTorch's MemTracker, keeping the peak only, and a phase measured with it.

MemTracker (torch.distributed._tools.mem_tracker) is a TorchDispatchMode: every operation's output
storages are recorded with a category (parameter, buffer, gradient, activation, temporary,
optimizer state) until they are freed, on real or fake tensors alike. After each operation it
also updates the peak of every module it has seen, a loop over all modules per operation: on a
28-layer model that loop is 90% of the time (40 s of a fake fwd/bwd against 4 s). The plan needs
the whole step's peak only, so `PeakTracker` keeps that one (the same snapshot MemTracker keeps
for it) and skips the per-module loop. Frozen parameters (LoRA's base weights) get no gradient
hook, which torch would refuse.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

# MemTracker's categories -> the plan's names
CATEGORIES = {
    "Parameter": "weights",
    "Buffer": "weights",
    "Gradient": "gradients",
    "Optstate": "optimizer states",
    "Activation": "activations",
    "Temp": "temporaries",
    "Other": "temporaries",
}


class _NoHook:
    """The removable handle of a hook that was never registered."""

    def remove(self) -> None:
        return None


_NO_HOOK = _NoHook()


def _tracker_class() -> type:
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

    class PeakTracker(MemTracker):
        """MemTracker with only the global peak updated after each operation, and a model that
        runs again (decoding step by step) taken as the next iteration: MemTracker refuses a root
        module's second forward unless its per-module statistics are reset, which the global peak
        does not need."""

        def _track_module_params_and_buffers(self, module: Any, install_grad_hooks: bool = True) -> Any:
            # MemTracker hooks every parameter's gradient, and torch refuses a hook on a frozen one
            # (a LoRA run's base weights): those get a handle that hooks nothing
            for param in module.parameters():
                if not param.requires_grad:
                    self._param_to_grad_hook_handles.setdefault(param, (_NO_HOOK, _NO_HOOK))
            return super()._track_module_params_and_buffers(module, install_grad_hooks)

        def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
            if module in self.memory_tracking and not self._mod_tracker.is_bw:
                name = self._mod_tracker.get_known_fqn(module)
                if set(self._mod_tracker.parents) - {name} == {"Global"}:
                    self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

        def _update_peak_stats(self, peak_state: Any) -> None:
            for device, snapshot in self._curr_mem_snap.items():
                if self._peak_mem.get(device, 0) < snapshot[_TOTAL_KEY]:
                    self._peak_mem[device] = snapshot[_TOTAL_KEY]
                    self._peak_mem_snap[device] = dict(snapshot)

    return PeakTracker


def measure(run: Callable[[], Any], tracked: Iterable[Any] = (), at: str = "peak") -> dict[str, int]:
    """Bytes by category (the plan's names) at the peak of `run()` (`at="current"`: what is alive
    when it returns); `tracked`: modules and optimizers that exist before it (their parameters,
    gradients and states count from the start)."""
    tracker = _tracker_class()()
    objects = [o for o in tracked if o is not None]
    with warnings.catch_warnings():
        # ModTracker warns when a module runs twice in one forward (checkpointing recomputes)
        warnings.simplefilter("ignore")
        if objects:
            tracker.track_external(*objects)
        with tracker:
            run()
    parts: dict[str, int] = {}
    for snapshot in tracker.get_tracker_snapshot(at).values():
        for category, size in snapshot.items():
            name = CATEGORIES.get(getattr(category, "value", str(category)))
            if name is not None and size:
                parts[name] = parts.get(name, 0) + int(size)
    return parts
