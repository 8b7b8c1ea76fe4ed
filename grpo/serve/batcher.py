"""Concurrent requests batched into backend calls, on one worker thread.

Request threads `submit(job)` (or `submit_many(jobs)`: one item, generated together) and wait; the
worker takes the first waiting item, collects whatever else arrives within `window_ms` (up to
`max_batch` jobs; with an `expected` hint, until that many requests wait, up to `max_wait_ms`: the
lockstep of grpo's own engine, for callers it runs), and makes one `backend.generate` call per
group of jobs that sample alike (same temperature and top-p), each a left-padded batch with its own
per-request max tokens, stop tokens and seed (the hf backend draws a seeded row from a generator of
its own, so a seeded request gets the same tokens alone or in any batch). The backend is only ever
called from this thread (a model is not safe to call from several threads at once).

New weights (a training run's generator): `offer_weights(load, version)` keeps the latest offer
and returns at once; the worker applies it before its next backend call (or at once when idle), so
no call ever runs on half-loaded weights, and each job records the `weights_version` it was
generated with. `call(fn)` runs `fn` on the worker between backend calls (what must see the
weights at rest: their checksum).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from grpo.generation.base import GenRequest
from grpo.serve.protocol import BadRequest, Job

# a queue item that only wakes the worker (to apply offered weights while idle)
_WAKE = object()


class _Call:
    """A function to run on the worker thread, between backend calls."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None


class Batcher:
    """`submit(job)` blocks until the worker has filled `job.result` (or raises its error)."""

    def __init__(
        self,
        backend: Any,
        *,
        max_batch: int = 32,
        window_ms: float = 5.0,
        max_pending: int = 256,
        expected: Callable[[], int] | None = None,
        max_wait_ms: float = 1000.0,
    ):
        self.backend = backend
        self.max_batch = max(1, int(max_batch))
        self.window_s = max(0.0, float(window_ms)) / 1000.0
        # a hint from an owner that knows its callers (grpo's v1 episodes in flight, each with at
        # most one request outstanding): wait for that many requests, up to max_wait_ms
        self.expected = expected
        self.max_wait_s = max(0.0, float(max_wait_ms)) / 1000.0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, max_pending))
        self._thread = threading.Thread(target=self._work, name="grpo-serve-batcher", daemon=True)
        self._stopped = threading.Event()
        # backend calls made and jobs answered (a batch of k jobs in one call counts 1 and k)
        self.calls = 0
        self.jobs = 0
        # weights: the version the backend holds, the latest offered (load, version), and the last
        # failure to apply an offer (None once an offer loads)
        self.weights_version = 0
        self._offer: tuple[Callable[[], None], int] | None = None
        self._offer_lock = threading.Lock()
        self.weights_error: str | None = None
        self._thread.start()

    def submit(self, job: Job, timeout: float | None = None) -> Job:
        self.submit_many([job], timeout)
        if job.error is not None:
            raise job.error
        return job

    def submit_many(self, jobs: Sequence[Job], timeout: float | None = None) -> Sequence[Job]:
        """Queue `jobs` as one item (generated in as few backend calls as their sampling and
        max_batch allow) and wait for all of them; each job's `error` says if it failed."""
        if self._stopped.is_set():
            raise BadRequest(503, "the server is shutting down")
        if not jobs:
            return jobs
        done = threading.Event()
        try:
            self._queue.put_nowait((list(jobs), done))
        except queue.Full:
            raise BadRequest(429, "too many requests waiting; retry later") from None
        if not done.wait(timeout):
            raise BadRequest(503, f"no answer within {timeout:g} s")
        return jobs

    def offer_weights(self, load: Callable[[], None], version: int) -> int:
        """Keep `load` (it puts weights `version` into the backend's model) for the worker to run
        before its next backend call; a later offer replaces one not yet applied. Returns at once."""
        with self._offer_lock:
            self._offer = (load, int(version))
        try:
            self._queue.put_nowait(_WAKE)
        except queue.Full:
            pass  # the worker is busy: it applies the offer before its next call anyway
        return int(version)

    def call(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        """`fn()` run on the worker between backend calls (offered weights applied first)."""
        item = _Call(fn)
        done = threading.Event()
        try:
            self._queue.put_nowait((item, done))
        except queue.Full:
            raise BadRequest(429, "too many requests waiting; retry later") from None
        if not done.wait(timeout):
            raise BadRequest(503, f"no answer within {timeout:g} s")
        if item.error is not None:
            raise item.error
        return item.result

    def close(self) -> None:
        """Stop the worker after the jobs already queued are answered."""
        if not self._stopped.is_set():
            self._stopped.set()
            self._queue.put(None)
            self._thread.join(timeout=60)

    # ---- the worker ---------------------------------------------------------------------------
    def _apply_offer(self) -> None:
        with self._offer_lock:
            offer, self._offer = self._offer, None
        if offer is None:
            return
        load, version = offer
        try:
            load()
        except Exception as ex:  # noqa: BLE001 - the old weights stay; callers read the error
            self.weights_error = f"weights version {version} did not load: {ex}"
            return
        self.weights_version, self.weights_error = version, None
        forget = getattr(self.backend, "forget_conversations", None)
        if forget is not None:  # a kept KV cache holds the old weights' keys and values
            forget()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._apply_offer()
            if item is _WAKE:
                continue
            if isinstance(item[0], _Call):
                call, done = item
                try:
                    call.result = call.fn()
                except BaseException as ex:  # noqa: BLE001 - handed to the caller
                    call.error = ex
                done.set()
                continue
            batch = [item]
            count = len(item[0])
            start = time.monotonic()
            while count < self.max_batch:
                expected = self.expected() if self.expected is not None else None
                if expected is not None and count >= expected:
                    break  # every caller that will ask has asked
                deadline = start + (self.window_s if expected is None else self.max_wait_s)
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        nxt = self._queue.get_nowait()
                    else:  # with a hint, look again at it every few ms (callers finish meanwhile)
                        nxt = self._queue.get(timeout=left if expected is None else min(left, 0.002))
                except queue.Empty:
                    if left <= 0:
                        break
                    continue
                if nxt is None or nxt is _WAKE or isinstance(nxt[0], _Call):
                    self._queue.put(nxt)  # after this batch
                    break
                batch.append(nxt)
                count += len(nxt[0])
            self._apply_offer()
            groups: dict[Any, list[Job]] = defaultdict(list)
            for jobs, _ in batch:
                for job in jobs:
                    groups[job.group].append(job)
            for jobs in groups.values():
                for at in range(0, len(jobs), self.max_batch):
                    self._run(jobs[at : at + self.max_batch])
            for _, done in batch:
                done.set()

    def _run(self, jobs: Sequence[Job]) -> None:
        requests = [
            GenRequest(
                max_new_tokens=j.max_tokens,
                prompt_ids=list(j.prompt_ids),
                seed=j.sampling.seed,
                stop_token_ids=j.stop_token_ids,
                conversation=None if j.session is None else ("session", j.session),
            )
            for j in jobs
        ]
        try:
            results = self.backend.generate(requests, dataclasses.replace(jobs[0].sampling, seed=None))
        except BaseException as ex:  # every waiting request gets the failure, the worker lives on
            for job in jobs:
                job.error = ex if isinstance(ex, BadRequest) else RuntimeError(f"generation failed: {ex}")
            return
        self.calls += 1
        self.jobs += len(jobs)
        for job, result in zip(jobs, results, strict=True):
            job.result = result
            job.extra["weights_version"] = self.weights_version
