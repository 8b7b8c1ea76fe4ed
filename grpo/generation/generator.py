"""A training run's generator apart from the trainer: grpo's policy server in its own process.

    generator = Generator.start(policy_dir, settings.generation, dtype, run_dir=..., seed=...)  # the run's own
    generator = Generator.connect(settings.generation)      # generation.base_url: one already running
    generator.check_identity(model, tokenizer)              # the same model, or one line and exit 2
    generator.push(model, version=step)                     # the trainer's weights, through a file
    backend = generator.backend(tokenizer, eos_token_ids)   # what the rollout engine generates with
    generator.close()                                       # the run's own process stops with it

Started by the run, it is `python -m grpo.serve` on a copy of the policy saved for it (config,
weights, tokenizer: the same model by construction), in a new session (a Ctrl-C in the terminal
reaches the trainer only, which stops it at the end of its step), with `serve.threads` and the
trainer's pid (it exits if the trainer is gone, however the trainer ended); its output goes to
<run dir>/generator.log. The machine's cores are split: `generation.generator_threads` (null: half)
for it, the rest for the trainer.

Weights travel as a file: after an optimizer step the trainer writes its plain weights (a LoRA
adapter merged in) as one safetensors file into shared memory (/dev/shm, else the temp folder)
and posts its path; the server loads it before its next generation (grpo/serve/batcher.py). On a
CPU machine, and between processes that share no GPU, this is the path that works everywhere
(prime-rl broadcasts weights through the file system the same way); a vLLM server on GPUs takes
them over NCCL instead (grpo/train/ahead.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from grpo.config import GenerationConfig
from grpo.errors import UserError
from grpo.generation.served import (
    WEIGHTS_KEY_HEADER,
    WEIGHTS_KEY_VAR,
    GeneratorError,
    ServedBackend,
    call_server,
)

# what the run's generator may be asked at once: prompt tokens of one request, new tokens of one turn
_MAX_PROMPT_TOKENS = 1 << 20
_HEALTH_POLL_S = 0.2


def split_cores(generator_threads: int | None) -> tuple[int, int]:
    """(trainer threads, generator threads) of this machine's cores: the generator gets
    `generator_threads` (None: half), the trainer the rest, each at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gen = int(generator_threads) if generator_threads else max(1, cores // 2)
    return max(1, cores - gen), gen


def shared_memory_dir(size_bytes: int, copies: int = 3) -> tuple[Path, str | None]:
    """A new folder for the weight files, in /dev/shm when it holds `copies` of them; else in the
    temp folder, with the line that says so."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > copies * size_bytes:
        return Path(tempfile.mkdtemp(prefix="grpo-weights-", dir=shm)), None
    folder = Path(tempfile.mkdtemp(prefix="grpo-weights-"))
    return (
        folder,
        f"[generation] note: /dev/shm cannot hold the weight files ({size_bytes / 2**20:.0f} MiB each): they go through {folder}",
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Generator:
    """grpo's policy server as the generator of a training run (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        process: subprocess.Popen[bytes] | None = None,
        log_path: Path | None = None,
        timeout_s: float = 300.0,
        api_key: str | None = None,
        threads: int | None = None,
    ):
        self.url = url.rstrip("/")
        self.process = process
        self.log_path = log_path
        self.timeout_s = float(timeout_s)
        self.api_key = api_key
        self.threads = threads
        # threads the trainer keeps beside a generator the run started (split_cores)
        self.trainer_threads: int | None = None
        # the latest weights version the server accepted (it loads it before its next generation)
        self.version = 0
        self.model_name = "grpo-policy"
        # the key of the server's weights route: the one this run gave the server it started, or
        # $GRPO_WEIGHTS_KEY for a server at generation.base_url started with it
        self.weights_key: str | None = os.environ.get(WEIGHTS_KEY_VAR) or None
        self._files: list[Path] = []
        self._folder: Path | None = None

    # ---- starting -----------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        model: Any,
        tokenizer: Any,
        gen_cfg: GenerationConfig,
        *,
        dtype: str,
        name: str,
        seed: int,
        run_dir: str | os.PathLike[str],
        threads: int,
    ) -> Generator:
        """`python -m grpo.serve` on a copy of the policy (saved next to the weight files), in
        its own session, with `threads` CPU threads; returns once its process runs (`wait_ready`
        waits for it to answer)."""
        from grpo.models.weights import save_policy_copy

        size = sum(p.numel() * p.element_size() for p in model.parameters())
        folder, note = shared_memory_dir(size, copies=4)
        if note:
            print(note, file=sys.stderr, flush=True)
        policy_dir = save_policy_copy(model, tokenizer, folder / "policy")
        port = free_port()
        log_path = Path(run_dir) / "generator.log"
        overrides = [
            "model.source=pretrained",
            f"model.path={policy_dir}",
            "model.tokenizer=null",
            "model.adapter=null",
            f"model.dtype={dtype}",
            "generation=hf",
            f"seed={int(seed)}",
            "serve.host=127.0.0.1",
            f"serve.port={port}",
            f"serve.model_name={name}",
            f"serve.threads={int(threads)}",
            f"serve.parent_pid={os.getpid()}",
            f"serve.max_batch={int(gen_cfg.max_concurrent)}",
            f"serve.max_pending={max(256, int(gen_cfg.max_concurrent))}",
            f"serve.max_prompt_tokens={_MAX_PROMPT_TOKENS}",
            f"serve.max_tokens={int(gen_cfg.max_tokens_per_turn)}",
            "serve.api_key_var=null",
        ]
        env = dict(os.environ)
        # the server's share of the cores; on the trainer's GPU when it trains on one (a second
        # process on the same device: the memory plan counts its copy), else on the CPU. The weights
        # route takes this run's key only
        weights_key = secrets.token_hex(16)
        env.update(
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
            TOKENIZERS_PARALLELISM="false",
            PYTHONUNBUFFERED="1",
            **{WEIGHTS_KEY_VAR: weights_key},
        )
        device = getattr(next(iter(model.parameters()), None), "device", None)
        if getattr(device, "type", "cpu") == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", str(device.index or 0))
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU: the CPU, as the trainer
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "grpo.serve", *overrides],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches the trainer, which stops it
            )
        generator = cls(
            f"http://127.0.0.1:{port}",
            process=process,
            log_path=log_path,
            timeout_s=gen_cfg.async_generation_timeout,
            threads=threads,
        )
        generator.model_name = name
        generator._folder = folder
        generator.weights_key = weights_key
        return generator

    @classmethod
    def connect(cls, gen_cfg: GenerationConfig, api_key: str | None = None) -> Generator:
        """The `python -m grpo.serve` already running at generation.base_url."""
        return cls(str(gen_cfg.base_url), timeout_s=gen_cfg.async_generation_timeout, api_key=api_key)

    def wait_ready(self, timeout_s: float) -> None:
        """Until the server answers /health: GeneratorError when its process ends first or it
        does not answer within `timeout_s` (generation.timeout_s)."""
        deadline = time.monotonic() + timeout_s
        said = False
        while True:
            gone = self.exited()
            if gone:
                raise GeneratorError(f"the generator process {gone} before it answered{self._log_tail()}")
            try:
                call_server(self.url, "/health", timeout_s=2.0)
                return
            except GeneratorError:
                if self.process is None and not said:  # a server the run did not start
                    print(
                        f"[generation] waiting up to {timeout_s:g} s (generation.timeout_s) for the generator at {self.url}",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                if time.monotonic() > deadline:
                    raise GeneratorError(
                        f"the generator at {self.url} did not come up within {timeout_s:g} s "
                        f"(generation.timeout_s){self._log_tail()}"
                    ) from None
                time.sleep(_HEALTH_POLL_S)

    def info(self) -> dict[str, Any]:
        return call_server(self.url, "/grpo/v1/info", timeout_s=self.timeout_s, api_key=self.api_key)

    def check_identity(self, model: Any, tokenizer: Any) -> str | None:
        """Refuse (UserError, one line) a generator whose model is not the trainer's: another
        architecture or tokenizer, or other weights when it has taken none from a trainer yet.
        One that holds a trainer's weights (an earlier run's: a resume) gets this run's at the
        first push: the line that says so is returned. Sets `version` to the server's."""
        from grpo.models.weights import weights_identity

        theirs = self.info()
        mine = weights_identity(model, tokenizer)
        where = f"the generator at {self.url} ({theirs.get('model')})"
        if theirs.get("architecture") != mine["architecture"]:
            raise UserError(
                f"{where} serves another model than the trainer's policy (other parameter names or shapes): start it with the run's model.* settings"
            )
        if theirs.get("tokenizer") != mine["tokenizer"]:
            raise UserError(
                f"{where} serves the policy's architecture with another tokenizer: start it with the run's model.* settings"
            )
        version = int(theirs.get("weights_version") or 0)
        self.model_name = str(theirs.get("model") or self.model_name)
        self.version = version
        if theirs.get("checksum") == mine["checksum"]:
            return None
        if version == 0:
            raise UserError(
                f"{where} serves other weights than the trainer's policy (checksum {theirs.get('checksum')} vs "
                f"{mine['checksum']}): start it with the run's model.* settings, or leave generation.base_url "
                "unset and the run starts its own generator"
            )
        return f"[generation] {where} holds weights version {version} from a trainer before this one; this run's replace them now"

    # ---- weights ------------------------------------------------------------------------------
    def push(self, model: Any, version: int) -> None:
        """The trainer's weights as weights `version`: written to a file, offered to the server
        (which loads them before its next generation). The files of older versions go, but for
        the one before (which the server may be loading right now)."""
        from grpo.models.weights import save_weights

        if self._folder is None:
            size = sum(p.numel() * p.element_size() for p in model.parameters())
            self._folder, note = shared_memory_dir(size)
            if note:
                print(note, file=sys.stderr, flush=True)
        path = save_weights(model, self._folder / f"weights-{int(version):08d}.safetensors")
        answer = call_server(
            self.url,
            "/grpo/v1/weights",
            {"path": str(path), "version": int(version)},
            timeout_s=self.timeout_s,
            api_key=self.api_key,
            headers={WEIGHTS_KEY_HEADER: self.weights_key} if self.weights_key else None,
        )
        self.version = int(answer.get("accepted_version", version))
        self._files.append(path)
        while len(self._files) > 2:
            self._files.pop(0).unlink(missing_ok=True)

    # ---- generating ---------------------------------------------------------------------------
    def backend(
        self, tokenizer: Any, eos_token_ids: Any, chat_template_kwargs: dict[str, Any] | None = None
    ) -> ServedBackend:
        return ServedBackend(
            self.url,
            tokenizer,
            eos_token_ids=eos_token_ids,
            chat_template_kwargs=chat_template_kwargs,
            timeout_s=self.timeout_s,
            api_key=self.api_key,
            model_name=self.model_name,
        )

    # ---- its process --------------------------------------------------------------------------
    def exited(self) -> str | None:
        """How the run's generator process ended ('exited with code N', 'was killed by SIGKILL'),
        or None while it runs (and for a generator the run did not start)."""
        if self.process is None:
            return None
        code = self.process.poll()
        if code is None:
            return None
        if code < 0:
            try:
                return f"(pid {self.process.pid}) was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"(pid {self.process.pid}) was killed by signal {-code}"
        return f"(pid {self.process.pid}) exited with code {code}"

    def death(self, grace_s: float = 2.0) -> str | None:
        """`exited()`, after waiting up to `grace_s` for the process to end: a request that failed
        because the generator died can fail before its process is seen gone."""
        if self.process is None:
            return None
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return None
        return self.exited()

    def describe(self) -> str:
        if self.process is None:
            return f"the generator at {self.url}"
        return f"the generator (python -m grpo.serve, pid {self.process.pid}, {self.threads} thread(s), log {self.log_path}) at {self.url}"

    def close(self) -> None:
        """Stop the run's generator process (SIGTERM, then SIGKILL after 5 s: a hung one) and
        remove the weight files."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
            self._files = []

    def _log_tail(self) -> str:
        """': <the last line of its log>' when the run started it and it wrote one."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""
