"""The consumer's place in its group: the group session, and the leases it is granted and gives back.

One thread keeps the session. When its stream breaks (the coordinator restarted, or the group's leadership
moved) handing out stops and the session is resumed: its leases, epochs, records in flight and outcomes not
yet committed stay valid. Only if the session ended meanwhile are the leases given up. A grant makes a ledger
and adds the lease to the fetch loop; a revoke with a deadline lets in-flight records end (the committer
hands the lease back), one without a deadline drops it at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from streamplane.client import metrics
from streamplane.client.consumer.dispatch import Dispatch
from streamplane.client.consumer.fetch_loop import FetchLoop, Read
from streamplane.client.consumer.ledger import GrantedLease, LeaseLedger
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.credentials import ClientTls
from streamplane.client.kafka import KafkaAuthenticationError
from streamplane.client.records import Fetched
from streamplane.client.session import SessionEndedError, WorkerSession
from streamplane.errors import (
    AlreadyExistsError,
    FencedError,
    LimitExceededError,
    StreamplaneError,
    UnauthenticatedError,
    UnavailableError,
)
from streamplane.model import Expect, Finished, Grant, Progress, Revoke, Sealed, SessionEvent
from streamplane.native import compile_where

log = structlog.get_logger(__name__)

PROGRESS_RANGES = 100_000
"""Done ranges above a granted lease's start read from the commit log (for one lease, and for a call of many)."""
REJOIN_MAX_S = 1.0
"""The longest wait between attempts to get the group session back (records wait for it: keep it short)."""


class _Receiver:
    """What the fetch loop talks to for one lease: its ledger, and where its records go."""

    __slots__ = ("dispatch", "ledger", "membership")

    def __init__(self, membership: Membership, ledger: LeaseLedger) -> None:
        self.membership, self.ledger, self.dispatch = membership, ledger, membership.dispatch

    def fetchable(self) -> bool:
        return self.ledger.fetchable()

    def received(self, fetched: Fetched) -> tuple[int, int]:
        ledger = self.ledger
        for s in fetched.skipped:
            reason = "too_large" if isinstance(s.error, LimitExceededError) else "corrupt"
            metrics.DECODE_ERRORS.labels(*ledger.labels, reason).inc()
            metrics.REJECTS.labels(*ledger.labels).inc(max(0, s.next_offset - s.first_offset))
            log.warning(
                "consumer.batch_rejected",
                lease=ledger.lease_id,
                first=s.first_offset,
                end=s.next_offset,
                reason=s.error.message,
            )
        delivered, used, count = ledger.accept(fetched, batches=self.dispatch.mode == "batches")
        if fetched.batch is not None:
            metrics.FETCH_BYTES.labels(*ledger.labels).inc(fetched.batch.consumed)
            if fetched.batch.filtered:
                metrics.FILTERED.labels(*ledger.labels).inc(fetched.batch.filtered)
        if delivered:
            metrics.RECORDS_IN.labels(*ledger.labels).inc(count)
            first, ledger.handed_out = not ledger.handed_out, True
            self.dispatch.deliver(delivered, first=first)
        return used, count

    def failed(self, error: StreamplaneError) -> None:
        self.membership.lease_failed(self.ledger, error)


class Membership:
    """The group session and the ledgers of the leases it holds.

    Args:
        client: the coordinator client (progress reads, credentials).
        group, stream, lanes, worker_id: who joins, for what.
        tls: the coordinator connection's TLS settings.
        fetch: the fetch loop granted leases are read through.
        dispatch: where read records go.
        new_ledger: makes the ledger of a granted lease.
        start_from_latest: where a lease with no progress starts.
        connected: set while the session is up (cleared while it is being resumed).
        closed: set when the consumer closes.
        end: ends the consumer for an error no retry heals.
    """

    def __init__(
        self,
        *,
        client: CoordinatorClient,
        group: str,
        stream: str,
        lanes: list[str],
        worker_id: str,
        tls: ClientTls | None,
        fetch: FetchLoop,
        dispatch: Dispatch,
        new_ledger: Callable[[GrantedLease], LeaseLedger],
        start_from_latest: bool,
        connected: threading.Event,
        closed: threading.Event,
        end: Callable[[StreamplaneError], None],
    ) -> None:
        self.client, self.group, self.stream, self.lanes, self.worker_id = client, group, stream, lanes, worker_id
        self._tls, self._fetch, self.dispatch, self._new_ledger = tls, fetch, dispatch, new_ledger
        self._start_from_latest = start_from_latest
        self.finished = False
        """The group's replay window is processed to its end (the coordinator said so): the consumer stops."""
        self.connected, self._closed, self._end = connected, closed, end
        self._ledgers: dict[str, LeaseLedger] = {}
        self._lock = threading.Lock()
        self.session: WorkerSession | None = None
        self.session_id = ""
        """What commits name: kept while the session is being resumed."""
        self.cluster_names: dict[str, str] = {}
        """Bootstrap servers of a grant: its cluster's name (for error reports)."""

    def join(self, resume: str = "") -> WorkerSession:
        """Join the group (or resume `resume`); the stream's unknown lanes or an unreachable coordinator raise."""
        session = WorkerSession(
            self.client.target,
            group=self.group,
            worker_id=self.worker_id,
            subscriptions={self.stream: self.lanes},
            token=self.client.credentials,
            tls=self._tls,
            where=self._fetch.where.text if self._fetch.where is not None else "",
            hints=True,
        )
        session.join(resume=resume)
        if self._fetch.where is None and session.group_where:  # every member filters alike
            self._fetch.where = compile_where(session.group_where)
            log.info("consumer.group_where", group=self.group, where=session.group_where)
        self.session, self.session_id = session, session.session_id
        what = "consumer.resumed" if session.resumed else "consumer.joined"
        log.info(what, group=self.group, worker=self.worker_id, session=session.session_id)
        return session

    def loop(self) -> None:
        """Keep the group session until the consumer closes (the thread's body)."""
        delay = 0.1
        resume = ""
        while not self._closed.is_set():
            session = self.session
            if session is None:
                try:
                    session = self.join(resume)
                    delay = 0.1
                except (UnavailableError, AlreadyExistsError, FencedError) as err:
                    log.warning("consumer.rejoin_failed", error=err.message, retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(REJOIN_MAX_S, delay * 2)
                    continue
                except StreamplaneError as err:
                    # a credential refused for good, a stream deleted: no retry heals it. A refused token that
                    # its file or callback may still replace is tried again for a while (see Credentials).
                    hopeless = not (err.retryable or isinstance(err, UnauthenticatedError))
                    if self.client.credentials.refused(err) or hopeless:
                        self._end(err)
                        return
                    log.warning("consumer.rejoin_refused", error=err.message, retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(REJOIN_MAX_S, delay * 2)
                    continue
                if resume and not session.resumed:
                    self.lose_all()  # that session ended: its leases are someone else's now
                resume = ""
                self.connected.set()
            try:
                for batch in session.batches():
                    self.on_events(batch)
                if self._closed.is_set():
                    return
                raise SessionEndedError("the session stream ended")
            except StreamplaneError as err:
                if self._closed.is_set():
                    return
                log.warning("consumer.session_ended", error=err.message, retry_in_s=delay)
                self.connected.clear()  # nothing more is handed out until the session is back
                resume = session.session_id
                session.close()
                self.session = None
                self._closed.wait(delay)
                delay = min(REJOIN_MAX_S, delay * 2)

    def on_events(self, batch: list[SessionEvent]) -> None:
        """One message's events in order. What the previous holders of its grants finished is read a call for
        as many of them as fit (a worker granted a thousand leases at once makes one call, not a thousand), the
        next call once the grants it answered are taken: one call's answer is held at a time. Grants that
        follow each other start reading together (the brokers' next Fetch asks for all of them); any other
        event waits for the grants before it to start first, so the fetch loop sees them in order."""
        wanted = [e.lease_id for e in batch if isinstance(e, Grant) and self._needs_progress(e)]
        batched, asked = len(wanted) > 1, 0  # wanted[:asked] were answered
        found: dict[str, Progress] = {}
        reads: list[Read] = []
        try:
            for event in batch:
                if not isinstance(event, Grant):
                    self._fetch.add_many(reads)
                    reads = []
                    self.on_event(event)
                    continue
                if batched and asked < len(wanted) and event.lease_id == wanted[asked]:
                    try:
                        page = self.client.progress_batch(self.group, wanted[asked:], max_ranges=PROGRESS_RANGES)
                        found, asked = {p.lease_id: p for p in page}, asked + len(page)
                    except StreamplaneError as err:  # each grant then reads its own (an older coordinator, a blip)
                        log.info("consumer.progress_batch_unavailable", leases=len(wanted) - asked, error=err.message)
                        batched, found = False, {}
                if (read := self._grant(event, found.get(event.lease_id))) is not None:
                    reads.append(read)
        finally:  # a grant taken is read, even when a later event of the message failed
            self._fetch.add_many(reads)

    def on_event(self, event: SessionEvent) -> None:
        """One event other than a grant (grants are taken by `on_events`, those that follow each other together)."""
        match event:
            case Revoke():
                self._revoke(event)
            case Sealed():
                with self._lock:
                    ledger = self._ledgers.get(event.lease_id)
                if ledger is not None:
                    ledger.seal(event.end_offset)
                    self._fetch.touch()
            case Expect(for_ms=for_ms):  # a rewind is being applied: its grants are read as soon as they come
                self._fetch.hurry(for_ms / 1000)
            case Finished():
                log.info("consumer.window_finished", group=self.group, reason=event.reason)
                self.finished = True
                self.dispatch.stop()  # run() returns, the iterator ends: everything was committed

    def _revoke(self, event: Revoke) -> None:
        with self._lock:
            ledger = self._ledgers.get(event.lease_id)
            if ledger is None or ledger.epoch != event.epoch:
                return
            if not event.deadline_ms:
                self._ledgers.pop(event.lease_id)
        if event.deadline_ms:
            ledger.revoking(event.deadline_ms / 1000)
            self._fetch.touch()  # stop fetching it now
        else:
            self._stop_reading(ledger)
        log.info("consumer.lease_revoked", lease=event.lease_id, deadline=event.deadline_ms, reason=event.reason)

    def _needs_progress(self, grant: Grant) -> bool:
        """Whether taking `grant` reads what its previous holders finished above its start: not for a lease
        held already at that epoch (a resumed session's grants again), nor for one the grant says is clean."""
        return not self._held_already(grant) and _skips_done(grant)

    def _held_already(self, grant: Grant) -> bool:
        """Whether `grant` is a lease this worker holds at that epoch: a resumed session's grants again."""
        with self._lock:
            held = self._ledgers.get(grant.lease_id)
        return held is not None and held.epoch == grant.epoch and not held.lost

    def _grant(self, grant: Grant, progress: Progress | None = None) -> Read | None:
        """Take a grant: its ledger, what its previous holders finished; returns the read the fetch loop is to
        start for it (None for a lease this worker holds already at that epoch)."""
        if self._held_already(grant):
            return None  # the lease goes on as it was
        p = grant.partition
        ledger = self._new_ledger(
            GrantedLease(
                lease_id=grant.lease_id,
                epoch=grant.epoch,
                stream=p.stream,
                lane=p.lane,
                generation=p.generation,
                partition=p.partition,
                topic=grant.topic,
                bootstrap_servers=grant.bootstrap_servers,
                start_offset=grant.start_offset,
                end_offset=grant.end_offset,
            )
        )
        if _skips_done(grant):  # skip what a previous holder finished above it
            try:
                if progress is None:
                    progress = self.client.progress(self.group, grant.lease_id, max_ranges=PROGRESS_RANGES)
                ledger.skip_done(list(progress.done), progress.retrying)
                ledger.may_have_retries = progress.retries > 0
            except StreamplaneError as err:
                log.warning("consumer.progress_unavailable", lease=grant.lease_id, error=err.message)
                ledger.may_have_retries = True
        with self._lock:
            old = self._ledgers.get(grant.lease_id)
            self._ledgers[grant.lease_id] = ledger
        if old is not None:
            old.drop()
        position = grant.start_offset if grant.start_offset >= 0 else -2 if self._start_from_latest else -1
        self.cluster_names[grant.bootstrap_servers] = grant.cluster
        mine = compile_where(grant.slice.predicate) if grant.slice is not None else None
        log.info("consumer.lease_granted", lease=grant.lease_id, epoch=grant.epoch, start=grant.start_offset)
        return Read(
            grant.lease_id, grant.bootstrap_servers, grant.topic, p.partition, position, _Receiver(self, ledger), mine
        )

    def _stop_reading(self, ledger: LeaseLedger) -> None:
        """The lease is gone: stop reading it; what it had in flight is the next holder's to read again."""
        ledger.drop()
        self._fetch.remove(ledger.lease_id)

    def lose(self, ledger: LeaseLedger) -> None:
        """Forget a lease that is no longer ours (fenced): nothing is handed back. A ledger that a newer grant
        of the same lease replaced stops alone: the partition goes on being read for the new one."""
        with self._lock:
            current = self._ledgers.get(ledger.lease_id) is ledger
            if current:
                del self._ledgers[ledger.lease_id]
        if current:
            self._stop_reading(ledger)
        else:
            ledger.drop()

    def lose_all(self) -> None:
        with self._lock:
            ledgers, self._ledgers = list(self._ledgers.values()), {}
        for ledger in ledgers:
            self._stop_reading(ledger)

    def release(self, ledger: LeaseLedger) -> None:
        """Hand a revoked lease back (what was done is committed)."""
        self.lose(ledger)
        session = self.session
        if session is not None:
            session.release(ledger.lease_id, ledger.epoch)

    def lease_failed(self, ledger: LeaseLedger, error: StreamplaneError) -> None:
        """The fetch loop cannot read this lease (bad credentials, a broker refusing our versions): give it
        back; an authentication error also ends `run()` and the iterator with that error."""
        log.error("consumer.lease_failed", lease=ledger.lease_id, error=error.message)
        if isinstance(error, KafkaAuthenticationError):
            self.dispatch.stop(error)
        self.release(ledger)

    def ledgers(self) -> list[LeaseLedger]:
        """The ledgers of the leases held now (a copy)."""
        with self._lock:
            return list(self._ledgers.values())

    def leases(self) -> list[str]:
        """The leases read now, sorted."""
        with self._lock:
            return sorted(lid for lid, x in self._ledgers.items() if not x.lost)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


def _skips_done(grant: Grant) -> bool:
    """Whether a worker taking `grant` reads what previous holders finished above its start (a grant from a
    position whose partition is not known clean)."""
    return grant.start_offset >= 0 and not grant.clean
