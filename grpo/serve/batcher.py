"""Concurrent requests batched into backend calls, on one worker thread.

Request threads `submit(job)` and wait; the worker takes the first waiting job, collects whatever
else arrives within `window_ms` (up to `max_batch` jobs; with an `expected` hint, until that many
requests wait, up to `max_wait_ms`: the lockstep of grpo's own engine, for callers it runs), and makes one `backend.generate` call per
group of jobs that sample alike (same temperature and top-p), each a left-padded batch with its own
per-request max tokens, stop tokens and seed (the hf backend draws a seeded row from a generator of
its own, so a seeded request gets the same tokens alone or in any batch). The backend is only ever
called from this thread (a model is not safe to call from several threads at once).
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
        self._queue: queue.Queue[tuple[Job, threading.Event] | None] = queue.Queue(
            maxsize=max(1, max_pending)
        )
        self._thread = threading.Thread(target=self._work, name="grpo-serve-batcher", daemon=True)
        self._stopped = threading.Event()
        # backend calls made and jobs answered (a batch of k jobs in one call counts 1 and k)
        self.calls = 0
        self.jobs = 0
        self._thread.start()

    def submit(self, job: Job, timeout: float | None = None) -> Job:
        if self._stopped.is_set():
            raise BadRequest(503, "the server is shutting down")
        done = threading.Event()
        try:
            self._queue.put_nowait((job, done))
        except queue.Full:
            raise BadRequest(429, "too many requests waiting; retry later") from None
        if not done.wait(timeout):
            raise BadRequest(503, f"no answer within {timeout:g} s")
        if job.error is not None:
            raise job.error
        return job

    def close(self) -> None:
        """Stop the worker after the jobs already queued are answered."""
        if not self._stopped.is_set():
            self._stopped.set()
            self._queue.put(None)
            self._thread.join(timeout=60)

    # ---- the worker ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            start = time.monotonic()
            while len(batch) < self.max_batch:
                expected = self.expected() if self.expected is not None else None
                if expected is not None and len(batch) >= expected:
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
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            groups: dict[Any, list[tuple[Job, threading.Event]]] = defaultdict(list)
            for entry in batch:
                groups[entry[0].group].append(entry)
            for entries in groups.values():
                self._run([job for job, _ in entries])
                for _, done in entries:
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
