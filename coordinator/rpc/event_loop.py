"""The coordinator's event loop: one thread that serves every gRPC call and holds every open stream.

Streams (worker sessions, event-log watches) wait on it as coroutines, so an open stream costs memory, not a
thread: a replica holds thousands of worker sessions. Unary handlers run on the server's thread pool, and
whatever a stream does that blocks (a store transaction) runs on this loop's executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")

BLOCKING_THREADS = 16
"""Threads for the streams' blocking work (opening and closing sessions, reading a log): short transactions,
so a few threads serve thousands of streams."""


class EventLoopThread:
    """An asyncio loop running in a thread of its own, for callers that are not coroutines."""

    def __init__(self, name: str = "rpc-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix=f"{name}-io")
        self.loop.set_default_executor(self._executor)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (from any thread but the loop's own)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Cancel what still runs on the loop, then stop it and its executor (bounded by `timeout_s`)."""
        if not self.loop.is_running():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout_s)

        try:
            self.run(cancel_all(), timeout_s + 1)
        except Exception as err:  # a task that ignores its cancellation: the loop stops regardless
            log.warning("event_loop.stop_incomplete", error=str(err))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        self._executor.shutdown(wait=False, cancel_futures=True)


def setter(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> Callable[[], None]:
    """A callable that sets `event` from any thread (a store watch's callback); once the loop has closed, it
    does nothing."""

    def set_event() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(event.set)

    return set_event
