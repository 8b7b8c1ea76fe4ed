"""A trainer's vLLM engine where TRL's cannot run: vLLM's CPU build, a trainer without CUDA.

TRL's colocated engine syncs weights tensor by tensor into layers the CPU build has repacked, and
is built in vLLM's "auto" dtype (a float32 policy sampled in bfloat16); its server engine sends
weights over NCCL, which needs CUDA. There, the trainer is built without TRL's engine
(grpo/train/grpo_args.py: `grpo_builds_engine`) and `install_engine` gives it grpo's, where TRL's
would stand (grpo/trl_adapter/internals.py: `correct_for_external_sampler`: TRL syncs it before
each generation batch and corrects the loss with its sampling log-probs, as with its own):

- a colocated engine of the CPU build (`ReloadedColocated`): built here in the policy's dtype,
  its KV cache sized from the run and said in one line, weights reloaded through vLLM;
- a vLLM server (`FileSyncedServer`): weights through a safetensors file it reloads.

vLLM loads inside the functions.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import UserError
from grpo.generation.served import GeneratorError
from grpo.train.geometry import step_geometry
from grpo.train.grpo_args import grpo_builds_engine
from grpo.trl_adapter.internals import correct_for_external_sampler


def install_engine(trainer: Any, settings: GrpoConfig, model_path: str) -> None:
    """grpo's vLLM engine in the trainer where TRL's cannot run (nothing otherwise). `model_path`:
    a folder or hub id of the policy's architecture and tokenizer, which a colocated engine loads
    first (TRL syncs the trainer's weights into it before the first batch)."""
    g = settings.generation
    if not grpo_builds_engine(g.backend):
        return
    if g.backend == "vllm_colocate":
        from grpo.generation.vllm import colocated_llm
        from grpo.generation.vllm_sync import ReloadedColocated

        llm = colocated_llm(
            model_path,
            g,
            settings.model,
            dtype=str(trainer.model.dtype).removeprefix("torch."),
            # the engine generates a whole generation batch of this process at once
            conversations=step_geometry(settings.trainer).local_completions_per_step,
        )
        engine: Any = ReloadedColocated(llm, lambda: trainer.model)
    else:
        from grpo.generation.vllm import server_base_url
        from grpo.generation.vllm_sync import FileSyncedServer

        engine = FileSyncedServer(
            lambda: trainer.model,
            base_url=server_base_url(g),
            host=g.host,
            port=g.port,
            timeout_s=g.timeout_s,
        )
        atexit.register(engine.close)
        try:
            note = engine.check(trainer.model)
        except GeneratorError as ex:
            raise UserError(f"generation=vllm_server: {ex}") from None
        if note:
            print(note, file=sys.stderr, flush=True)
        print(
            f"[generation] the vLLM server at {engine.url} takes the trainer's weights from a file after each "
            "step (no CUDA here for TRL's NCCL channel)",
            file=sys.stderr,
            flush=True,
        )
    correct_for_external_sampler(trainer, engine.sync_weights, engine=engine)
