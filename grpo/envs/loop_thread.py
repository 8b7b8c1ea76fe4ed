"""An event loop on a daemon thread, for the verifiers adapters: their async calls run there and
the caller waits, so they work from synchronous code, inside a caller's own running loop (a
notebook), and with objects bound to one loop (locks, sessions, servers) across calls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class LoopThread:
    """`run(coro)` runs a coroutine on the thread's loop and returns its result. `fast=True` takes
    uvloop's loop when it is installed (verifiers installs it; its HTTP hops run faster there)."""

    def __init__(self, name: str, fast: bool = False) -> None:
        self.loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
        if fast:
            try:
                import uvloop

                self.loop.close()
                self.loop = uvloop.new_event_loop()
            except ImportError:
                pass
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
