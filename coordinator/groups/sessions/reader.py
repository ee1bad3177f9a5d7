"""The replica's session reader: the sessions' looks at their leases, read together.

A session looks at its member's leases when its watch fires. A pass that changes many leases fires the
watches of nearly every session of the group at once, and a pass too large for one transaction does so once
per transaction it writes. Read in a transaction each, a thousand sessions' looks queue on the store between
two of those transactions (the embedded store hands its lock over in arrival order), so writing a pass costs a
round of every session's look per chunk. So sessions hand their looks here and one thread reads whatever is
waiting in a few transactions of at most MAX_LOOKS each (a group commit, for reads): a round of looks costs a
few transactions whatever the number of sessions. That thread is a background loop like the others: a look
handed over wakes its schedule (a `Signal`), and a pass reads whatever waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.loop import BackgroundLoop, Signal
from streamplane.coordinator.store import Database, Transaction
from streamplane.errors import StreamplaneError, UnavailableError

log = structlog.get_logger(__name__)

T = TypeVar("T")

MAX_LOOKS = 100
"""Looks one transaction reads at most (each a member's leases: a few hundred keys for a large member), well
within FoundationDB's 5 s."""
IDLE_PASS_MS = 60_000
"""The reader's pass when no look woke it: every look wakes it (its Signal), so this is only a safety net."""


class _Look:
    def __init__(self, body: Callable[[Transaction], Any]) -> None:
        self.body = body
        self.future: Future[Any] = Future()


class SessionReader:
    """Reads the sessions' looks of one replica in batches (see the module's docstring).

    Until `start`, every look runs in a transaction of its own, as it comes (tests driving sessions by hand).
    """

    def __init__(self, db: Database, clock: Clock = SYSTEM) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._waiting: list[_Look] = []
        self._stopped = False
        self._wake = Signal()
        self._loop = BackgroundLoop(
            "session-reader", self._pass, interval_ms=IDLE_PASS_MS, clock=clock, signal=self._wake
        )
        self._started = False

    def look(self, body: Callable[[Transaction], T]) -> T:
        """Run `body` (reads only: it may run again, in a transaction shared with other looks) and return what it
        returns, or raise what the transaction raised."""
        return self.submit(body).result()

    def submit(self, body: Callable[[Transaction], T]) -> Future[T]:
        """Like `look`, without waiting: the future holds what `body` returns or what the transaction raised (an
        event loop awaits it with asyncio.wrap_future)."""
        pending = _Look(body)
        if not self._started:
            try:
                pending.future.set_result(self.db.transact(body))
            except Exception as err:
                pending.future.set_exception(err)
            return pending.future
        with self._lock:
            if self._stopped:
                pending.future.set_exception(UnavailableError("the coordinator is stopping"))
                return pending.future
            self._waiting.append(pending)
        self._wake.set()
        return pending.future

    def read(self) -> None:
        """Read every look waiting so far."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        batch = [p for p in waiting if p.future.set_running_or_notify_cancel()]  # not those given up meanwhile
        for i in range(0, len(batch), MAX_LOOKS):
            chunk = batch[i : i + MAX_LOOKS]

            def read_all(tr: Transaction, chunk: list[_Look] = chunk) -> list[Any]:
                return [p.body(tr) for p in chunk]

            try:
                results = self.db.transact(read_all)
            except Exception as err:  # every look of the chunk hears it, as from a transaction of its own
                if not isinstance(err, StreamplaneError):
                    log.exception("sessions.look_failed", looks=len(chunk))
                for p in chunk:
                    p.future.set_exception(err)
                continue
            for p, result in zip(chunk, results, strict=True):
                p.future.set_result(result)

    def _pass(self) -> None:
        try:
            self.read()
        except Exception:  # the reader must outlive any one batch: every session's looks wait on it
            log.exception("sessions.read_crashed")

    def start(self) -> None:
        self._started = True
        self._loop.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        if self._started:
            self._loop.stop()
        self.read()  # whatever came in before the stop: read, so that no look waits forever
