"""Recording a Spark query's progress in the commit log, so `streamplane lag` shows it like any group.

Spark calls a reader's `commit(end)` only when it plans the *next* batch, one batch late, and never for the
last batch of an availableNow run. So progress is recorded from a StreamingQueryListener on the driver:
`onQueryProgress` fires right after each batch with its end offsets. For each partition the listener acks
everything below the end, and, where the source had more (its latest offset), reads the timestamp of the
first unread record, so the time lag is current to within one trigger interval.

The query's group is the `group` option, else `spark-<query name>`, else `spark-<query id>` (stable across
restarts from a checkpoint). Spark's groups are unmanaged: they commit with epoch 0, fenced by Spark's own
checkpoints rather than by Assigner leases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog
from pyspark.sql.streaming.listener import StreamingQueryListener

from streamplane.client import CoordinatorClient
from streamplane.client.kafka.config import ConnectionConfig
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.errors import StreamplaneError
from streamplane.model import Commit, LeaseCommit
from streamplane.spark.offsets import parse_offset_key

log = structlog.get_logger(__name__)


def lease_id(stream: str, key: str) -> str:
    """The commit log's partition id of a source position key lane/generation/partition."""
    return parse_offset_key(stream, key).lease_id


def commit_positions(
    client: CoordinatorClient,
    group: str,
    stream: str,
    positions: dict[str, int],
    pending_ts: dict[str, int] | None = None,
    latest: dict[str, int] | None = None,
    previous: dict[str, int] | None = None,
) -> None:
    """Everything below each position is processed; `pending_ts` gives the oldest unprocessed record's time.

    With `previous` (the batch's start), only partitions that moved, or that have more to read, are committed:
    a query's finished generations stay in its offsets for good and cost nothing after their last batch. The
    commits go in batched calls."""
    commits = []
    for key, end in positions.items():
        high = max(end, (latest or {}).get(key, end))
        if high <= 0 or (previous is not None and previous.get(key) == end and high == end):
            continue
        commit = Commit(
            acked=[(0, end)] if end > 0 else [],
            high_watermark=high,
            oldest_pending_ts_ms=(pending_ts or {}).get(key, 0),
        )
        commits.append(LeaseCommit(lease_id(stream, key), 0, commit))
    for i in range(0, len(commits), COMMITS_PER_CALL):
        for outcome in client.commit_batch(group, commits[i : i + COMMITS_PER_CALL]):
            if outcome.error is not None:
                log.warning("spark.commit_refused", group=group, lease=outcome.lease_id, error=outcome.error.message)


COMMITS_PER_CALL = 1024
"""Leases per batched commit call: well under the commit log's own limit per call."""


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if text else None
    except (TypeError, ValueError):
        return None


def group_of(source: dict[str, Any], query_name: str | None, query_id: str) -> str:
    return source.get("group") or f"spark-{query_name or query_id}"


def _watermarks(kafka: Mapping[str, Any] | None) -> Watermarks:
    """Watermarks read over connections made with these librdkafka-named settings (plaintext without)."""
    return Watermarks(config=ConnectionConfig.from_settings(kafka or {}))


class ProgressListener(StreamingQueryListener):
    """Commits each finished micro-batch of every streamplane source of every query of the session. `kafka`:
    librdkafka-named settings (TLS, SASL) with which it reads the timestamps of unread records."""

    def __init__(self, kafka: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.marks = _watermarks(kafka)

    def use(self, kafka: Mapping[str, Any] | None) -> None:
        """Read Kafka with these settings from now on (InvalidArgumentError for settings that make no
        connection); the connections made with the ones before are closed."""
        marks, self.marks = self.marks, _watermarks(kafka)
        marks.close()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        for source in progress.sources:
            try:
                end = _json(source.endOffset)
                if not isinstance(end, dict) or "positions" not in end or "source" not in end:
                    continue  # not one of ours
                latest, start = _json(source.latestOffset), _json(source.startOffset)
                self.record(
                    end,
                    latest if isinstance(latest, dict) else None,
                    progress.name,
                    str(progress.id),
                    start if isinstance(start, dict) else None,
                )
            except StreamplaneError as err:
                log.warning("spark.progress_not_recorded", query=progress.name or str(progress.id), error=err.message)
            except Exception:
                log.exception("spark.progress_failed", query=progress.name or str(progress.id))

    def record(
        self,
        end: dict[str, Any],
        latest: dict[str, Any] | None,
        query_name: str | None,
        query_id: str,
        start: dict[str, Any] | None = None,
    ) -> None:
        meta, positions = end["source"], {k: int(v) for k, v in end["positions"].items()}
        newest = {k: int(v) for k, v in (latest or {}).get("positions", {}).items()}
        previous = {k: int(v) for k, v in start["positions"].items()} if start and "positions" in start else None
        group = group_of(meta, query_name, query_id)
        with CoordinatorClient(meta["coordinator"]) as client:
            pending = _pending_times(client, meta["stream"], positions, newest, self.marks)
            commit_positions(client, group, meta["stream"], positions, pending, newest, previous)


def _pending_times(
    client: CoordinatorClient, stream: str, positions: dict[str, int], latest: dict[str, int], marks: Watermarks
) -> dict[str, int]:
    """The timestamp of the first unread record of each partition that has more than was read: one Fetch per
    leader of each generation, through `marks`' kept connections. A generation whose cluster does not answer is
    left out (the commit goes on without those times: its time lag is computed as for a partition with none),
    never waited for: the listener serves every query of the session."""
    behind = {k: v for k, v in positions.items() if latest.get(k, v) > v}
    if not behind:
        return {}
    described = client.describe_stream(stream)
    clusters = {c.name: c.bootstrap_servers for c in client.list_clusters()}
    where = {}
    for lane in described.lanes:
        for gen in lane.generations:
            where[(lane.name, gen.number)] = (clusters.get(gen.cluster, ""), gen.topic)
    asked: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}  # (bootstrap, topic): {partition: (key, pos)}
    for key, pos in behind.items():
        lane_name, generation, partition = key.rsplit("/", 2)
        bootstrap, topic = where.get((lane_name, int(generation)), ("", ""))
        if bootstrap:
            asked.setdefault((bootstrap, topic), {})[int(partition)] = (key, pos)
    out = {}
    for (bootstrap, topic), parts in asked.items():
        try:
            found = marks.timestamps(bootstrap, topic, {p: pos for p, (_, pos) in parts.items()})
        except StreamplaneError as err:
            log.warning("spark.pending_times_unread", stream=stream, topic=topic, error=err.message)
            continue
        for p, ts in found.items():
            out[parts[p][0]] = ts
    return out
