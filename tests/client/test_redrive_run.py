"""A dlq redrive run (`streamplane.client.redrive.Redrive`) against a real coordinator and local cluster: it
claims one batch after another, the next while it produces one, and ends with the walk's last batch, without
walking the rejects again to learn that nothing is left; its claim is then released at once."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from streamplane.client import CoordinatorClient, Producer, partition_fetcher
from streamplane.client import redrive as redrive_client
from streamplane.client.kafka import KafkaConnection
from streamplane.client.redrive import Redrive
from streamplane.coordinator.commitlog import redrive
from streamplane.errors import InvalidArgumentError, UnavailableError
from streamplane.model import PartitionRef, RedriveClaim
from streamplane.names import topic_name
from tests.helpers import RunningConsumer, register_local_clusters, wait_until

REJECTS = 30


class CountingClient(CoordinatorClient):
    """The real client, counting the claims and the completions apart a run makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claims: list[RedriveClaim] = []
        self.completions = 0

    def claim_redrive(self, *args: Any, **kwargs: Any) -> RedriveClaim:
        claim = super().claim_redrive(*args, **kwargs)
        self.claims.append(claim)
        return claim

    def complete_redrive(self, *args: Any, **kwargs: Any) -> int:
        self.completions += 1
        return super().complete_redrive(*args, **kwargs)


class OlderCoordinatorClient(CountingClient):
    """The real client and coordinator, the claims' answers read as a coordinator from before answered them: it
    never says that it completes a batch a claim names."""

    def claim_redrive(self, *args: Any, **kwargs: Any) -> RedriveClaim:
        assert not kwargs.get("complete_batch_id"), "a batch completed in a claim the coordinator did not offer"
        return dataclasses.replace(super().claim_redrive(*args, **kwargs), completes=False)


def reject_all(address: str, local_cluster: Any, partitions: int) -> str:
    """A new stream of `partitions` whose REJECTS records group "billing" rejected."""
    bootstrap, control = local_cluster
    register_local_clusters(address, bootstrap, control.endpoint, ("east",))
    stream = f"rr-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, partitions, cluster="east")
    with Producer(address, **{"linger.ms": 5}) as producer:
        for i in range(REJECTS):
            producer.produce(stream, b"bad-%d" % i, key=b"%d" % i)
        assert producer.flush(30) == 0
    buggy = RunningConsumer(address, "billing", stream, reject=b"bad-")
    try:
        with CoordinatorClient(address) as client:
            wait_until(
                lambda: sum(x.dlq_pending for x in client.lag("billing", stream, partitions=False).lanes) == REJECTS,
                timeout=60,
            )
    finally:
        buggy.stop()
    return stream


@pytest.fixture
def rejected(coordinator, local_cluster) -> tuple[str, str]:
    """(address, stream): a stream of 2 partitions whose REJECTS records group "billing" rejected."""
    return coordinator.address, reject_all(coordinator.address, local_cluster, 2)


def test_a_run_ends_with_the_walks_last_batch_and_releases_its_claim(rejected: tuple[str, str]) -> None:
    address, stream = rejected
    with CountingClient(address) as client:
        report = Redrive(client, stream, "billing", batch_size=12).run()
        assert (report.produced, report.batches, report.unreadable) == (REJECTS, 3, 0)
        assert [c.size for c in client.claims] == [12, 12, 6], "no claim after the walk's last batch"
        assert client.claims[-1].last
        assert client.completions == 2, "the first batch is completed by the third claim: one call a batch"
        lanes = client.lag("billing", stream, partitions=False).lanes
        assert (sum(x.dlq_pending for x in lanes), sum(x.dlq_redriven for x in lanes)) == (0, REJECTS)
        client.claims.clear()
        again = Redrive(client, stream, "billing").run()
        assert (again.produced, again.waiting_ms) == (0, 0), "the claim was released: a next run does not wait"
        assert len(client.claims) == 1 and client.claims[0].done
    fixed = RunningConsumer(address, "billing", stream)
    try:
        wait_until(lambda: len(fixed.seen) == REJECTS, timeout=60, what=lambda: f"{len(fixed.seen)} redriven seen")
    finally:
        fixed.stop()
    assert set(fixed.seen) == {b"bad-%d" % i for i in range(REJECTS)} and max(fixed.seen.values()) == 1


def test_a_run_reads_the_dlq_copies_of_every_partition_over_one_connection_a_broker(
    coordinator, local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dlq lane of 12 partitions on 3 brokers: the run's reads open one connection for the topic's metadata
    and at most one a broker (not a metadata connection and a leader connection for each partition), and
    close them all when it ends."""
    stream = reject_all(coordinator.address, local_cluster, 12)
    opened: list[KafkaConnection] = []

    class Counted(KafkaConnection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(partition_fetcher, "KafkaConnection", Counted)
    with CoordinatorClient(coordinator.address) as client:
        report = Redrive(client, stream, "billing", batch_size=10).run()
    assert (report.produced, report.unreadable) == (REJECTS, 0)
    assert 2 <= len(opened) <= 1 + 3, f"{len(opened)} connections for a dlq lane of 12 partitions on 3 brokers"
    assert all(conn.fileno() == -1 for conn in opened), "a connection of the run's reads was left open"


def test_a_run_against_a_coordinator_that_does_not_complete_in_claims_completes_each_batch_apart(
    rejected: tuple[str, str],
) -> None:
    address, stream = rejected
    with OlderCoordinatorClient(address) as client:
        report = Redrive(client, stream, "billing", batch_size=7).run()
        assert (report.produced, report.batches, report.unreadable) == (REJECTS, 5, 0)
        assert client.completions == 5
        lanes = client.lag("billing", stream, partitions=False).lanes
        assert (sum(x.dlq_pending for x in lanes), sum(x.dlq_redriven for x in lanes)) == (0, REJECTS)


class ReplicaOfAnotherVersionClient(CountingClient):
    """The real client and coordinator, a claim that named a batch to complete answered as a coordinator from
    before answers it (what a replica of another version would do mid-run)."""

    def claim_redrive(self, *args: Any, **kwargs: Any) -> RedriveClaim:
        claim = super().claim_redrive(*args, **kwargs)
        return dataclasses.replace(claim, completes=False) if kwargs.get("complete_batch_id") else claim


def test_a_run_whose_completion_in_a_claim_is_not_acknowledged_stops_with_a_sentence(
    rejected: tuple[str, str],
) -> None:
    address, stream = rejected
    with ReplicaOfAnotherVersionClient(address) as client:
        with pytest.raises(UnavailableError, match=r"does not complete batches in claims.*run it again"):
            Redrive(client, stream, "billing", batch_size=7).run()
        lanes = client.lag("billing", stream, partitions=False).lanes
        pending, redriven = sum(x.dlq_pending for x in lanes), sum(x.dlq_redriven for x in lanes)
        assert (pending, redriven) == (REJECTS - 7, 7), "the batch the claim completed, and no other"


def test_a_run_with_kafka_settings_that_make_no_connection_is_refused_before_it_claims(
    rejected: tuple[str, str],
) -> None:
    """The run's librdkafka settings make its reading connections too: a protocol they do not name is one
    sentence at construction, and no batch is claimed."""
    address, stream = rejected
    with CountingClient(address) as client:
        with pytest.raises(InvalidArgumentError, match=r"security\.protocol must be one of .*not 'tls'"):
            Redrive(client, stream, "billing", **{"security.protocol": "tls"})
        assert client.claims == []
        assert sum(x.dlq_pending for x in client.lag("billing", stream, partitions=False).lanes) == REJECTS


def test_a_claim_or_completion_naming_more_records_left_than_a_batch_holds_is_refused_and_changes_nothing(
    rejected: tuple[str, str],
) -> None:
    """`left` is bounded by what a batch can hold (checked before anything is read); a call past it is one
    sentence, holds no claim, and the next run redrives every reject."""
    address, stream = rejected
    ref = PartitionRef(stream, "realtime", 1, 0)
    left = [(ref, offset) for offset in range(redrive.MAX_LEFT + 1)]
    with CountingClient(address) as client:
        with pytest.raises(InvalidArgumentError, match=f"left: a batch holds at most {redrive.MAX_LEFT} records"):
            client.claim_redrive(stream, "billing", "bad-run", complete_batch_id=1, left=left)
        with pytest.raises(InvalidArgumentError, match=f"left: a batch holds at most {redrive.MAX_LEFT} records"):
            client.complete_redrive(stream, "billing", "bad-run", left, 1)
        report = Redrive(client, stream, "billing").run()
        assert (report.produced, report.waiting_ms) == (REJECTS, 0), "the refused calls held no claim"


def test_a_run_whose_dlq_copies_sit_on_a_broker_that_does_not_answer_stops_in_a_sentence_and_the_next_one_ends_it(
    coordinator, local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker leading the dlq lane's partitions is down (the lane's records, and the lane produced into,
    are on others): the run stops within its bound with a sentence, nothing marked redriven (it used to retry
    without end, logging at info). Once the broker is back, the next run takes its batch over and produces
    every reject once."""
    monkeypatch.setattr(redrive_client, "READ_RETRY_S", 1.0)
    stream = reject_all(coordinator.address, local_cluster, 2)
    control = local_cluster[1]
    for p in range(2):
        control.set_leader(topic_name(stream, "dlq", 1), p, 3)
        control.set_leader(topic_name(stream, "realtime", 1), p, 1)
    control.broker_down(3)
    try:
        with CountingClient(coordinator.address) as client:
            with pytest.raises(UnavailableError, match=r"cannot read its records: .*run it again once the cluster"):
                Redrive(client, stream, "billing").run()
            lanes = client.lag("billing", stream, partitions=False).lanes
            assert (sum(x.dlq_pending for x in lanes), sum(x.dlq_redriven for x in lanes)) == (REJECTS, 0)
    finally:
        control.broker_up(3)
    with CountingClient(coordinator.address) as client:
        report = Redrive(client, stream, "billing").run()  # waits out the stopped run's claim, then takes it over
        assert report.produced + report.found_landed == REJECTS and report.unreadable == 0
        lanes = client.lag("billing", stream, partitions=False).lanes
        assert (sum(x.dlq_pending for x in lanes), sum(x.dlq_redriven for x in lanes)) == (0, REJECTS)
