"""The replica's session writer: what every session's worker sends (heartbeats, releases), written together.

A heartbeat pushes its session's TTL forward and records the loads that changed; a release hands a lease back.
Written in a transaction each, a replica holding thousands of sessions would spend its time committing them,
and a worker handing back thousands of leases (the first worker of a large group, when the others join) would
wake every reader of its leases once per lease. So sessions hand them here (O(1) each) and one thread writes
them in batches of at most MAX_BATCH per transaction: releases at once, together with whatever came in
meanwhile (a group commit), heartbeats at least every `flush_ms` (the newest per session, lease loads merged,
since each is sent once). A message whose session has ended (expired or replaced) is answered through its
session's callback, as a write alone would have raised.

The thread is a background loop like the others: its pass is a flush, every `flush_ms`, and a release wakes
its schedule at once (a `Signal`).

It also ends sessions (`leave`): at once, in the caller's thread, and when the store cannot be reached, again at
every flush until it can. While this replica is registered nobody else would end them (see `leases.live_until`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.groups import leases
from streamplane.coordinator.loop import BackgroundLoop, Signal
from streamplane.coordinator.store import Database, Transaction
from streamplane.errors import FencedError, StreamplaneError
from streamplane.model import Heartbeat, Release

_Leave = tuple[str, str, str, str]
"""(group, worker id, session id, reason) of a session this replica serves, to end."""

log = structlog.get_logger(__name__)

MAX_BATCH = 2_000
"""Messages one transaction writes at most (each a member record, a lease, or the loads a heartbeat reports)."""


@dataclass
class _Pending:
    group: str
    worker_id: str
    session_id: str
    message: Heartbeat | Release
    now_ms: int
    fenced: Callable[[FencedError], None]


class SessionWriter:
    """Writes the sessions' heartbeats and releases of one replica in batches (see the module's docstring).

    Until `start`, every message is written as it comes (tests driving sessions by hand see each at once).
    """

    def __init__(self, db: Database, *, ttl_ms: int, flush_ms: int, clock: Clock = SYSTEM, replica: str = "") -> None:
        self.db = db
        self.replica = replica
        """The replica whose sessions these are: it ends only those it still serves (see `leases.leave`)."""
        self.ttl_ms = ttl_ms
        self.flush_ms = flush_ms
        self.clock = clock
        self._lock = threading.Lock()
        self._beats: dict[tuple[str, str, str], _Pending] = {}
        self._releases: list[_Pending] = []
        self._leaves: list[_Leave] = []  # sessions whose end could not be written yet
        self._wake = Signal()
        self._loop = BackgroundLoop("session-writer", self._pass, interval_ms=flush_ms, clock=clock, signal=self._wake)
        self._started = False

    def heartbeat(
        self, group: str, worker_id: str, session_id: str, beat: Heartbeat, fenced: Callable[[FencedError], None]
    ) -> None:
        """Take a session's heartbeat, already checked (`leases.check_heartbeat`); `fenced` is called if its
        session turns out to have ended."""
        pending = _Pending(group, worker_id, session_id, beat, self.clock.now_ms(), fenced)
        key = (group, worker_id, session_id)
        with self._lock:
            old = self._beats.get(key)
            if old is not None and isinstance(old.message, Heartbeat):  # a beat waiting: always a heartbeat
                pending.message = old.message.merged(beat)
            self._beats[key] = pending
        if not self._started:
            self.flush()

    def release(
        self, group: str, worker_id: str, session_id: str, release: Release, fenced: Callable[[FencedError], None]
    ) -> None:
        """Take a session's release of one lease; written at once, with whatever else is waiting."""
        with self._lock:
            self._releases.append(_Pending(group, worker_id, session_id, release, self.clock.now_ms(), fenced))
        if not self._started:
            self.flush()
        else:
            self._wake.set()

    def leave(self, group: str, worker_id: str, session_id: str, reason: str) -> bool:
        """End a session and free its leases now; if the store cannot be reached, keep it and try again at every
        flush. True if it ended now (False: already ended, resumed on another replica, or kept for later)."""
        try:
            now_ms = self.clock.now_ms()
            left = leases.leave(self.db, group, worker_id, session_id, reason, now_ms=now_ms, replica=self.replica)
        except StreamplaneError as err:
            log.warning("session.leave_failed", group=group, worker=worker_id, error=err.message)
            with self._lock:
                self._leaves.append((group, worker_id, session_id, reason))
            return False
        if left:
            log.info("session.closed", group=group, worker=worker_id, reason=reason)
        return left

    def flush(self) -> None:
        """Write every message taken so far, and end the sessions whose end could not be written before."""
        with self._lock:
            batch = self._releases + list(self._beats.values())
            self._releases, self._beats = [], {}
            leaves, self._leaves = self._leaves, []
        for leave in leaves:
            self.leave(*leave)
        for i in range(0, len(batch), MAX_BATCH):
            chunk = batch[i : i + MAX_BATCH]

            def write(tr: Transaction, chunk: list[_Pending] = chunk) -> tuple[list[Any], list[Any]]:
                return self._write(tr, chunk)

            try:
                ended, refused = self.db.transact(write)
            except StreamplaneError as err:  # the store is unreachable: the sessions' TTLs will tell
                log.warning("sessions.write_failed", messages=len(chunk), error=err.message)
                continue
            except Exception:  # a bug met by one message: it must not cost the others theirs
                log.exception("sessions.batch_crashed", messages=len(chunk))
                ended, refused = self._one_by_one(chunk)
            for p, why in refused:  # a release that cannot apply concerns that lease only
                log.info("session.release_refused", group=p.group, worker=p.worker_id, error=why.message)
            for p, fenced in ended:
                p.fenced(fenced)

    def _write(
        self, tr: Transaction, chunk: Sequence[_Pending]
    ) -> tuple[list[tuple[_Pending, FencedError]], list[tuple[_Pending, StreamplaneError]]]:
        """Write a batch; returns the messages of ended sessions, and the releases refused."""
        ended, refused = [], []
        for p in chunk:  # every check below raises before its message wrote anything
            try:
                if isinstance(p.message, Release):
                    leases.release(
                        tr, p.group, p.worker_id, p.session_id, p.message.lease_id, p.message.epoch, now_ms=p.now_ms
                    )
                else:
                    leases.heartbeat(
                        tr, p.group, p.worker_id, p.session_id, p.message, now_ms=p.now_ms, ttl_ms=self.ttl_ms
                    )
            except FencedError as err:
                ended.append((p, err))
            except StreamplaneError as err:
                refused.append((p, err))
        return ended, refused

    def _one_by_one(
        self, chunk: Sequence[_Pending]
    ) -> tuple[list[tuple[_Pending, FencedError]], list[tuple[_Pending, StreamplaneError]]]:
        """Write a batch that failed as a whole a message at a time, leaving out the ones that still fail."""
        ended, refused = [], []
        for p in chunk:

            def write(tr: Transaction, one: _Pending = p) -> tuple[list[Any], list[Any]]:
                return self._write(tr, [one])

            try:
                one_ended, one_refused = self.db.transact(write)
            except StreamplaneError as err:
                log.warning("sessions.write_failed", messages=1, error=err.message)
                continue
            except Exception:
                log.exception("session.write_crashed", group=p.group, worker=p.worker_id)
                continue
            ended += one_ended
            refused += one_refused
        return ended, refused

    def _pass(self) -> None:
        try:
            self.flush()
        except Exception:
            log.exception("sessions.flush_crashed")

    def start(self) -> None:
        self._started = True
        self._loop.start()

    def stop(self) -> None:
        if self._started:
            self._loop.stop()
            self._started = False
        self.flush()
