"""The streaming reader: plans micro-batches over the generations and partitions of a stream's lanes (on the
driver side) and reads them with the client's fetcher and the native decoder as Arrow batches (on executors).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from streamplane.client import CoordinatorClient
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.client.partition_fetcher import Leaders, PartitionFetcher, fetch_each
from streamplane.client.records import Fetched
from streamplane.errors import StreamplaneError, UnavailableError
from streamplane.model import SEALED, SETTLED, Generation, Lane, PartitionRef, Stream
from streamplane.native import Where, compile_where
from streamplane.native.batch import with_origin
from streamplane.shares import even_runs
from streamplane.spark import offsets as off
from streamplane.spark.options import SourceOptions
from streamplane.spark.progress import commit_positions

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Slice(InputPartition):
    """One range of one partition: what one Spark task reads."""

    stream: str
    lane: str
    generation: int
    partition: int
    topic: str
    bootstrap_servers: str
    begin: int
    end: int


@dataclass(frozen=True)
class Task(InputPartition):
    """What one Spark task reads: ranges of partitions, one after another. Small ranges are packed together
    (`pack`): Spark's own cost for each task of a Python data source, about 70 ms on our machines, would
    otherwise outweigh reading a range of a few thousand records."""

    slices: tuple[Slice, ...]


RANGE_COST = 10_000
"""What reading a range costs beside its records (its lookups and first fetch), counted as this many records
when ranges are packed: ten thousand ranges of ten records each are a hundred tasks, not one."""


def pack(slices: list[Slice], per_task: int) -> list[Task]:
    """`slices` in order, packed into as few tasks of about equal size as keep each at about `per_task` records
    (RANGE_COST counted for each range; a range is never split: minPartitions splits; 0: one range a task)."""
    if per_task <= 0 or not slices:
        return [Task((s,)) for s in slices]
    weights = [s.end - s.begin + RANGE_COST for s in slices]
    tasks = -(-sum(weights) // per_task)
    return [Task(tuple(slices[a:b])) for a, b in even_runs(weights, tasks)]


def lanes_of(stream: Stream, wanted: tuple[str, ...]) -> list[Lane]:
    """The lanes to read: the named ones, or every lane but dlq."""
    return [lane for lane in stream.lanes if (lane.name in wanted if wanted else lane.name != "dlq")]


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client: CoordinatorClient | None = None
        self._watermarks: Watermarks | None = None
        self.source = {"coordinator": self.client.target, "stream": opts.stream, "group": opts.group}
        self.target: dict[str, int] | None = None
        self._ending: dict[str, dict[int, int]] = {}
        """{generation key: {partition: its end by endingTimestamp}}, kept once found."""

    # Spark pickles the reader to ship read() to executors: connections stay behind, made again when needed.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_watermarks": None}

    @property
    def client(self) -> CoordinatorClient:
        if self._client is None:
            self._client = self.opts.access.client()
        return self._client

    @property
    def watermarks(self) -> Watermarks:
        if self._watermarks is None:
            self._watermarks = Watermarks(config=self.opts.access.connection(10.0))
        return self._watermarks

    # -- planning (driver side)
    def _generations(self) -> Iterator[tuple[str, Generation, str]]:
        """(lane, generation, its cluster's bootstrap servers) for every generation of the chosen lanes."""
        stream = self.client.describe_stream(self.opts.stream)
        clusters = {c.name: c.bootstrap_servers for c in self.client.list_clusters()}
        for lane in lanes_of(stream, self.opts.lanes):
            for gen in lane.generations:
                yield lane.name, gen, clusters.get(gen.cluster, "")

    def states(self, done: frozenset[str] = frozenset()) -> list[off.PartState]:
        """Every partition of the chosen lanes' generations that are not `done`, with where it starts and ends
        now. Done generations cost nothing (no watermark is asked for them, whatever their cluster's state), and
        neither do settled ones: the planner needs only their sealed ends."""
        out = []
        for lane, gen, bootstrap in self._generations():
            if off.generation_key(lane, gen.number) in done:
                continue
            sealed = len(gen.end_offsets) == gen.partitions
            state = SEALED if sealed and gen.state not in SETTLED else gen.state
            caps = self._ends(lane, gen, bootstrap)
            marks: dict[int, tuple[int, int]] = {}  # one request per leader for each end, not two a partition
            error = ""
            if gen.state not in SETTLED:
                try:
                    marks = self.watermarks.marks(bootstrap, gen.topic, list(range(gen.partitions)))
                except UnavailableError as err:
                    error = err.message
            for p in range(gen.partitions):
                part = PartitionRef(self.opts.stream, lane, gen.number, p)
                if gen.state in SETTLED:
                    end = gen.end_offsets[p] if sealed else 0
                    out.append(off.PartState(part, gen.topic, bootstrap, 0, min(end, caps.get(p, end)), state))
                    continue
                if p in marks:
                    low, high = marks[p]
                elif not sealed:
                    log.warning("spark.partition_unavailable", partition=off.offset_key(part), error=error)
                    continue  # no news from it this time; its position is kept
                else:
                    low, high = 0, gen.end_offsets[p]
                end = gen.end_offsets[p] if sealed else high
                end = min(end, caps.get(p, end))
                out.append(off.PartState(part, gen.topic, bootstrap, min(low, end), end, state))
        return out

    def _ends(self, lane: str, gen: Generation, bootstrap: str) -> dict[int, int]:
        """{partition: where endingTimestamp ends it} for one generation: its first record at or after the time,
        looked up once (a partition with no record that late yet has no end yet; asked again next time)."""
        at = self.opts.ending_timestamp
        if at is None:
            return {}
        key = off.generation_key(lane, gen.number)
        known = self._ending.setdefault(key, {})
        missing = {p: at for p in range(gen.partitions) if p not in known}
        if missing:
            try:
                found = self.watermarks.at_time(bootstrap, gen.topic, missing)
            except UnavailableError as err:
                log.warning("spark.ending_unavailable", generation=key, error=err.message)
                found = {}
            known.update({p: offset for p, offset in found.items() if offset >= 0})
        return known

    def initialOffset(self) -> dict[str, Any]:
        states = self.states()
        starting = self.opts.starting
        if self.opts.starting_timestamps is not None:  # partitions without a time follow startingOffsets
            base = starting if isinstance(starting, dict) else {}
            if starting == "latest":
                base = dict.fromkeys((off.offset_key(s.part) for s in states), off.LATEST)
            starting = {**base, **self._by_time(states)}
        return off.initial_offset(self.source, states, starting).to_json()

    def _by_time(self, states: list[off.PartState]) -> dict[str, int]:
        """Starting offsets from timestamps, one lookup per topic: the first record at or after the time, or
        the partition's end when it has none (Spark's `latest` strategy)."""
        wanted = self.opts.starting_timestamps
        topics: dict[tuple[str, str], dict[int, int]] = {}
        for s in states:
            ts = wanted if isinstance(wanted, int) else (wanted or {}).get(off.offset_key(s.part))
            if ts is not None and s.state not in SETTLED:
                topics.setdefault((s.bootstrap_servers, s.topic), {})[s.part.partition] = ts
        out = {}
        for (bootstrap, topic), asked in topics.items():
            found = self.watermarks.at_time(bootstrap, topic, asked)
            for s in states:
                if s.topic == topic and s.part.partition in found:
                    offset = found[s.part.partition]
                    out[off.offset_key(s.part)] = offset if offset >= 0 else off.LATEST
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_rows) if self.opts.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {off.offset_key(s.part): s.latest for s in self.states()}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        begin = off.Offset.from_json(start) if start else off.Offset.from_json(self.initialOffset())
        max_rows = getattr(limit, "max_rows", None) if isinstance(limit, ReadMaxRows) else None
        end = off.next_offset(begin, self.states(begin.done), max_rows, self.target)
        return end.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Task]:
        return self.tasks(self.slices(start, end))

    def tasks(self, slices: list[Slice]) -> list[Task]:
        """The ranges packed into tasks (not when minPartitions asks for more tasks: each range is one then)."""
        return pack(slices, 0 if self.opts.min_partitions else self.opts.records_per_task)

    def slices(self, start: dict[str, Any], end: dict[str, Any]) -> list[Slice]:
        """The ranges from `start` to `end`, by partition (split in pieces when minPartitions asks for it)."""
        stop = off.Offset.from_json(end)
        todo = off.ranges(off.Offset.from_json(start), stop)
        if not todo:
            return []
        where = {(lane, gen.number): (gen.topic, bootstrap) for lane, gen, bootstrap in self._generations()}
        pieces = 1
        if self.opts.min_partitions and len(todo) < self.opts.min_partitions:
            pieces = -(-self.opts.min_partitions // len(todo))
        slices = []
        for key, frm, until in todo:
            part = off.parse_offset_key(self.opts.stream, key)
            if (part.lane, part.generation) not in where:
                raise UnavailableError(f"partition {key} of stream {self.opts.stream} is no longer in the topology")
            topic, bootstrap = where[(part.lane, part.generation)]
            for a, b in off.split(frm, until, pieces):
                slices.append(
                    Slice(self.opts.stream, part.lane, part.generation, part.partition, topic, bootstrap, a, b)
                )
        return slices

    def commit(self, end: dict[str, Any]) -> None:
        """Spark calls this one batch late (see progress.py); with an explicit group, record it anyway."""
        if self.opts.group:
            try:
                positions = dict(off.Offset.from_json(end).positions)
                commit_positions(self.client, self.opts.group, self.opts.stream, positions)
            except StreamplaneError as err:
                log.warning("spark.commit_failed", group=self.opts.group, error=err.message)

    def stop(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
        if self._client is not None:
            self._client.close()

    # -- reading (executors)
    def read(self, partition: Task) -> Iterator[Any]:  # type: ignore[override]
        yield from read_task(partition, self.opts, compile_where(self.opts.where) if self.opts.where else None)


def read_task(task: Task, opts: SourceOptions, where: Where | None) -> Iterator[Any]:
    """The records of a task's ranges as pyarrow.RecordBatches built from the decoder's columns; only those
    `where` matches (None: every record). Its ranges are read together (`fetch_each`): one Fetch for the
    ranges of each broker and topic, over one connection per broker, and no lookup before the first."""
    leaders = Leaders(opts.access.connection())
    ranges = {
        PartitionFetcher(
            s.bootstrap_servers,
            s.topic,
            s.partition,
            start_offset=s.begin,
            max_decompressed=opts.max_decompressed,
            where=where,
            leaders=leaders,
            on_lost=_on_lost(s, opts),
        ): s
        for s in task.slices
    }
    try:
        pending = [f for f, s in ranges.items() if f.position < s.end]
        while pending:
            for fetcher, got in fetch_each(pending):
                yield from _rows(ranges[fetcher], fetcher, got, opts)
            pending = [f for f in pending if f.position < ranges[f].end]
    finally:
        leaders.close()


def _on_lost(s: Slice, opts: SourceOptions) -> Callable[[int, int], None]:
    """What a range does when retention removed records of it before they were read: fail the query (Spark's
    failOnDataLoss, the default) or say so and go on."""

    def lost(lost_from: int, lost_to: int) -> None:
        if opts.fail_on_data_loss:
            raise UnavailableError(
                f"{s.topic}/{s.partition}: offsets {lost_from} to {lost_to} are gone (retention); "
                "set failOnDataLoss=false to go on without them"
            )
        log.warning("spark.data_lost", topic=s.topic, partition=s.partition, lost_from=lost_from, lost_to=lost_to)

    return lost


def _rows(s: Slice, fetcher: PartitionFetcher, got: Fetched, opts: SourceOptions) -> Iterator[Any]:
    """The records of one fetch of range `s` that are in it, as a pyarrow.RecordBatch (none when it holds none)."""
    for skipped in got.skipped:
        log.warning(
            "spark.batch_skipped",
            topic=s.topic,
            partition=s.partition,
            first=skipped.first_offset,
            next=skipped.next_offset,
            reason=skipped.error.message,
        )
    if got.batch is None or not got.batch.count:
        filtered = got.batch is not None and got.batch.filtered > 0  # read, and every record left out
        if not got.skipped and not filtered and fetcher.position < s.end and got.high_watermark <= fetcher.position:
            raise UnavailableError(f"{s.topic}/{s.partition} ends at {got.high_watermark}, before {s.end}")
        return
    offsets = got.batch.offsets  # ascending
    lo, hi = bisect.bisect_left(offsets, s.begin), bisect.bisect_left(offsets, s.end)
    if hi > lo:
        yield with_origin(
            got.batch.to_arrow().slice(lo, hi - lo),
            s.stream,
            s.lane,
            s.generation,
            s.partition,
            headers=opts.include_headers,
        )
