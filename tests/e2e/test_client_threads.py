"""No background thread of the client dies silently (issue 41): each one's work is broken with an unexpected
exception, and the consumer either recovers or ends loudly, never hanging on to leases it no longer serves.

A real coordinator and the local Kafka cluster; the faults are planted by replacing one step of a running
consumer's thread with one that raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from streamplane.client import CoordinatorClient, Producer
from streamplane.errors import ThreadCrashedError
from tests.helpers import RunningConsumer, register_local_clusters, wait_until


class BugError(RuntimeError):
    """The planted fault."""


def broken(times: int | None, real: Callable[..., object]) -> Callable[..., object]:
    """`real`, raising BugError for its first `times` calls (every call with None)."""
    left = [times]

    def step(*args: object, **kwargs: object) -> object:
        if left[0] is None or left[0] > 0:
            if left[0] is not None:
                left[0] -= 1
            raise BugError("planted")
        return real(*args, **kwargs)

    return step


STREAM = {"name": ""}
"""This test's stream: each test its own, as the local Kafka cluster (and its topics) outlive a test."""


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east",))
    STREAM["name"] = f"ct-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream(STREAM["name"], 2, cluster="east")
    return coordinator.address


def produce(address: str, values: list[bytes]) -> None:
    with Producer(address) as producer:
        for v in values:
            producer.produce(STREAM["name"], v)
        assert producer.flush(30) == 0


def running(address: str, worker_id: str, reject: bool = False) -> RunningConsumer:
    return RunningConsumer(address, "ct", STREAM["name"], reject=b"poison" if reject else b"", worker_id=worker_id)


def ends_loudly_and_its_leases_move(address: str, victim: RunningConsumer) -> None:
    other = running(address, "ct-other")
    try:
        wait_until(lambda: victim.raised is not None, timeout=30, what=lambda: "the consumer did not end")
        assert victim.consumer.error is victim.raised
        assert isinstance(victim.raised, BugError | ThreadCrashedError), victim.raised
        wait_until(lambda: len(other.consumer.leases) == 2, timeout=30, what=lambda: str(other.consumer.leases))
        produce(address, [b"after-%d" % i for i in range(50)])
        wait_until(lambda: all(other.seen[b"after-%d" % i] for i in range(50)), timeout=30)
    finally:
        other.stop()


def test_a_commit_thread_that_fails_ends_the_consumer_and_its_leases_move(address: str, crashes) -> None:
    produce(address, [b"a-%d" % i for i in range(100)])
    victim = running(address, "ct-victim")
    try:
        wait_until(lambda: len(victim.seen) == 100, timeout=30)
        victim.consumer.committer.commit = broken(None, victim.consumer.committer.commit)  # type: ignore[method-assign]
        ends_loudly_and_its_leases_move(address, victim)
    finally:
        victim.stop()
    assert crashes == []


def test_a_session_thread_that_fails_ends_the_consumer_and_its_leases_move(address: str, crashes) -> None:
    produce(address, [b"a-%d" % i for i in range(100)])
    victim = running(address, "ct-victim")
    try:
        wait_until(lambda: len(victim.seen) == 100 and len(victim.consumer.leases) == 2, timeout=30)
        victim.consumer.membership.on_event = broken(None, victim.consumer.membership.on_event)  # type: ignore[method-assign]
        ends_loudly_and_its_leases_move(address, victim)  # the newcomer's join revokes a lease: an event
    finally:
        victim.stop()
    assert crashes == []


def test_a_fetch_loop_that_fails_once_recovers_and_one_that_keeps_failing_ends_the_consumer(
    address: str, crashes
) -> None:
    victim = running(address, "ct-victim")
    try:
        wait_until(lambda: len(victim.consumer.leases) == 2, timeout=30)
        fetch = victim.consumer._fetch
        fetch._round = broken(3, fetch._round)  # type: ignore[method-assign]
        produce(address, [b"b-%d" % i for i in range(100)])
        wait_until(lambda: len(victim.seen) == 100, timeout=30)  # recovered
        assert victim.consumer.error is None

        fetch._round = broken(None, fetch._round)  # type: ignore[method-assign]
        ends_loudly_and_its_leases_move(address, victim)
    finally:
        victim.stop()
    assert crashes == []


def test_a_heartbeat_thread_that_fails_resumes_the_session_with_its_leases(address: str, crashes) -> None:
    victim = running(address, "ct-victim")
    try:
        wait_until(lambda: len(victim.consumer.leases) == 2, timeout=30)
        session = victim.consumer.membership.session
        assert session is not None
        session._beat = broken(1, session._beat)  # type: ignore[method-assign]
        wait_until(lambda: victim.consumer.membership.session is not session, timeout=30, what=lambda: "no new session")
        wait_until(lambda: victim.consumer.membership.session is not None, timeout=30)
        produce(address, [b"c-%d" % i for i in range(100)])
        wait_until(
            lambda: len(victim.seen) == 100,
            timeout=30,
            what=lambda: f"seen {len(victim.seen)}, leases {victim.consumer.leases}, error {victim.consumer.error}",
        )
        assert victim.consumer.error is None and len(victim.consumer.leases) == 2
    finally:
        victim.stop()
    assert crashes == []


def test_a_dlq_producer_whose_thread_fails_is_replaced_and_every_reject_is_copied(address: str, crashes) -> None:
    victim = running(address, "ct-victim", reject=True)
    try:
        produce(address, [b"poison-first"])
        wait_until(lambda: victim.consumer.dlq.producer is not None, timeout=30)
        dlq = victim.consumer.dlq.producer
        assert dlq is not None
        dlq._end(ThreadCrashedError("producer-poll failed: planted"))  # as its guarded thread does on a bug
        produce(address, [b"poison-%d" % i for i in range(5)])

        def lag_zero() -> bool:
            with CoordinatorClient(address) as client:
                lag = client.lag("ct")
            return bool(lag.partitions) and lag.offset_lag == 0

        wait_until(lambda: all(victim.seen[b"poison-%d" % i] for i in range(5)), timeout=30)
        wait_until(lag_zero, timeout=60)
        wait_until(lambda: victim.consumer.dlq.producer is not dlq, timeout=30, what=lambda: "the dlq producer stayed")
        assert victim.consumer.error is None
    finally:
        victim.stop()
    assert crashes == []
