"""The commit log's service: runs its transactions, then counts what they did for the metrics. The servicer
decodes and encodes around it; the simulator drives it as the servicer does."""

from __future__ import annotations

from collections.abc import Sequence

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.commitlog import redrive
from streamplane.coordinator.groups.leases import TORN_EPOCH, reread_torn
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.records import require_stream
from streamplane.errors import FencedError, StreamplaneError, UnavailableError
from streamplane.model import Commit, CommitOutcome, Lag, PartitionRef, Progress, RedriveClaim, RejectPage, RetryState


class CommitLog:
    """Progress per record of every group: commits fenced by epoch, retries, rejects and lag."""

    def __init__(self, db: Database, *, clock: Clock = SYSTEM, admin: ClusterAdmin | None = None) -> None:
        self.db = db
        self.clock = clock
        self.admin = admin
        """What redrives read the target lane's end offsets through (None: redrives are refused)."""

    def commit(
        self, group: str, lid: str, epoch: int, c: Commit, *, principal: str = "", session_id: str = ""
    ) -> commitlog.CommitResult:
        """One lease's commit; FencedError (counted) if `epoch` is stale or another session holds the lease."""
        now_ms = self.clock.now_ms()
        try:
            result = commitlog.commit(
                self.db, group, lid, epoch, c, now_ms=now_ms, principal=principal, session_id=session_id
            )
        except FencedError as err:
            metrics.STALE_EPOCH.labels(group).inc()
            if err.current_epoch == TORN_EPOCH:
                reread_torn(self.db, group, lid)
            raise
        _count(group, [(c, result)])
        return result

    def commit_many(
        self, group: str, commits: list[tuple[str, int, Commit]], *, principal: str = "", session_id: str = ""
    ) -> list[CommitOutcome]:
        """One worker's commits of many leases in one transaction; each outcome holds its result or its error."""
        results = commitlog.commit_many(
            self.db, group, commits, now_ms=self.clock.now_ms(), principal=principal, session_id=session_id
        )
        out = []
        applied: list[tuple[Commit, commitlog.CommitResult]] = []
        for (lid, _, c), result in zip(commits, results, strict=True):
            if isinstance(result, StreamplaneError):
                if isinstance(result, FencedError):
                    metrics.STALE_EPOCH.labels(group).inc()
                out.append(CommitOutcome(lid, error=result))
                continue
            applied.append((c, result))
            out.append(
                CommitOutcome(
                    lid, result.low_watermark, tuple(result.exhausted), result.retries, copies=tuple(result.copies)
                )
            )
        _count(group, applied)
        return out

    def progress(self, group: str, lid: str, *, max_ranges: int = 1000) -> Progress:
        return self._progress(lid, commitlog.progress(self.db, group, lid, max_ranges=max_ranges))

    def progress_many(self, group: str, lids: Sequence[str], *, max_ranges: int = 100_000) -> list[Progress]:
        """The progress of many leases of one group, in their order, bounded as `commitlog.progress_many` says."""
        found = commitlog.progress_many(self.db, group, lids, max_ranges=max_ranges)
        return [self._progress(lid, p) for lid, p in zip(lids, found, strict=False)]

    def _progress(self, lid: str, p: commitlog.Progress) -> Progress:
        h = p.header
        return Progress(
            lease_id=lid,
            low_watermark=h.low,
            high_watermark=h.high,
            done=tuple(p.done),
            done_above_low_watermark=h.done_above,
            retries=h.retries,
            rejects=h.rejects,
            offset_lag=h.offset_lag(),
            time_lag_ms=h.time_lag_ms(self.clock.now_ms()),
            oldest_pending_ts_ms=h.oldest_pending_ts_ms,
            retrying=tuple(p.retrying),
        )

    def due_retries(self, group: str, lid: str, epoch: int, *, limit: int = 1000) -> list[RetryState]:
        return commitlog.due_retries(self.db, group, lid, epoch, now_ms=self.clock.now_ms(), limit=limit)

    def lag(self, group: str, stream: str = "", lane: str = "", *, partitions: bool = True) -> Lag:
        """Lag of one group (of every group that committed, when `group` is empty); without `partitions`, the
        lanes' totals only."""
        now = self.clock.now_ms()
        if stream:  # an unknown stream is told so, not shown as no lag
            require_stream(self.db, stream)
        if group:
            return commitlog.lag(self.db, group, stream=stream, lane=lane, now_ms=now, partitions=partitions)
        return commitlog.lag_of_every_group(self.db, stream=stream, lane=lane, now_ms=now, partitions=partitions)

    def reject_page(
        self,
        stream: str,
        *,
        group: str = "",
        lane: str = "",
        since_ms: int = 0,
        page_size: int = 0,
        page_token: str = "",
        purged: bool = False,
    ) -> RejectPage:
        """One page of a stream's rejected records (see `commitlog.reject_page`)."""
        return commitlog.reject_page(
            self.db,
            stream,
            group=group,
            lane=lane,
            since_ms=since_ms,
            page_size=page_size,
            page_token=page_token,
            purged=purged,
        )

    def purge_rejects(
        self, stream: str, *, before_ms: int, group: str = "", page_token: str = "", dry_run: bool = False
    ) -> tuple[int, str]:
        """Mark a batch of a stream's old rejects purged (see `commitlog.purge_rejects`)."""
        return commitlog.purge_rejects(
            self.db,
            stream,
            before_ms=before_ms,
            group=group,
            now_ms=self.clock.now_ms(),
            page_token=page_token,
            dry_run=dry_run,
        )

    def claim_redrive(
        self,
        stream: str,
        group: str,
        owner: str,
        *,
        to_lane: str = "realtime",
        since_ms: int = 0,
        until_ms: int = 0,
        cursor: str = "",
        batch_size: int = redrive.MAX_BATCH,
        in_flight: int = 0,
        packed: bool = False,
        complete_batch_id: int = 0,
        left: frozenset[tuple[PartitionRef, int]] = frozenset(),
    ) -> RedriveClaim:
        """The next batch of a redrive run (see `redrive.claim`), with the target lane as it is now; the run's
        batch `complete_batch_id` completed first (0: none)."""
        if self.admin is None:
            raise UnavailableError("this coordinator has no cluster admin to read the target lane's offsets with")
        redrive.check_window(since_ms, until_ms, to_lane)
        target = redrive.target_of(self.db, self.admin, stream, to_lane)
        return redrive.claim(
            self.db,
            stream,
            group,
            owner,
            target=target,
            since_ms=since_ms,
            until_ms=until_ms,
            cursor=cursor,
            batch_size=batch_size,
            in_flight=in_flight,
            packed=packed,
            complete_batch_id=complete_batch_id,
            left=left,
            now_ms=self.clock.now_ms(),
        )

    def complete_redrive(
        self,
        stream: str,
        group: str,
        owner: str,
        left: frozenset[tuple[PartitionRef, int]] = frozenset(),
        batch_id: int = 0,
    ) -> int:
        """The run's batch landed: its rejects are marked redriven (see `redrive.complete`)."""
        return redrive.complete(self.db, stream, group, owner, left=left, batch_id=batch_id, now_ms=self.clock.now_ms())

    def lag_page(self, group: str, stream: str, lane: str, page_size: int, page_token: str) -> Lag:
        """One page of per-partition lag (see `commitlog.lag_page`)."""
        if stream:
            require_stream(self.db, stream)
        return commitlog.lag_page(
            self.db,
            group,
            stream=stream,
            lane=lane,
            now_ms=self.clock.now_ms(),
            page_size=page_size,
            page_token=page_token,
        )


def _count(group: str, applied: list[tuple[Commit, commitlog.CommitResult]]) -> None:
    """Count a call's applied commits: once per call, not per lease (a worker's batch may hold thousands)."""
    if not applied:
        return
    metrics.COMMITS.labels(group).inc(len(applied))
    metrics.ACKED.labels(group).inc(sum(result.newly_done for _, result in applied))
    metrics.RETRIES.labels(group).inc(sum(len(c.retries) for c, _ in applied))
    metrics.REJECTS.labels(group).inc(sum(len(c.rejects) for c, _ in applied))
