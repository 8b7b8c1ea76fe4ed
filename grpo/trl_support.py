"""What grpo adds to TRL, shared by its three training stages (GRPO, SFT, the reward model).

    args = build_trl_config(GRPOConfig, kwargs, "trainer", "trainer.extra")   # one-line errors
    trainer = make_trainer(GRPOTrainer, "train", [progress, tracker_cb], model=..., args=args, ...)
    seconds = run_trainer(trainer, "train", resume_from)   # Interrupted after a graceful stop
    point_model_at(model, paths.sft)                        # where TRL loads its second copy from

Every stage builds its TRL trainer the same way:
- config: TRL's config dataclass from our settings; an unknown field (a typo in `*.extra`, a field
  another TRL version dropped) or TRL's own rejection of a value is a one-line UserError naming
  the config block to fix (`build_trl_config`);
- callbacks: the stage's own (its one compact progress line, the tracker's metrics), then the
  checkpoint marker (grpo/run/checkpoints.py), then the stop callback last so that its save
  request follows every other callback of the step (grpo/run/interrupt.py); transformers'
  PrinterCallback is removed, since each stage prints its own line (`make_trainer`);
- training: `trainer.train(resume_from_checkpoint=...)`, then the stop check (`run_trainer`).

Probes: `has_cuda()` (pinned host memory only helps copies to a GPU) and `is_sharded(trainer)`
(ZeRO-3 / FSDP: each process holds a shard of the parameters).

FSDP2 on CPU processes (`shard_cpu_processes_if_asked`, called by `make_trainer`): an FSDP launch
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
kernel is per position), without the unlabelled positions' work. It wraps TRL's private
`trl.trainer.utils._use_triton`, the one switch of that choice; when a TRL version no longer has
it, nothing is changed and the trainers run as before.

torch, transformers and trl are imported inside the functions.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from grpo.errors import UserError
from grpo.run.checkpoints import marker_callback
from grpo.run.interrupt import check_stopped, stop_callback

_MARK = "_grpo_compact_on_cpu"


def build_trl_config(config_cls: type, kwargs: dict[str, Any], block: str, extra_key: str) -> Any:
    """`config_cls(**kwargs)`; `block` names our config section (e.g. "trainer"), `extra_key`
    the key where users pass extra TRL fields (e.g. "trainer.extra")."""
    known = {f.name for f in dataclasses.fields(config_cls)}
    kwargs = _checkpointing_spelling(kwargs, known)
    unknown = sorted(k for k in kwargs if k not in known)
    if unknown:
        raise UserError(f"{extra_key}: {', '.join(unknown)} is not a trl.{config_cls.__name__} field")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as ex:
        reason = " ".join(str(ex).split())
        raise UserError(f"{block}: TRL rejected the config: {reason}") from None


def _checkpointing_spelling(kwargs: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The stages ask for `activation_checkpointing` (transformers' name since 5.2x, where
    `gradient_checkpointing` is its deprecated alias); earlier transformers 5 releases (5.17, on the
    GPU machines here) have only `gradient_checkpointing`."""
    if (
        "activation_checkpointing" in kwargs
        and "activation_checkpointing" not in known
        and "gradient_checkpointing" in known
    ):
        kwargs = dict(kwargs)
        kwargs["gradient_checkpointing"] = kwargs.pop("activation_checkpointing")
    return kwargs


def make_trainer(trainer_cls: type, stage: str, callbacks: Sequence[Any] = (), **kwargs: Any) -> Any:
    """`trainer_cls(**kwargs)` for `stage` (train, sft, reward_model) with grpo's callbacks (see
    the module docstring): `callbacks`, the checkpoint marker, the stop callback last."""
    from transformers.trainer_callback import PrinterCallback

    score_labelled_positions_on_cpu()  # the loss head skips unlabelled positions on CPU too
    quiet_library_notices(kwargs.get("model"))
    shard_cpu_processes_if_asked(stage)
    trainer = trainer_cls(callbacks=[*callbacks, marker_callback(), stop_callback(stage)], **kwargs)
    trainer.remove_callback(PrinterCallback)  # the stage prints one compact line per log instead
    return trainer


def quiet_library_notices(model: Any = None) -> None:
    """Silence, each at its source, what the libraries print that is not the user's business:
    - transformers' FutureWarning for `is_gradient_checkpointing`, which TRL (not the user) reads
      at every generation and checkpoint (trl/models/utils.py);
    - transformers' "Loading weights" / "Writing model shards" bars (grpo prints what it loads);
    - "mtime may not be reliable on this filesystem" when the trainer rotates checkpoints;
    - accelerate's INFO lines for each FSDP shard saved or loaded;
    - on resume, "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" when
      the missing keys are tied to parameters that were loaded (the tiny / small models and
      Qwen3-0.6B tie the LM head to the embeddings; safetensors stores a tied tensor once).
    Other warnings of these libraries still print. Idempotent."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings(
        "ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning
    )
    hf_logging.disable_progress_bar()
    # FSDP checkpoints: accelerate logs every save and load of each shard at INFO
    logging.getLogger("accelerate.utils.fsdp_utils").setLevel(logging.WARNING)
    # checkpoint rotation on filesystems with coarse mtimes (overlay, NFS): it then orders the
    # checkpoints by step number, which is what grpo's own resume does anyway (grpo/run/checkpoints.py)
    utils_log = hf_logging.get_logger("transformers.trainer_utils")
    if not any(isinstance(f, _MtimeFilter) for f in utils_log.filters):
        utils_log.addFilter(_MtimeFilter())
    tied = tied_parameter_names(model) if model is not None else set()
    if tied:
        trainer_log = hf_logging.get_logger("transformers.trainer")
        for old in [f for f in trainer_log.filters if isinstance(f, _TiedKeysFilter)]:
            trainer_log.removeFilter(old)
        trainer_log.addFilter(_TiedKeysFilter(tied))


def tied_parameter_names(model: Any) -> set[str]:
    """Names of parameters that share their tensor with another parameter (tied weights)."""
    by_tensor: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(param), []).append(name)
    return {name for names in by_tensor.values() if len(names) > 1 for name in names}


class _MtimeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("mtime may not be reliable on this filesystem")


class _TiedKeysFilter(logging.Filter):
    """Drops transformers' missing-keys warning when every missing key is a tied parameter."""

    PREFIX = "There were missing keys in the checkpoint model loaded: "

    def __init__(self, tied: set[str]) -> None:
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        try:
            missing = ast.literal_eval(message[len(self.PREFIX) :].rstrip("."))
        except (ValueError, SyntaxError):
            return True
        # peft wraps names (base_model.model.lm_head.weight): compare by suffix
        return not all(any(str(k).endswith(t) or t.endswith(str(k)) for t in self.tied) for k in missing)


def run_trainer(trainer: Any, stage: str, resume_from: str | os.PathLike[str] | None = None) -> float:
    """Train (from the checkpoint `resume_from` when given); the seconds it took. Raises
    Interrupted when a first Ctrl-C / SIGTERM stopped it (the step's checkpoint is on disk)."""
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.perf_counter() - start
    check_stopped(stage)
    return seconds


def point_model_at(model: Any, path: str | os.PathLike[str]) -> None:
    """TRL loads a second copy of the policy from its path (the reference model when beta > 0
    without LoRA: config._name_or_path; a colocated vLLM engine: name_or_path): point both at
    `path`, where these weights are saved."""
    model.config._name_or_path = str(path)
    model.name_or_path = str(path)


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
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    original = getattr(trl_utils, "_use_triton", None)
    if original is None or not callable(original):
        return False
    if getattr(original, _MARK, False):
        return True

    def compact_on_cpu(device: Any) -> bool:
        return getattr(device, "type", None) == "cpu" or bool(original(device))

    setattr(compact_on_cpu, _MARK, True)
    compact_on_cpu.__wrapped__ = original  # type: ignore[attr-defined]
    trl_utils._use_triton = compact_on_cpu
    return True


def speed_and_eta(elapsed: float, steps_done: int, global_step: int, max_steps: int) -> str:
    """`1.90 s/step, eta 0:01:08` for a stage's progress line: seconds per step over the steps this
    process ran (a resumed run's earlier steps took no time here), times the steps left."""
    if steps_done <= 0:
        return ""
    per_step = elapsed / steps_done
    return f"{per_step:.2f} s/step, eta {clock(per_step * max(max_steps - global_step, 0))}"


def clock(seconds: float) -> str:
    """H:MM:SS, or ? for a time not known yet."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
