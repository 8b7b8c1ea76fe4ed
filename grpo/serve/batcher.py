"""Concurrent requests batched into backend calls, on one worker thread.

Request threads `submit(job)` and wait; the worker takes the first waiting job, collects whatever
else arrives within `window_ms` (up to `max_batch` jobs), and makes one `backend.generate` call per
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
from collections.abc import Sequence
from typing import Any

from grpo.generation.base import GenRequest
from grpo.serve.protocol import BadRequest, Job


class Batcher:
    """`submit(job)` blocks until the worker has filled `job.result` (or raises its error)."""

    def __init__(self, backend: Any, *, max_batch: int = 32, window_ms: float = 5.0, max_pending: int = 256):
        self.backend = backend
        self.max_batch = max(1, int(max_batch))
        self.window_s = max(0.0, float(window_ms)) / 1000.0
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
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
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
