"""Several processes, one run: who does what when torchrun / accelerate launch start N copies.

The launchers (torchrun, `accelerate launch`, torchrun inside `srun`) set RANK, WORLD_SIZE and
LOCAL_RANK; accelerate builds the process group when the first trainer's arguments are made. This
module reads the environment only (no torch import), so the entry point can use it before Hydra:

- `rank()`, `world_size()`, `is_main()`: the global rank; rank 0 is the main process.
  `has_cuda_gpu()`: whether this machine shows an NVIDIA GPU (the settings rules ask, before torch).
- One run dir: Hydra's `${now:}` differs between processes started a second apart, and each
  process would take its own folder. Rank 0 takes it (grpo/files.py) and publishes it in
  `<output_root>/.rendezvous/<launch id>.json`; the other ranks wait for that file and run with
  `hydra.run.dir=<it>`, without writing Hydra's files or log there (`follower_overrides`). With
  several machines, output_root must be a shared file system (the checkpoints need one anyway).
- Side effects on rank 0 only: the MLflow run (grpo/tracking/), evaluations, plots, markers and
  console lines. The other ranks train and exit.
- A submitit job of several tasks (SLURM, +launcher=slurm_multigpu): `adopt_submitit_tasks` exports
  the same variables from SLURM's, so each task is one rank of the job's own run dir.
- `barrier()` and `any_rank(flag)`: collectives over the process group when there is one (a
  no-op in a single process), for a save done by rank 0 and for a stop request seen by any rank.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from grpo.errors import UserError
from grpo.files import write_json_atomic
from grpo.run.layout import RENDEZVOUS_DIR

# how long the other ranks wait for rank 0 to publish the run dir
RENDEZVOUS_TIMEOUT_S = 600.0


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_main() -> bool:
    return rank() == 0


def has_cuda_gpu() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def print_main(*args: object, **kwargs: object) -> None:
    """print() on rank 0 only: one console line per run, not one per process."""
    if is_main():
        print(*args, **kwargs)  # type: ignore[call-overload]


def launch_id() -> str:
    """The same id in every process of one launch, different across launches."""
    for key in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(key)
        if value and value != "none":
            step = os.environ.get("SLURM_STEP_ID", "")
            return f"{value}.{step}" if key == "SLURM_JOB_ID" and step else value
    return f"{os.environ.get('MASTER_ADDR', 'localhost')}-{os.environ.get('MASTER_PORT', '0')}"


def rendezvous_file(output_root: str | os.PathLike[str]) -> Path:
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in launch_id())
    return Path(output_root) / RENDEZVOUS_DIR / f"{safe}.json"


def publish_run_dir(output_root: str | os.PathLike[str], run_dir: Path) -> None:
    """Rank 0: tell the other ranks of this launch which folder the run took."""
    write_json_atomic(rendezvous_file(output_root), {"run_dir": str(run_dir), "world_size": world_size()})


def wait_for_run_dir(output_root: str | os.PathLike[str], timeout: float = RENDEZVOUS_TIMEOUT_S) -> Path:
    """Ranks > 0: the folder rank 0 took (UserError after `timeout` seconds)."""
    path = rendezvous_file(output_root)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Path(json.loads(path.read_text(encoding="utf-8"))["run_dir"])
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline:
                raise UserError(
                    f"rank {rank()}: rank 0 did not publish the run dir in {path} within {timeout:.0f} s "
                    "(several machines need output_root on a shared file system)"
                ) from None
            time.sleep(0.1)


def follower_overrides(run_dir: Path | None) -> list[str]:
    """Hydra overrides for ranks > 0: rank 0's folder (None: the command line names it), and no
    .hydra files or log of their own there."""
    where = [f"hydra.run.dir={run_dir}"] if run_dir is not None else []
    return [*where, "hydra.output_subdir=null", "hydra/job_logging=stdout"]


def adopt_submitit_tasks() -> None:
    """In a submitit job of several tasks (+launcher=slurm_multigpu), every task is one rank:
    export the torch distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) from SLURM's, as
    torchrun would have, before anything reads it. A no-op elsewhere or when it is set already."""
    if "SUBMITIT_EXECUTOR" not in os.environ or "RANK" in os.environ:
        return
    import submitit
    import torch

    env = submitit.JobEnvironment()
    if env.num_tasks > 1:
        cuda = torch.cuda.is_available()
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=cuda)


def _group() -> bool:
    """Whether there is a process group of several ranks, making accelerate's (it reads the
    launcher's environment) when the launch has several processes and none exists yet."""
    if world_size() <= 1:
        return False
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState()
    return dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if _group():
        import torch.distributed as dist

        dist.barrier()


def any_rank(flag: bool) -> bool:
    """Whether `flag` is true on any rank (every rank must call it at the same point)."""
    if not _group():
        return flag
    import torch
    import torch.distributed as dist

    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def close_group() -> None:
    """Tear the process group down before the process exits: a gloo group left to interpreter
    shutdown can abort the process ("terminate called without an active exception"), notably on a
    rank that finishes first while rank 0 still evaluates. Local, no collective."""
    if world_size() <= 1 or "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
