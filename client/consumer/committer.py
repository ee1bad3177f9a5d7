"""The consumer's committer: one thread for every lease, whatever their count.

About every `commit_interval_s` it commits every lease that changed in one CommitBatch call (each with its
epoch), hands back revoked leases whose in-flight records ended (or whose deadline is near), asks which
retries are due and re-reads them, and tells the Assigner the load of each lease whose load moved. Idle
leases cost nothing: a ledger tells the committer when it has something (`changed`), and only those are
looked at.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from streamplane.client import metrics
from streamplane.client.consumer.dispatch import Dispatch
from streamplane.client.consumer.dlq import DlqCopier
from streamplane.client.consumer.fetch_loop import FetchLoop
from streamplane.client.consumer.ledger import LeaseLedger, Outcomes
from streamplane.client.consumer.membership import Membership
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.records import Fetched
from streamplane.client.session import LeaseLoad, WorkerSession
from streamplane.clock import Clock
from streamplane.errors import FencedError, StreamplaneError
from streamplane.model import ClusterErrors, Commit, LeaseCommit
from streamplane.offsets import normalize, to_bitmap, to_ranges

log = structlog.get_logger(__name__)

REVOKE_MARGIN_S = 0.25
"""How long before a revoke deadline the consumer stops waiting for a lease's in-flight records and commits."""
RETRY_CHECK_S = 0.5
"""How often leases with retry state ask which retries are due."""
LOAD_REPORT_S = 1.0
"""How often lease loads that changed are reported to the Assigner."""
MAX_COMMIT_LEASES = 1024
"""Leases in one CommitBatch call (one store transaction each)."""
BATCH_BYTES = 4_000_000
"""About what one CommitBatch call writes at most (a store transaction holds 10 MB)."""


IDLE = LeaseLoad()
"""The load of a lease with nothing to do."""


def load_changed(last: LeaseLoad, now: LeaseLoad) -> bool:
    """Whether a lease's load moved enough to be worth telling the Assigner (noise is not). A lease that went
    idle is always told: a small last load (900 ms behind, say) would otherwise stay the Assigner's view for
    good, and a split's slices merge back only once it sees them keep up."""
    if now == IDLE:
        return last != IDLE
    return (
        abs(now.records_per_s - last.records_per_s) > max(1.0, 0.2 * last.records_per_s)
        or abs(now.lag_records - last.lag_records) > max(100, last.lag_records // 5)
        or abs(now.lag_ms - last.lag_ms) > max(1000, last.lag_ms // 5)
    )


class Committer:
    """Commits, revokes, retries and load reports for every lease of one consumer.

    Args:
        client: the coordinator client commits go through.
        group: the consumer group.
        membership: the session and the held leases.
        fetch: the fetch loop (one-off reads of due retries, fetch errors to report).
        dlq: where rejected records are copied.
        dispatch: where records re-read for a due retry go.
        clock: the consumer's time.
        commit_interval_s: the pace of commits.
        retry_backoff_s: a retry's default backoff (ledgers ask their owner).
        closed: set when the consumer closes.
        end: ends the consumer for an error no retry heals.
    """

    def __init__(
        self,
        *,
        client: CoordinatorClient,
        group: str,
        membership: Membership,
        fetch: FetchLoop,
        dlq: DlqCopier,
        dispatch: Dispatch,
        clock: Clock,
        commit_interval_s: float,
        retry_backoff_s: float,
        closed: threading.Event,
        end: Callable[[StreamplaneError], None],
    ) -> None:
        self.client, self.group, self.membership = client, group, membership
        self._fetch, self._dlq, self._dispatch = fetch, dlq, dispatch
        self.clock, self.commit_interval_s, self.retry_backoff_s = clock, commit_interval_s, retry_backoff_s
        self._closed, self._end = closed, end
        self.active: set[LeaseLedger] = set()
        """Leases to look at: those that read, ended records or are revoking since the last round."""
        self._loads: dict[str, LeaseLoad] = {}
        """The load each lease last told the Assigner, through `_told_by` (the session that carried it)."""
        self._told_by: WorkerSession | None = None

    def changed(self, ledger: LeaseLedger) -> None:
        """A ledger has something to commit (the LedgerOwner hook)."""
        self.active.add(ledger)

    def loop(self) -> None:
        """Commit rounds until the consumer closes (the thread's body)."""
        next_load = next_retries = 0.0
        while not self._closed.wait(self.commit_interval_s):
            active = list(self.active)  # the leases that read, ended records or are revoking: idle ones cost nothing
            done_revoking = self._revokes_done(active)
            self.commit(active)
            for ledger in done_revoking:
                if not ledger.dirty:  # else its commit failed (its replica died, say): tried again next round
                    self.membership.release(ledger)
            for ledger in active:
                if ledger.lost or ledger.quiet:
                    self.active.discard(ledger)
                    if not ledger.lost and not ledger.quiet:  # it read again meanwhile: keep it
                        self.active.add(ledger)
            now = self.clock.monotonic()
            if now >= next_retries or now >= next_load:
                ledgers = self.membership.ledgers()
            if now >= next_retries:
                next_retries = now + RETRY_CHECK_S
                self._dlq.check(self._end)  # a copy producer that ended: its unreported copies are made again
                self._due_retries([x for x in ledgers if x.may_have_retries and not x.lost])
            if now >= next_load:
                next_load = now + LOAD_REPORT_S
                self._report_load(ledgers)

    def _revokes_done(self, ledgers: list[LeaseLedger]) -> list[LeaseLedger]:
        """Revoking leases whose in-flight work has ended, or whose deadline is near: commit and hand back. None
        while the session is being resumed: a release cannot be sent then, and the group's new owner may give the
        lease a later deadline (told with the resumed session's grants) if the old one died with its replica."""
        if not self.membership.connected.is_set():
            return []
        now = self.clock.now_ms() / 1000
        return [
            x
            for x in ledgers
            if x.revoke_deadline and not x.lost and (not x.busy or now >= x.revoke_deadline - REVOKE_MARGIN_S)
        ]

    def commit(self, ledgers: list[LeaseLedger]) -> None:
        """Commit what changed on these leases, in as few calls as the batch limit allows (outcomes are kept
        for the next try when a call fails)."""
        pending: list[tuple[LeaseLedger, Outcomes, LeaseCommit]] = []
        for ledger in ledgers:
            if ledger.lost or not (ledger.dirty or ledger.in_hand):
                continue  # an idle lease: nothing to look at
            taken = ledger.take_outcomes()
            if taken is not None:
                out, oldest = taken
                pending.append((ledger, out, _request(ledger, out, oldest)))
        batch: list[tuple[LeaseLedger, Outcomes, LeaseCommit]] = []
        size = 0
        for item in pending:  # calls of at most MAX_COMMIT_LEASES leases and about BATCH_BYTES
            cost = item[1].cost()
            if batch and (len(batch) >= MAX_COMMIT_LEASES or size + cost > BATCH_BYTES):
                self._commit_batch(batch)
                batch, size = [], 0
            batch.append(item)
            size += cost
        if batch:
            self._commit_batch(batch)

    def _commit_batch(self, batch: list[tuple[LeaseLedger, Outcomes, LeaseCommit]]) -> None:
        session_id = self.membership.session_id
        try:
            outcomes = self.client.commit_batch(self.group, [r for _, _, r in batch], session_id=session_id)
        except StreamplaneError as err:
            for ledger, out, _ in batch:
                ledger.put_back(out)
            metrics.COMMIT_FAILURES.labels(self.group).inc()
            if self.client.credentials.refused(err):
                self._end(err)
                return
            log.warning("consumer.commit_failed", leases=len(batch), error=err.message)
            return
        now_ms = self.clock.now_ms()
        for (ledger, out, request), result in zip(batch, outcomes, strict=True):
            error = result.error
            if error is not None:
                if isinstance(error, FencedError):
                    log.info("consumer.lease_fenced", lease=ledger.lease_id, epoch=ledger.epoch)
                    self.membership.lose(ledger)
                else:
                    log.warning("consumer.commit_refused", lease=ledger.lease_id, error=error.message)
                    ledger.put_back(out)
                continue
            labels = ledger.labels
            metrics.ACKS.labels(*labels).inc(len(out.acked) + out.batch_acked)
            metrics.RETRIES.labels(*labels).inc(len(out.retries))
            oldest = request.commit.oldest_pending_ts_ms
            metrics.TIME_LAG.labels(self.group, ledger.lease_id).set(max(0, now_ms - oldest) / 1000 if oldest else 0)
            ledger.may_have_retries = result.retries > 0 or (ledger.may_have_retries and bool(out.retries))
            for copy in ledger.committed(out, result.copies):
                try:
                    self._dlq.send(ledger, copy)
                except StreamplaneError as err:  # the copy waits: made again at the next retry check here
                    ledger.copy_failed(copy.msg)
                    if self.client.credentials.refused(err):
                        self._end(err)
                        return
                    log.warning("consumer.dlq_unavailable", lease=ledger.lease_id, error=err.message)

    def _due_retries(self, ledgers: list[LeaseLedger]) -> None:
        """Re-read records whose retry is due, and reject exhausted ones a previous holder left."""
        for ledger in ledgers:
            try:
                due = self.client.due_retries(self.group, ledger.lease_id, ledger.epoch, limit=200)
            except FencedError:
                continue  # the next commit finds it fenced and drops it
            except StreamplaneError as err:  # the coordinator is away: live records go on
                log.info("consumer.retries_unavailable", lease=ledger.lease_id, error=err.message)
                return
            busy = ledger.busy_offsets()
            want = {d.offset: d for d in due if d.offset not in busy}
            if want:
                self._read_retries(ledger, want)

    def _read_retries(self, ledger: LeaseLedger, want: dict[int, Any]) -> None:
        def got(fetched: Fetched | None, error: StreamplaneError | None) -> None:
            if fetched is None or ledger.lost:
                return  # tried again at the next check
            before = len(want)
            found, _ = ledger.retried(fetched, want)
            if found:
                self._dispatch.deliver(found)
            if want and len(want) < before:
                self._fetch.fetch_at(ledger.lease_id, min(want), got)

        self._fetch.fetch_at(ledger.lease_id, min(want), got)

    def _report_load(self, ledgers: list[LeaseLedger]) -> None:
        """Tell the Assigner the throughput and lag of each lease whose load changed: it balances by them."""
        session = self.membership.session
        if session is None:
            return
        if session is not self._told_by:  # a resumed or new session: what the last one had not sent went with it
            self._loads.clear()
            self._told_by = session
        now_s = self.clock.monotonic()
        now_ms = self.clock.now_ms()
        total = 0.0
        changed: dict[str, LeaseLoad] = {}
        for x in ledgers:
            if x.lost:
                continue
            last = self._loads.get(x.lease_id)
            if last == IDLE and x.idle:
                continue  # idle before and now: nothing to compute, nothing to tell
            rate = x.take_rate(now_s)
            total += rate
            oldest = x.oldest_pending_ts()
            load = LeaseLoad(rate, x.records_behind(), max(0, now_ms - oldest) if oldest else 0)
            if last is None or load_changed(last, load):
                self._loads[x.lease_id] = load
                changed[x.lease_id] = load
        live = {x.lease_id for x in ledgers}
        for lid in [lid for lid in self._loads if lid not in live]:
            del self._loads[lid]
        names = self.membership.cluster_names
        errors = [
            ClusterErrors(names.get(bootstrap, bootstrap)[:64], count, last)
            for bootstrap, (count, last) in self._fetch.take_errors().items()
        ]
        session.report_load(records_per_s=total, leases=changed, errors=errors)


def _request(ledger: LeaseLedger, out: Outcomes, oldest: int) -> LeaseCommit:
    """One lease's commit: acks as ranges, or as a bitmap when scattered acks make that smaller. Filtered-out
    offsets are done as acked ones are (the commit log merges them in), so they are merged into the acked ranges
    here too: a `where` that matches one record in a hundred leaves a run of acked and filtered offsets, sent as
    one range, not one for each matched record (the filtered ranges still say which offsets to count apart)."""
    ranges = to_ranges(out.acked)
    bitmap, base = b"", 0
    if len(ranges) > 4096:
        (bitmap, base), ranges = to_bitmap(out.acked), []
    commit = Commit(
        acked=normalize(ranges + out.ranges + out.filtered) if out.filtered else ranges + out.ranges,
        retries=out.retries,
        rejects=out.rejects,
        oldest_pending_ts_ms=oldest,
        high_watermark=ledger.high_watermark,
        high_watermark_ts_ms=ledger.last_ts,
        acked_bitmap=bitmap,
        acked_bitmap_base=base,
        copying=out.copying,
        filtered=out.filtered,
    )
    return LeaseCommit(ledger.lease_id, ledger.epoch, commit)
