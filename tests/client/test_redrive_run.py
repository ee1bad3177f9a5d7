"""A dlq redrive run (`streamplane.client.redrive.Redrive`) against a real coordinator and local cluster: it
claims one batch after another, the next while it produces one, and ends with the walk's last batch, without
walking the rejects again to learn that nothing is left; its claim is then released at once."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from streamplane.client import CoordinatorClient, Producer
from streamplane.client.redrive import Redrive
from streamplane.errors import UnavailableError
from streamplane.model import RedriveClaim
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


@pytest.fixture
def rejected(coordinator, local_cluster) -> tuple[str, str]:
    """(address, stream): a stream whose REJECTS records group "billing" rejected."""
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east",))
    stream = f"rr-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream(stream, 2, cluster="east")
    with Producer(coordinator.address, **{"linger.ms": 5}) as producer:
        for i in range(REJECTS):
            producer.produce(stream, b"bad-%d" % i, key=b"%d" % i)
        assert producer.flush(30) == 0
    buggy = RunningConsumer(coordinator.address, "billing", stream, reject=b"bad-")
    try:
        with CoordinatorClient(coordinator.address) as client:
            wait_until(
                lambda: sum(x.dlq_pending for x in client.lag("billing", stream, partitions=False).lanes) == REJECTS,
                timeout=60,
            )
    finally:
        buggy.stop()
    return coordinator.address, stream


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
