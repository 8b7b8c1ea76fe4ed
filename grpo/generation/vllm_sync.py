"""The policy's weights into a vLLM engine where TRL's own sync cannot run: vLLM's CPU build.

TRL syncs a colocated engine by calling its model's `load_weights` tensor by tensor, and a server
over NCCL. On vLLM's CPU build (0.29) neither works: after loading, its CPU linear layers pack
their weights into oneDNN / AMX kernels and drop the plain tensors (`'Parameter' object has no
attribute 'weight_loader'` at TRL's first sync of a float32 or bfloat16 model), and its weight
transfer engines are NCCL and CUDA IPC only (TRL: `NotImplementedError: Weight synchronization
runs on vLLM's NCCL weight-transfer engine, which needs a CUDA device`). Both go through vLLM's
own reload instead (`reload_weights` of its worker: the layers go back to checkpoint form, take
the weights, and are packed again):

- `reload_colocated(llm, model)`: the engine in this process reloads from the policy's tensors
  (`ReloadedColocated`: such an engine where TRL's stands in the trainer);
- `FileSyncedServer`: a vLLM server (started with VLLM_SERVER_DEV_MODE=1, which opens its
  /collective_rpc route) reloads from a safetensors file the trainer writes after each optimizer
  step into shared memory (the same file path generation ahead of training uses with grpo's own
  server: grpo/generation/generator.py); it stands where TRL's server engine stands in the
  trainer (grpo/trl_adapter/internals.py: `correct_for_external_sampler`).

The whole state dict goes each time (tied embeddings included: without `lm_head.weight` vLLM's
reload leaves its LM head unloaded).
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo.generation.served import GeneratorError, call_server


class ReloadedColocated:
    """A colocated engine of vLLM's CPU build, built by grpo (grpo/generation/vllm.py:
    `colocated_llm`, in the policy's dtype: TRL builds its engine with vLLM's "auto" dtype, which
    halves a float32 model, to bfloat16 on CPU: ~0.006 nats a token from the trainer's log-probs,
    measured on model=small_alphabet_sort), whose weights come through `reload_colocated`. Looks
    like what grpo reads of TRL's colocated engine (`mode`, `llm`, `sync_weights()`); `model`
    returns the trainer's current policy."""

    mode = "colocate"
    vllm_client = None
    server_base_url = None
    server_host = ""
    server_port = 0
    server_timeout = 0.0

    def __init__(self, llm: Any, model: Callable[[], Any]):
        self.llm = llm
        self._model = model

    def sync_weights(self) -> None:
        reload_colocated(self.llm, self._model())


class _RotaryNotice(logging.Filter):
    """Drops vLLM's warning `RotaryEmbedding: Failed to load weights` at every reload: a rotary
    embedding has no weights in a checkpoint (its table is computed, and kept); the same warning
    about any other layer still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.args and record.args[0] == "RotaryEmbedding" and "Failed to load" in str(record.msg)
        )


_ROTARY_NOTICE = _RotaryNotice()


def reload_colocated(llm: Any, model: Any) -> None:
    """Load the policy's current weights (a LoRA adapter merged in) into a colocated vLLM engine
    through vLLM's reload, then drop its prefix cache (computed with the old weights)."""
    from grpo.models.weights import plain_state_dict

    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if _ROTARY_NOTICE not in layerwise.filters:
        layerwise.addFilter(_ROTARY_NOTICE)
    state = plain_state_dict(model)
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state.items())})
    llm.reset_prefix_cache()


class FileSyncedServer:
    """A vLLM server whose weights come from files (vLLM's CPU build; see the module docstring).

    Looks like what grpo reads of TRL's server engine (`mode`, `vllm_client`, `server_base_url`,
    `server_host`, `server_port`, `server_timeout`, `sync_weights()`), so the rollout function,
    evaluation and generation ahead of training use it as they use TRL's. `model` returns the
    trainer's current policy. Generation goes through TRL's client (its /v1/completions calls);
    `sync_weights` writes the weights and has the server reload them before it returns."""

    mode = "server"

    def __init__(
        self,
        model: Callable[[], Any],
        *,
        base_url: str | None,
        host: str,
        port: int,
        timeout_s: float,
    ):
        from grpo.trl_adapter.internals import vllm_server_client

        self._model = model
        self.server_base_url = base_url
        self.server_host = host
        self.server_port = int(port)
        self.server_timeout = float(timeout_s)
        # TRL's client waits for the server (check_server) as it does with NCCL; it opens no
        # weight channel until asked (init_communicator), which this class never does
        self.vllm_client = vllm_server_client(base_url, host, port, timeout_s)
        self.url = str(self.vllm_client.base_url).rstrip("/")
        self._folder: Path | None = None
        self._versions: list[Path] = []
        self.version = 0

    def check(self, model: Any) -> str | None:
        """Before any step: the server opens the route the weights go through, and on CPU takes
        whole prompts (GeneratorError naming the fix if not); it samples in the trainer's dtype
        (else the line that says so)."""
        try:
            info = call_server(self.url, "/server_info?config_format=json", timeout_s=self.server_timeout)
        except GeneratorError as ex:
            if "404" in str(ex):
                raise GeneratorError(
                    f"the vLLM server at {self.url} does not open its development routes, through which it "
                    "reloads the trainer's weights: restart it with VLLM_SERVER_DEV_MODE=1 (docs/generation.md)"
                ) from None
            raise
        config = info.get("vllm_config", {})
        on_cpu = str(config.get("device_config", {}).get("device", "")) == "cpu"
        if on_cpu and config.get("scheduler_config", {}).get("enable_chunked_prefill"):
            raise GeneratorError(
                f"the vLLM server at {self.url} splits long prompts across steps (chunked prefill, its default), "
                "which crashes vLLM's CPU build on seeded requests (RuntimeError: CPU Generator does not use "
                "offset): restart it with --no-enable-chunked-prefill (docs/generation.md: vLLM on CPU)"
            )
        served = str(config.get("model_config", {}).get("dtype", "")).removeprefix("torch.")
        trained = str(model.dtype).removeprefix("torch.")
        if served and served != trained:
            return (
                f"[generation] note: the vLLM server at {self.url} samples in {served}, the trainer trains in "
                f"{trained}: importance sampling corrects for the gap; start the server with --dtype {trained} "
                "to sample from the very model that trains"
            )
        return None

    def sync_weights(self) -> None:
        """The trainer's weights into the server: a file in shared memory, reloaded by the server
        through /collective_rpc (vLLM's worker `reload_weights`), then its prefix cache reset."""
        from grpo.generation.generator import shared_memory_dir
        from grpo.models.weights import save_weights

        model = self._model()
        if self._folder is None:
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            self._folder, note = shared_memory_dir(size)
            if note:
                print(note, file=sys.stderr, flush=True)
        self.version += 1
        folder = self._folder / f"v{self.version:08d}"
        # one file per folder: vLLM loads every *.safetensors file of the folder it is given
        save_weights(model, folder / "model.safetensors")
        try:
            call_server(
                self.url,
                "/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}},
                timeout_s=self.server_timeout,
            )
            call_server(self.url, "/reset_prefix_cache", {}, timeout_s=self.server_timeout)
        except GeneratorError as ex:
            if "404" in str(ex):
                raise GeneratorError(
                    f"the vLLM server at {self.url} has no /collective_rpc route: start it with "
                    "VLLM_SERVER_DEV_MODE=1 (docs/generation.md: vLLM on CPU)"
                ) from None
            raise
        self._versions.append(folder)
        while len(self._versions) > 1:
            shutil.rmtree(self._versions.pop(0), ignore_errors=True)

    def close(self) -> None:
        """Remove the weight files."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
            self._versions.clear()
