"""Running a dlq redrive: a group's rejected records produced again into a lane, each exactly once.

The commit log hands the run one batch at a time (`CoordinatorClient.claim_redrive`), the next one while the
run produces this one (the commit log's work and Kafka's overlap); the run reads each record's dlq copy
straight from Kafka (or, when no copy was recorded, the record itself at its origin), and produces it into the
target lane with its provenance: `sp-redrive-of` (the group and the record's original position) and
`sp-redrive-dlq` (where its dlq copy was). Once the batch is acknowledged by Kafka, completing it marks its
rejects redriven (in the call that claims the batch after the next one: one call a batch). A run killed in
between leaves its batch in doubt: the next run looks in the target lane, from the offsets the lane had before
that batch, for those provenance headers, and produces only the records it does not find. So a redrive killed
half way and run again produces every record once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog

from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.kafka import ConnectionConfig
from streamplane.client.partition_fetcher import Leaders, PartitionFetcher
from streamplane.client.producer import Producer
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, StreamplaneError, UnavailableError
from streamplane.model import PartitionRef, RedriveClaim, RedriveTarget

log = structlog.get_logger(__name__)

PROVENANCE_HEADER = "sp-redrive-of"
"""'<group> <stream>/<lane>/g<generation>/p<partition>@<offset>': the rejected record a redriven one is."""
DLQ_HEADER = "sp-redrive-dlq"
"""'<stream>/dlq/g<generation>/p<partition>@<offset>': where its dlq copy was ('' when none was recorded)."""
DROPPED_HEADERS = ("sp-origin-", "sp-dlq-", "sp-reject-", "sp-redrive-")
"""Headers the dlq copy carries about its rejection, left out of the redriven record (its provenance says it)."""


Claimed = tuple[PartitionRef, int, str, int, int, int]
"""A claimed reject: (partition, offset, its dlq copy's lane, generation (0: no copy recorded), partition and
offset), a plain tuple: a run handles thousands a batch."""


def claimed(claim: RedriveClaim) -> list[Claimed]:
    """The claim's batch, record by record, in its runs' order."""
    return [
        (run.partition, *each)
        for run in claim.reject_runs()
        for each in zip(
            run.offsets,
            (run.dlq_lane,) * len(run.offsets),
            run.dlq_generations,
            run.dlq_partitions,
            run.dlq_offsets,
            strict=True,
        )
    ]


@dataclass
class RedriveReport:
    """What a run did: records produced, records an earlier killed run had produced already (found in the
    target, not produced again), records that could not be read (left pending), and batches."""

    produced: int = 0
    found_landed: int = 0
    unreadable: int = 0
    batches: int = 0
    waiting_ms: int = 0
    """Over 0 while another run holds the claim (this one waits for it, at most MAX_WAIT_S)."""


MAX_WAIT_S = 300.0
"""How long a run waits for another run's claim before it gives up."""
READ_RETRY_S = 30.0
"""How long a run keeps trying a broker that does not answer for its records before it stops (the batch it
holds is taken over by the next run, in doubt)."""


Produced = tuple[int, list[tuple[PartitionRef, int]]]
"""A batch produced, to complete: its id, and the records that could not be read (they stay pending)."""


Where = tuple[str, str, int]
"""(bootstrap servers, topic, partition)."""


class _Reader:
    """Reads records by offset, a batch at a time: per partition, the offsets wanted in order, each fetch
    serving every wanted offset it holds (a batch's dlq copies mostly follow each other in their partitions).
    Its fetchers share one `Leaders`: one connection a broker and one metadata request a topic for the whole
    run, however many partitions the dlq lane has, each made with the run's TLS and SASL settings."""

    def __init__(
        self, connection: ConnectionConfig | None = None, retry_for_s: float = READ_RETRY_S, clock: Clock = SYSTEM
    ) -> None:
        self._leaders = Leaders(connection)
        self.retry_for_s, self.clock = retry_for_s, clock
        self._fetchers: dict[Where, PartitionFetcher] = {}

    def read_many(self, wanted: dict[Where, set[int]]) -> dict[tuple[Where, int], Any]:
        """{(partition, offset): record} of the wanted ones found (a missing one is gone, or never was)."""
        found: dict[tuple[Where, int], Any] = {}
        for where, offsets in wanted.items():
            fetcher = self._fetchers.get(where)
            if fetcher is None:
                fetcher = self._fetchers[where] = PartitionFetcher(
                    *where, max_wait_ms=10, leaders=self._leaders, retry_for_s=self.retry_for_s, clock=self.clock
                )
            todo = sorted(offsets)
            i = 0
            while i < len(todo):
                fetcher.position = todo[i]
                got = fetcher.fetch()
                if got.batch is None or not len(got.batch):
                    if fetcher.position <= todo[i]:
                        i += 1  # nothing at or after it: gone (retention), or past the end
                    continue
                records = {r.offset: r for r in got.batch.records()}
                last = max(records)
                while i < len(todo) and todo[i] <= last:
                    if todo[i] in records:
                        found[(where, todo[i])] = records[todo[i]]
                    i += 1
        return found

    def scan(self, bootstrap: str, topic: str, partition: int, start: int) -> list[Any]:
        """Every record of one partition from `start` to its end now."""
        fetcher = PartitionFetcher(
            bootstrap,
            topic,
            partition,
            start_offset=start,
            max_wait_ms=10,
            leaders=self._leaders,
            retry_for_s=self.retry_for_s,
            clock=self.clock,
        )
        out: list[Any] = []
        while True:
            got = fetcher.fetch()
            if got.batch is not None:
                out += list(got.batch.records())
            if fetcher.position >= got.high_watermark >= 0:
                return out

    def close(self) -> None:
        self._fetchers.clear()
        self._leaders.close()


class Redrive:
    """One run of a dlq redrive of `group`'s rejects on `stream` into `to_lane`.

    Args:
        client: a connected coordinator client (its credentials produce the records, so they need the
            producer's rights on the stream as well as the operator's on the group).
        since_ms, until_ms: only records rejected in [since_ms, until_ms) (0: no bound).
        rate: records a second at most (0: as fast as Kafka takes them).
        batch_size: rejects a claim hands out (up to 5,000, the commit log's MAX_BATCH).
        kafka_config: librdkafka settings for the producer; their TLS and SASL ones (security.protocol, ssl.*,
            sasl.*) also make the connections that read the dlq copies.
    """

    def __init__(
        self,
        client: CoordinatorClient,
        stream: str,
        group: str,
        *,
        to_lane: str = "realtime",
        since_ms: int = 0,
        until_ms: int = 0,
        rate: float = 0.0,
        batch_size: int = 2000,
        clock: Clock = SYSTEM,
        **kafka_config: Any,
    ) -> None:
        if not group:
            raise InvalidArgumentError("a redrive needs the group whose rejects it produces again")
        if rate < 0:
            raise InvalidArgumentError(f"rate must not be negative, not {rate}")
        self.client, self.stream, self.group, self.to_lane = client, stream, group, to_lane
        self.since_ms, self.until_ms, self.rate, self.batch_size = since_ms, until_ms, rate, batch_size
        self.clock = clock
        self.owner = f"redrive-{uuid.uuid4().hex[:12]}"
        self._kafka_config = kafka_config
        self._places: dict[tuple[str, int], tuple[str, str]] = {}
        self._reader = _Reader(ConnectionConfig.from_settings(kafka_config), READ_RETRY_S, clock)

    def run(self, progress: Callable[[RedriveReport], None] | None = None) -> RedriveReport:
        """Claim, produce and complete batch after batch until none is left; `progress` after each batch.

        The coordinator's calls run in order on one thread beside the producing: the next batch is claimed
        while this one is read and produced, and the claim completes the batch before this one in the same
        call (a coordinator from before that completes each batch in a call of its own, after the claim). A
        batch in doubt, and the walk's last one, are completed before anything else is claimed (what its run
        produced must be known first)."""
        report = RedriveReport()
        producer = Producer(
            self.client.target, token=self.client.credentials, tls=self.client.tls, **self._kafka_config
        )
        calls = ThreadPoolExecutor(1, thread_name_prefix="redrive-calls")
        completing: Future[int] | None = None  # a batch's completion sent in a call of its own
        produced: Produced | None = None  # a batch produced, its completion not sent yet
        try:
            started = self.clock.monotonic()
            first = calls.submit(self._claim, "", 0)
            producer.prepare(self.stream, self.to_lane)  # meanwhile: its first batch does not wait to connect
            claim = first.result()
            cursor = ""  # where the walk goes on from: the cursor of the last batch claimed
            while True:
                if claim.done:
                    if produced is not None:
                        completing = calls.submit(self._complete, produced)
                    self._completed(completing, report, progress)
                    return report
                if claim.wait_ms:
                    self._completed(completing, report, progress)  # raises if this run was taken over
                    completing = None
                    report.waiting_ms = claim.wait_ms
                    if progress is not None:
                        progress(report)
                    if self.clock.monotonic() - started > MAX_WAIT_S:
                        raise FailedPreconditionError(
                            f"another redrive of group {self.group!r} on {self.stream} has held its claim for "
                            f"over {MAX_WAIT_S:.0f} s: let it end first"
                        )
                    time.sleep(min(claim.wait_ms / 1000, 1.0))
                    claim = self._claim(cursor, 0)
                    continue
                report.waiting_ms, cursor = 0, claim.cursor
                ahead_ok = not (claim.in_doubt or claim.last)
                rides = produced if ahead_ok and claim.completes else None  # completed by the claim ahead
                if produced is not None and rides is None:
                    completing = calls.submit(self._complete, produced)
                produced = None
                ahead = calls.submit(self._claim, cursor, 1, rides) if ahead_ok else None
                left = self._run_batch(producer, claim, report, started)
                self._completed(completing, report, progress)  # the batch before this one, completed apart
                completing, produced = None, (claim.batch_id, left)
                if ahead is None:
                    completing, produced = calls.submit(self._complete, produced), None
                    self._completed(completing, report, progress)
                    completing = None
                    if claim.last:
                        return report
                    claim = self._claim(cursor, 0)
                else:
                    claim = ahead.result()
                    if rides is not None:
                        if not claim.completes:
                            raise UnavailableError(
                                f"a coordinator that does not complete batches in claims answered the redrive of "
                                f"group {self.group!r} on {self.stream} (a replica of another version?): run it "
                                "again: it goes on from where this run was"
                            )
                        self._counted(report, progress)
        finally:
            calls.shutdown(wait=True)  # a batch produced is completed even when the next one failed
            producer.close()
            self._reader.close()

    def _claim(self, cursor: str, in_flight: int, completing: Produced | None = None) -> RedriveClaim:
        batch_id, left = completing or (0, [])
        return self.client.claim_redrive(
            self.stream,
            self.group,
            self.owner,
            to_lane=self.to_lane,
            since_ms=self.since_ms,
            until_ms=self.until_ms,
            cursor=cursor,
            batch_size=self.batch_size,
            in_flight=in_flight,
            complete_batch_id=batch_id,
            left=left,
        )

    def _complete(self, produced: Produced) -> int:
        batch_id, left = produced
        return self.client.complete_redrive(self.stream, self.group, self.owner, left, batch_id)

    @classmethod
    def _completed(
        cls, completing: Future[int] | None, report: RedriveReport, progress: Callable[[RedriveReport], None] | None
    ) -> None:
        """Wait for a batch's completion sent apart (raising what it raised) and report it."""
        if completing is not None:
            completing.result()
            cls._counted(report, progress)

    @staticmethod
    def _counted(report: RedriveReport, progress: Callable[[RedriveReport], None] | None) -> None:
        """Report a batch completed (apart, or by a claim)."""
        report.batches += 1
        if progress is not None:
            progress(report)

    def _run_batch(
        self, producer: Producer, claim: RedriveClaim, report: RedriveReport, started: float
    ) -> list[tuple[PartitionRef, int]]:
        """Produce a claimed batch (what an in-doubt one has in the target already is not produced again);
        returns the records that could not be read."""
        landed = self._landed(claim) if claim.in_doubt else set()
        failed = producer.failed
        left: list[tuple[PartitionRef, int]] = []
        batch = claimed(claim)
        ids = {run.partition: f"{self.group} {run.partition.lease_id}@" for run in claim.reject_runs()}
        todo = [r for r in batch if f"{ids[r[0]]}{r[1]}" not in landed] if landed else batch
        report.found_landed += len(batch) - len(todo)
        found = self._read(todo)
        sent = 0
        for r in todo:
            at = (r[0], r[1])
            if at not in found:
                report.unreadable += 1
                left.append(at)
                log.warning("redrive.unreadable", record=f"{ids[r[0]]}{r[1]}")
                continue
            record, dlq_where = found[at]
            headers = [(k, v) for k, v in record.headers if not k.startswith(DROPPED_HEADERS)]
            headers += [(PROVENANCE_HEADER, f"{ids[r[0]]}{r[1]}".encode()), (DLQ_HEADER, dlq_where.encode())]
            self._pace(report.produced + sent, started)
            producer.produce(self.stream, record.value, key=record.key, lane=self.to_lane, headers=headers)
            sent += 1
        if producer.flush(60) != 0 or producer.failed > failed:
            why = producer.last_failure if producer.failed > failed else "flush timed out"
            raise UnavailableError(
                f"the redrive's batch did not all reach lane {self.to_lane} of {self.stream} "
                f"({why}); run it again: it goes on from this batch"
            )
        report.produced += sent
        return left

    def _pace(self, produced: int, started: float) -> None:
        """Hold to the rate: the n-th record goes no earlier than n / rate seconds after the start."""
        if self.rate <= 0:
            return
        wait = started + produced / self.rate - self.clock.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _place(self, lane: str, generation: int) -> tuple[str, str]:
        """(bootstrap servers, topic) of one generation of the stream."""
        key = (lane, generation)
        if key not in self._places:
            stream = self.client.describe_stream(self.stream)
            where = {c.name: c.bootstrap_servers for c in self.client.list_clusters()}
            for each in stream.lanes:
                for gen in each.generations:
                    self._places[(each.name, gen.number)] = (where.get(gen.cluster, ""), gen.topic)
        return self._places.get(key, ("", ""))

    def _read(self, records: list[Claimed]) -> dict[tuple[PartitionRef, int], tuple[Any, str]]:
        """{(partition, offset) of a reject: (the record to produce again, where its dlq copy was)}: the dlq copy,
        or (none recorded, or gone) the rejected record at its origin; a reject neither can be read for is left
        out."""
        out: dict[tuple[PartitionRef, int], tuple[Any, str]] = {}
        for use_copy in (True, False):
            asked: dict[Where, set[int]] = {}
            places: dict[tuple[PartitionRef, int], tuple[Where, int, str]] = {}
            for ref, offset, dlq_lane, dlq_generation, dlq_partition, dlq_offset in records:
                if (ref, offset) in out:
                    continue
                if use_copy and dlq_generation > 0:
                    bootstrap, topic = self._place(dlq_lane, dlq_generation)
                    label = f"{self.stream}/{dlq_lane}/g{dlq_generation}/p{dlq_partition}@{dlq_offset}"
                    places[(ref, offset)] = ((bootstrap, topic, dlq_partition), dlq_offset, label)
                elif not use_copy:
                    bootstrap, topic = self._place(ref.lane, ref.generation)
                    places[(ref, offset)] = ((bootstrap, topic, ref.partition), offset, "")
            for where, offset, _ in places.values():
                if where[0]:
                    asked.setdefault(where, set()).add(offset)
            try:
                found = self._reader.read_many(asked)
            except UnavailableError as err:  # a broker that does not answer: nothing of this batch is lost
                raise UnavailableError(
                    f"the redrive of group {self.group!r} on {self.stream} cannot read its records: {err.message}; "
                    "run it again once the cluster answers: it goes on from this batch"
                ) from err
            except StreamplaneError as err:
                log.warning("redrive.read_failed", error=err.message)
                found = {}
            for at, (where, offset, label) in places.items():
                if (where, offset) in found:
                    out[at] = (found[(where, offset)], label)
        return out

    def _landed(self, claim: RedriveClaim) -> set[str]:
        """The provenance of every redriven record in the target lane after the offsets it had when this batch
        was claimed (what a killed run produced before it could complete the batch)."""
        target: RedriveTarget | None = claim.target
        if target is None:
            return set()
        found = set()
        for p, start in enumerate(target.from_offsets):
            for record in self._reader.scan(target.bootstrap_servers, target.topic, p, start):
                for k, v in record.headers:
                    if k == PROVENANCE_HEADER and v is not None:
                        found.add(v.decode(errors="replace"))
        return found
