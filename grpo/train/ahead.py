"""Generation ahead of training (generation.num_batches_ahead > 0): the rollouts of step k+1 are
generated on a generator apart from the trainer while step k trains.

    ahead = AheadRollouts(rollout, rows, settings, generator)   # TRL's rollout_func instead of `rollout`
    trainer = GRPOTrainer(..., rollout_func=ahead)
    ahead.attach(trainer)                                         # before trainer.train()
    ...
    ahead.close()

How it meets TRL (everything of TRL's own it touches goes through grpo/trl_adapter/internals.py):
- Which prompts come next: TRL draws each generation batch's prompts from its train sampler (a
  seeded RepeatSampler). The sampler is wrapped (`LookAhead`) so that the batches the trainer will
  ask for next can be read before it asks; at step k the batches of steps k+1..k+n go to a worker
  thread, which runs grpo's rollout engine (any env: built-in, classic verifiers, a v1 taskset,
  multi-turn) with the generator as its backend, `generation.max_concurrent` episodes at a time.
  When TRL then asks for a batch it is matched by its prompts: a batch that was not read ahead (the
  first step, a resumed run) is generated at once, in front of the queue.
- Weights: where TRL syncs its vLLM engine before a generation batch (`vllm_generation.sync_weights`),
  the trainer's weights go to the generator every `generation.weight_sync_steps` optimizer steps:
  as a file to grpo's policy server (grpo/generation/generator.py), or by the vLLM server's own NCCL
  sync (with the worker paused: no generation runs while the weights change).
- Off-policy correction: each completion carries the generator's sampling logprobs, and TRL's
  importance-sampling correction (its vLLM path, turned on for this generator) weighs each token's
  loss by the trainer's over the sampler's probability, truncated at
  trainer.extra.vllm_importance_sampling_clip_max (token_truncate: truncated importance sampling).
  A batch's lag is the optimizer steps between the weights it was generated with and the step that
  trains on it (`async/lag`); one older than `generation.max_off_policy_steps` is dropped
  (`async/dropped`, a running count) and generated again with the current weights.
- Faults: no batch within `generation.async_generation_timeout` seconds, a generator that is
  unreachable or whose process ended: `GeneratorFailed` with one line (grpo/train/trainer.py writes
  the checkpoint of the last complete step and the run exits with code 3); nothing waits forever.
- Held-out validation and preference rounds generate in the trainer, with the worker paused.

Logged at each step through TRL's metric log (train/async/... in MLflow): lag, dropped, wait_s
(seconds the step waited for its batch) and generate_s (seconds the batch took to generate).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.config import GrpoConfig
from grpo.errors import GeneratorFailed, UserError
from grpo.generation.base import mix_seed
from grpo.generation.served import GeneratorError
from grpo.train.rollout_func import EnvRolloutFunc, prompt_key
from grpo.trl_adapter.internals import (
    correct_for_external_sampler,
    engine_sync,
    metric_logger,
    vllm_engine,
    wrap_train_sampler,
)

# how often a wait for a batch looks at the generator's process
_POLL_S = 0.5


class _Sampler:
    """TRL's train sampler, read through a LookAhead (same indices, same order, same length)."""

    def __init__(self, inner: Any, look: LookAhead):
        self.inner, self.look = inner, look

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[int]:
        return self.look.epoch(self.inner)


class LookAhead:
    """The prompts of the generation batches TRL will ask for, read ahead from its train sampler.

    TRL's RepeatSampler yields each generation batch as `prompts` distinct indices, each repeated
    `group` times, the whole repeated `repeats` times (once per gradient-accumulation step and
    iteration): `unit = prompts * group * repeats` indices per generation batch. The wrapped sampler
    yields exactly the indices the sampler yields, in order, epoch after epoch; `batch(j)` reads
    the stream as far as generation batch j and returns its distinct dataset indices."""

    def __init__(self, batch: int, group: int, repeats: int):
        self.prompts, self.group, self.unit = int(batch), int(group), int(batch) * int(group) * int(repeats)
        self._inner: Any = None
        self._stream: Iterator[int] | None = None
        self._buffer: collections.deque[int] = collections.deque()
        self._partial: list[int] = []
        self.batches: list[list[int]] = []

    def wrap(self, sampler: Any) -> _Sampler:
        self._inner, self._stream = sampler, None
        self._buffer.clear()
        self._partial, self.batches = [], []
        return _Sampler(sampler, self)

    def _epochs(self) -> Iterator[int]:
        """The sampler's indices, epoch after epoch (each pass draws its own order)."""
        while True:
            count = 0
            for index in iter(self._inner):
                count += 1
                yield index
            if count == 0:
                return

    def _pull(self) -> bool:
        """Read one more index of the stream; a generation batch is known once its first
        `prompts * group` indices are read (the rest of its unit repeats them)."""
        if self._stream is None:
            self._stream = self._epochs()
        index = next(self._stream, None)
        if index is None:
            return False
        self._buffer.append(index)
        self._partial.append(index)
        if len(self._partial) == self.prompts * self.group:
            self.batches.append(self._partial[:: self.group])
        if len(self._partial) == self.unit:
            self._partial = []
        return True

    def epoch(self, inner: Any) -> Iterator[int]:
        """One epoch of the sampler's indices: what was read ahead first, then the stream."""
        for _ in range(len(inner)):
            if not self._buffer and not self._pull():
                return
            yield self._buffer.popleft()

    def batch(self, j: int) -> list[int] | None:
        """The distinct dataset indices of generation batch j (None past the sampler's end)."""
        while len(self.batches) <= j:
            if self._inner is None or not self._pull():
                return None
        return self.batches[j]


@dataclass
class _Batch:
    """One generation batch on its way: made by the worker, taken by the trainer."""

    rows: list[Any]
    seed: int
    done: threading.Event = field(default_factory=threading.Event)
    rollouts: list[Any] | None = None
    # the oldest weights version it was generated with (the trainer's step when they were pushed)
    version: int | None = None
    error: BaseException | None = None
    seconds: float = 0.0


class AheadRollouts:
    """TRL's rollout_func with generation `num_batches_ahead` batches ahead (module docstring)."""

    def __init__(
        self, rollout: EnvRolloutFunc, rows: Sequence[Any], settings: GrpoConfig, generator: Any = None
    ):
        g = settings.generation
        self.rollout = rollout
        self.rows = list(rows)
        self.ahead = int(g.num_batches_ahead)
        self.max_concurrent = int(g.max_concurrent)
        self.timeout_s = float(g.async_generation_timeout)
        self.sync_every = int(g.weight_sync_steps)
        self.max_lag = int(g.max_off_policy_steps)
        self.seed = int(settings.trainer.seed)
        # grpo's policy server (generation=hf); None: the trainer's vLLM server (generation=vllm_server)
        self.generator = generator
        self.trainer: Any = None
        self.look: LookAhead | None = None
        # generation in the trainer (validation, preference rounds) pauses the worker
        rollout.pause = self.paused
        self._pending: dict[int, _Batch] = {}
        self._next = 0  # the first generation batch not yet matched to a call
        self._queue: collections.deque[_Batch] = collections.deque()
        self._cond = threading.Condition()
        # held by the worker while it generates a batch, and by the trainer while it generates in
        # process (validation, preference rounds) or syncs a vLLM server: re-entrant for the trainer
        self._run_lock = threading.RLock()
        self._closed = False
        self._worker: threading.Thread | None = None
        self._backend: Any = None
        self._sampling: Any = None
        self._budget = 0
        self._pushed: int | None = None
        self._version = 0  # the weights version the generator generates with next
        self.dropped = 0
        self._said: set[str] = set()
        self._threads_before = 0
        # the last step's numbers, for tests and the progress line
        self.last: dict[str, float] = {}

    # ---- set-up -------------------------------------------------------------------------------
    def attach(self, trainer: Any, timeout_s: float) -> None:
        """Once the generator answers (within `timeout_s`, generation.timeout_s) and serves the
        trainer's model: read TRL's coming batches ahead, let TRL correct for this generator and
        sync it, and start the worker. A generator that does not come up, or serves another model,
        is one line (UserError) before any step."""
        self.trainer = trainer
        if self.generator is not None:
            try:
                self.generator.wait_ready(timeout_s)
                note = self.generator.check_identity(trainer.model, self.rollout.tokenizer)
            except GeneratorError as ex:
                raise UserError(f"generation.num_batches_ahead={self.ahead}: {ex}") from None
            if note:
                print(note, file=sys.stderr, flush=True)
            threads = getattr(self.generator, "trainer_threads", None)
            if threads:
                import torch

                self._threads_before = torch.get_num_threads()
                torch.set_num_threads(int(threads))
            print(
                f"[generation] {self.ahead} batch(es) ahead on {self.generator.describe()}"
                + (f"; the trainer trains on {threads} thread(s)" if threads else ""),
                file=sys.stderr,
                flush=True,
            )
        else:
            print(
                f"[generation] {self.ahead} batch(es) ahead on the vLLM server", file=sys.stderr, flush=True
            )
        args = trainer.args
        group = int(trainer.num_generations)
        self.look = LookAhead(
            args.generation_batch_size // group,
            group,
            int(args.steps_per_generation) * int(trainer.num_iterations),
        )
        wrap_train_sampler(trainer, self.look.wrap)
        correct_for_external_sampler(trainer, self._sync)
        self._engine_sync = engine_sync(trainer)
        self._sampling = self.rollout.sampling(trainer)
        self._budget = int(trainer.max_completion_length)
        # the worker renders and tokenises with a tokenizer of its own (the trainer's decodes meanwhile)
        tokenizer = copy.deepcopy(self.rollout.tokenizer)
        if self.generator is not None:
            self._backend = self.generator.backend(
                tokenizer, trainer.eos_token_ids, self.rollout.model_cfg.chat_template_kwargs
            )
            self._version = self.generator.version
        else:
            from grpo.generation.vllm import thread_backend

            self._backend = thread_backend(
                vllm_engine(trainer), tokenizer, self.rollout.model_cfg, trainer.eos_token_ids
            )
        self._worker = threading.Thread(target=self._work, name="grpo-generation-ahead", daemon=True)
        self._worker.start()

    def push_final(self) -> None:
        """After training: the trained weights to the generator (it serves the trained policy)."""
        step = int(self.trainer.state.global_step)
        if self._pushed != step and (self.generator is None or not self.generator.exited()):
            with contextlib.suppress(GeneratorFailed):
                self._push(step)

    def close(self) -> None:
        """Stop the worker (a batch being generated is abandoned) and the run's generator
        process; the trainer gets its threads back."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        if self.generator is not None:
            self.generator.close()
        if self._threads_before:
            import torch

            torch.set_num_threads(self._threads_before)
            self._threads_before = 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No batch is generated inside the block (one being generated finishes first)."""
        with self._run_lock:
            yield

    # ---- weights ------------------------------------------------------------------------------
    def _sync(self) -> None:
        """TRL's sync point (before a generation batch, once per optimizer step): the trainer's
        weights go to the generator every `weight_sync_steps` steps."""
        step = int(self.trainer.state.global_step)
        if self._pushed is None or step - self._pushed >= self.sync_every:
            self._push(step)

    def _push(self, step: int) -> None:
        try:
            if self.generator is not None:
                self.generator.push(self.trainer.model, step)
            else:
                with (
                    self.paused()
                ):  # no generation while the server reloads (a file) or receives (NCCL) weights
                    self._engine_sync()
        except (GeneratorError, OSError) as ex:  # OSError: the vLLM client's connection errors
            raise self._failed(self._why(ex)) from None
        self._pushed = self._version = step

    # ---- the rollout function -----------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if not trainer.model.training:  # TRL's own evaluation loop: in the trainer, synchronously
            return self.rollout(prompts, trainer)
        step = int(trainer.state.global_step)
        group = int(trainer.num_generations)
        j = self._match(prompts, group)
        if j is None:
            rows, batch = self.rollout._rows(prompts, group), None
        else:  # the sampler's own rows (as read ahead), and their batch if it was submitted
            rows, batch = [self.rows[i] for i in self.look.batches[j]], self._pending.pop(j, None)
            for a in range(1, self.ahead + 1):
                self._submit_ahead(j + a)
        if batch is None:
            batch = self._submit(rows, mix_seed(self.seed, step, 1), front=True)
        started = time.monotonic()
        self._wait(batch)
        lag = step - int(batch.version or 0)
        if lag > self.max_lag:
            self.dropped += 1
            self._say(
                "dropped",
                f"[generation] a batch {lag} steps old (generation.max_off_policy_steps={self.max_lag}) was "
                "dropped and generated again with the current weights (counted as async/dropped)",
            )
            if self._pushed != step:
                self._push(step)
            batch = self._submit(rows, mix_seed(self.seed, step, 2), front=True)
            self._wait(batch)
            lag = step - int(batch.version or 0)
        self.last = {
            "async/lag": float(lag),
            "async/dropped": float(self.dropped),
            "async/wait_s": time.monotonic() - started,
            "async/generate_s": batch.seconds,
        }
        log_metric = metric_logger(trainer)
        if log_metric is not None:
            for name, value in self.last.items():
                log_metric(name, value)
        return self.rollout.hand_over(batch.rollouts or [], trainer)

    def _match(self, prompts: list[Any], group: int) -> int | None:
        """The generation batch these prompts are (by the sampler's order), or None."""
        keys = [prompt_key(p) for p in prompts[::group]]
        for j in range(self._next, len(self.look.batches)):
            if [prompt_key(self._prompt(i)) for i in self.look.batches[j]] == keys:
                self._next = j + 1
                return j
        self._say(
            "unmatched",
            "[generation] note: a training batch was not the one read ahead from TRL's sampler; it is "
            "generated now, and generation goes on ahead from the next one",
        )
        return None

    def _prompt(self, index: int) -> Any:
        from grpo.train.rollout_func import dataset_prompt

        return dataset_prompt(self.rows[index])

    def _submit_ahead(self, j: int) -> None:
        if j in self._pending or j < self._next:
            return
        indices = self.look.batch(j)
        if indices is None:
            return  # past the sampler's end: no step will ask for it
        self._pending[j] = self._submit([self.rows[i] for i in indices], mix_seed(self.seed, j, 0))

    def _submit(self, rows: list[Any], seed: int, front: bool = False) -> _Batch:
        batch = _Batch(list(rows), int(seed))
        with self._cond:
            if front:
                self._queue.appendleft(batch)
            else:
                self._queue.append(batch)
            self._cond.notify_all()
        return batch

    def _wait(self, batch: _Batch) -> None:
        """Until the batch is generated: GeneratorFailed past the timeout, or at once when the
        generator's process ended; an error of the env's own is raised as it is."""
        deadline = time.monotonic() + self.timeout_s
        while not batch.done.wait(_POLL_S):
            gone = self.generator.exited() if self.generator is not None else None
            if gone:
                raise self._failed(f"the generator process {gone}")
            if time.monotonic() > deadline:
                raise self._failed(
                    f"no generation batch within {self.timeout_s:g} s (generation.async_generation_timeout) "
                    f"from {self._where()}"
                )
        if batch.error is not None:
            # the generator's failure (grpo's server, or the vLLM client's connection errors); an
            # error of the env's own is raised as it is (a one-line UserError from the engine)
            if isinstance(batch.error, (GeneratorError, OSError)):
                raise self._failed(self._why(batch.error))
            raise batch.error

    def _why(self, error: BaseException) -> str:
        """What a failed request means: the generator's process ended (how), or the error."""
        gone = self.generator.death() if self.generator is not None else None
        if gone:
            return f"the generator process {gone}"
        return str(error) if isinstance(error, GeneratorError) else f"{self._where()}: {error}"

    def _failed(self, reason: str) -> GeneratorFailed:
        return GeneratorFailed(
            f"[generation] {reason}", stage="train", step=int(self.trainer.state.global_step)
        )

    def _where(self) -> str:
        return self.generator.describe() if self.generator is not None else "the vLLM server"

    def _say(self, key: str, line: str) -> None:
        if key not in self._said:
            self._said.add(key)
            print(line, file=sys.stderr, flush=True)

    # ---- the worker ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch = self._queue.popleft()
            with self._run_lock:
                self._generate(batch)

    def _generate(self, batch: _Batch) -> None:
        import dataclasses

        start = time.monotonic()
        version = self._version
        take = getattr(self._backend, "take_versions", None)
        try:
            if take is not None:
                take()
            sampling = dataclasses.replace(self._sampling, seed=batch.seed)
            group = int(self.trainer.num_generations)
            per_chunk = max(1, self.max_concurrent // group)
            rollouts: list[Any] = []
            for at in range(0, len(batch.rows), per_chunk):
                rollouts += self.rollout._run(
                    batch.rows[at : at + per_chunk], group, self._backend, sampling, self._budget
                )
            versions = take() if take is not None else []
            batch.rollouts = rollouts
            batch.version = min(versions) if versions else version
        except BaseException as ex:  # noqa: BLE001 - handed to the trainer, which raises it
            batch.error = ex
        batch.seconds = time.monotonic() - start
        batch.done.set()


def start_generator(settings: GrpoConfig, model: Any, tokenizer: Any, run_dir: Any) -> Any:
    """The generator of generation ahead of training, as early as possible (its process loads
    while the trainer is built): grpo's policy server, started on a copy of `model` with its share
    of the cores, or the one at generation.base_url; None for generation=vllm_server (the
    trainer's own server)."""
    from grpo.generation import api_key
    from grpo.generation.generator import Generator, split_cores

    g = settings.generation
    if g.backend != "hf":
        return None
    if g.base_url:
        return Generator.connect(g, None if not g.api_key_var else api_key(g))
    trainer_threads, generator_threads = split_cores(g.generator_threads)
    generator = Generator.start(
        model,
        tokenizer,
        g,
        dtype=settings.model.dtype,
        name=str(settings.model.name or "grpo-policy"),
        seed=int(settings.seed),
        run_dir=run_dir,
        threads=generator_threads,
    )
    generator.trainer_threads = trainer_threads
    return generator
