"""Worker sessions over gRPC: what a bad hello, heartbeat or release does (ends that session alone, with a
clear status), lease checks, and what holders hear of grants, seals and their held-lease index."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from confluent_kafka import Producer as KafkaProducer

from streamplane import model
from streamplane.client import CoordinatorClient, SessionEndedError, WorkerSession
from streamplane.coordinator.groups.sessions.hub import EXPECT_AFTER_MS, EXPECT_MS
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.errors import (
    AlreadyExistsError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
)
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from tests.helpers import wait_until


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    with CoordinatorClient(coordinator.address) as client:
        client.register_cluster(
            model.Cluster(
                name="c", bootstrap_servers=bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint
            )
        )
        client.create_stream("jobs", 4)
    return coordinator.address


def session(address: str, worker_id: str, stream: str = "jobs", lanes: list[str] | None = None) -> WorkerSession:
    return WorkerSession(address, group="g", worker_id=worker_id, subscriptions={stream: lanes or []})


def collect(s: WorkerSession) -> tuple[list, list]:
    """Run the session's events in the background: (received events, [the error that ended it])."""
    got: list = []
    ended: list = []

    def run() -> None:
        try:
            for event in s.events():
                got.append(event)
        except SessionEndedError as err:
            ended.append(err)

    threading.Thread(target=run, daemon=True).start()
    return got, ended


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"stream": "ghost"}, NotFoundError, "ghost"),
        ({"lanes": ["nolane"]}, NotFoundError, "nolane"),
        ({"lanes": ["Bad Lane"]}, InvalidArgumentError, "lane"),
        ({"worker_id": "bad worker!"}, InvalidArgumentError, "worker_id"),
    ],
)
def test_bad_hello_is_refused(address: str, kwargs: dict, error: type, text: str) -> None:
    s = session(address, kwargs.pop("worker_id", "w"), **kwargs)
    with pytest.raises(error, match=text):
        s.join()
    s.close()


def test_a_late_release_of_a_lease_already_freed_keeps_the_session(address: str) -> None:
    s = session(address, "late")
    s.join()
    got, ended = collect(s)
    wait_until(lambda: len(s.leases) == 4)
    grant = s.leases["jobs/realtime/g1/p0"]
    s.release(grant.lease_id, grant.epoch)
    s.release(grant.lease_id, grant.epoch)  # raced its own end (a drained generation frees leases too)
    wait_until(lambda: any(getattr(e, "lease_id", "") == grant.lease_id and e.epoch > grant.epoch for e in got))
    assert not ended, "a late release is not bad input"
    s.close()


def test_duplicate_worker_id_in_a_live_session(address: str) -> None:
    first = session(address, "dup")
    first.join()
    second = session(address, "dup")
    with pytest.raises(AlreadyExistsError, match="dup"):
        second.join()
    second.close()
    first.close()


def test_releasing_a_lease_not_held_ends_neither_session(address: str) -> None:
    """A release that cannot apply (late, or of a lease never held) concerns that lease only (issue 13)."""
    good, bad = session(address, "good"), session(address, "bad")
    good.join()
    bad.join()
    _, good_ended = collect(good)
    _, bad_ended = collect(bad)
    wait_until(lambda: len(good.leases) + len(bad.leases) == 4)
    bad.release("jobs/realtime/g1/p99", 1)  # no such partition
    bad.release("jobs/realtime/g1/p0", 99)  # never held at that epoch
    # real time past a TTL (heartbeats are real): both sessions are still alive and share the work
    time.sleep(AssignerConfig().ttl_ms / 1000 + 0.2)  # real time past a TTL: what the test is about
    assert not bad_ended and not good_ended
    wait_until(lambda: len(good.leases) == len(bad.leases) == 2)
    good.close()
    bad.close()


@pytest.mark.parametrize("load", [{"cpu": -1.0}, {"records_per_s": float("nan")}])
def test_malformed_heartbeat_ends_the_session_with_invalid_argument(address: str, load: dict) -> None:
    s = session(address, "sick")
    s.join()
    _, ended = collect(s)
    s.report_load(**load)
    wait_until(lambda: ended)
    assert isinstance(ended[0].cause, InvalidArgumentError)
    assert "heartbeat" in ended[0].message
    s.close()


def test_a_session_must_start_with_hello(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        call = apb_grpc.AssignerServiceStub(channel).Session(
            iter([apb.WorkerMessage(heartbeat=apb.Heartbeat(cpu=0.5))]), timeout=5
        )
        with pytest.raises(grpc.RpcError) as info:
            next(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello" in info.value.details()


def test_check_lease(address: str) -> None:
    s = session(address, "holder")
    s.join()
    collect(s)
    wait_until(lambda: len(s.leases) == 4)
    grant = s.leases["jobs/realtime/g1/p0"]
    s.check(grant.lease_id, grant.epoch)
    with pytest.raises(FencedError, match="stale"):
        s.check(grant.lease_id, grant.epoch - 1)
    with pytest.raises(InvalidArgumentError, match="lease_id"):
        s.check("not-a-lease", 1)
    with pytest.raises(NotFoundError):
        s.check("jobs/realtime/g1/p99", 1)
    s.close()


def test_a_failover_tells_holders_where_their_generation_ends_and_grants_the_new_one(
    address: str, local_cluster
) -> None:
    bootstrap, control = local_cluster
    with CoordinatorClient(address) as client:
        client.register_cluster(
            model.Cluster(
                name="c2", bootstrap_servers=bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint
            )
        )
    s = session(address, "holder")
    s.join()
    got, _ = collect(s)
    wait_until(lambda: len(s.leases) == 4)
    writer = KafkaProducer({"bootstrap.servers": bootstrap})
    for p in range(4):  # one record per partition: g1 is not drained until the group has processed it
        writer.produce("sp.jobs.realtime.g1", b"x", partition=p)
    assert writer.flush(10) == 0
    with CoordinatorClient(address) as client:
        client.failover("jobs", "realtime", "c2")

    def latest() -> dict[str, model.Sealed]:
        return {e.lease_id: e for e in got if isinstance(e, model.Sealed)}

    # sealed once no producer session holds it back, with each partition's end offset
    wait_until(lambda: len(latest()) == 4)
    assert set(latest()) == {f"jobs/realtime/g1/p{p}" for p in range(4)}
    assert all(c.end_offset == 1 for c in latest().values())

    assert not [e for e in got if isinstance(e, model.Revoke)], "a draining generation keeps its holder"
    wait_until(lambda: len(s.leases) == 8)  # the draining generation stays held while g2 is granted too
    g2 = [g for lid, g in s.leases.items() if "/g2/" in lid]
    assert len(g2) == 4 and all(g.cluster == "c2" and g.topic == "sp.jobs.realtime.g2" for g in g2)
    s.close()


def test_the_holder_index_matches_the_leases_through_joins_and_leaves(coordinator, address: str) -> None:
    from streamplane.coordinator import keys
    from streamplane.coordinator.groups import leases

    first, second = session(address, "ix-1"), session(address, "ix-2")
    first.join()
    second.join()
    collect(first)
    collect(second)
    wait_until(lambda: len(first.leases) == 2 and len(second.leases) == 2)
    second.close()
    wait_until(lambda: len(first.leases) == 4)

    def index(tr) -> set:
        r = keys.HELD.range(("g",))
        return {(k[1], tuple(k[2:])) for k in (keys.HELD.unpack(key) for key, _ in tr.get_range(r.start, r.stop))}

    held = {(x.worker_id, x.key) for x in leases.read_leases(coordinator.db, "g").values() if x.state != leases.FREE}
    assert coordinator.db.transact(index) == held and {w for w, _ in held} == {"ix-1"}
    first.close()


@pytest.mark.parametrize("takes_batches", [True, False])
def test_a_workers_grants_from_one_change_come_in_one_message_when_it_takes_batches(
    address: str, takes_batches: bool
) -> None:
    """A worker that joins a group on 32 partitions is granted them all by one change: a worker that says it
    takes batches hears them in one message (a message each cost a round trip on the stream: a rewind of a
    thousand leases reached its holders a second later); one that does not (the Go client) a grant a message."""
    with CoordinatorClient(address) as client:
        client.create_stream("wide", 32)
    group = f"batches-{str(takes_batches).lower()}"
    stop = threading.Event()

    def hello() -> object:
        yield apb.WorkerMessage(
            hello=apb.Hello(
                group=group,
                worker_id="w",
                subscriptions=[apb.Subscription(stream="wide")],
                takes_batches=takes_batches,
            )
        )
        stop.wait(30)

    messages: list[apb.AssignerMessage] = []
    with grpc.insecure_channel(address) as channel:
        call = apb_grpc.AssignerServiceStub(channel).Session(hello(), timeout=30)
        try:
            granted: set[str] = set()
            for message in call:
                messages.append(message)
                inner = message.batch.events if message.WhichOneof("kind") == "batch" else [message]
                granted |= {m.grant.lease_id for m in inner if m.WhichOneof("kind") == "grant"}
                if len(granted) == 32:
                    break
        finally:
            stop.set()
            call.cancel()
    kinds = [m.WhichOneof("kind") for m in messages]
    assert kinds[0] == "welcome"
    if takes_batches:
        assert kinds[1:] == ["batch"], "the group's one change told in one message"
        assert len(messages[1].batch.events) == 32
    else:
        assert kinds[1:] == ["grant"] * 32


def test_lease_loads_reported_faster_than_heartbeats_all_reach_the_assigner(address: str) -> None:
    """A consumer reports every second and heartbeats go every two: a second report before the heartbeat kept
    only its own leases, and the first report's loads were lost for good (their reporter counted them told)."""
    s = session(address, "busy")
    s.join()
    collect(s)
    wait_until(lambda: len(s.leases) == 4)
    p = [f"jobs/realtime/g1/p{i}" for i in range(4)]
    first, later, other = model.LeaseLoad(100.0, 5, 50), model.LeaseLoad(230.0, 1, 10), model.LeaseLoad(9.0, 2, 20)
    s.report_load(records_per_s=300.0, leases={p[0]: first, p[1]: model.LeaseLoad(200.0, 7, 70)})
    s.report_load(records_per_s=330.0, leases={p[1]: later, p[2]: other})
    want = {p[0]: first, p[1]: later, p[2]: other}

    def loads() -> dict[str, model.LeaseLoad]:
        with CoordinatorClient(address) as client:
            return {x.lease_id: x.load for x in client.describe_group("g").leases if x.lease_id in want}

    wait_until(lambda: loads() == want, timeout=10, what=lambda: f"the Assigner sees {loads()}")
    s.close()


def test_a_rewind_tells_the_workers_that_take_hints_that_their_grants_are_coming(address: str) -> None:
    """The replica that takes a rewind tells the group's workers it serves, before it looks anything up, that
    grants are on their way (Expect), and once it is applied for how long more: a worker that reads hints keeps
    its long polls short meanwhile and reads its new positions as soon as they come. Its grants follow the first
    hint. A worker that did not say it reads hints (the Go client) hears only its grants; a dry run, and a request
    that names no target, tell nobody; a refused rewind takes its hint back (0 ms: long polls again)."""
    hinted = WorkerSession(address, group="g", worker_id="hinted", subscriptions={"jobs": []}, hints=True)
    plain = session(address, "plain")
    hinted.join()
    plain.join()
    got_hinted, _ = collect(hinted)
    got_plain, _ = collect(plain)
    try:
        wait_until(lambda: hinted.leases and plain.leases, timeout=10)

        def hints() -> list[int]:
            return [e.for_ms for e in list(got_hinted) if isinstance(e, model.Expect)]

        with CoordinatorClient(address) as client:
            client.rewind_group("g", "jobs", model.RewindTarget(model.RewindTo.EARLIEST), dry_run=True)
            # a request that names no target is refused before anyone is hinted (the hints below are exactly
            # the rewind's)
            with pytest.raises(grpc.RpcError) as no_target:
                client.assigner.RewindGroup(apb.RewindGroupRequest(group="g", stream="jobs"), metadata=client.metadata)
            assert no_target.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            before, plain_before = len(got_hinted), len(got_plain)
            client.rewind_group("g", "jobs", model.RewindTarget(model.RewindTo.EARLIEST))
            wait_until(lambda: hints() == [EXPECT_MS, EXPECT_AFTER_MS], timeout=10)
            first = next(i for i, e in enumerate(list(got_hinted)) if isinstance(e, model.Expect))
            assert first == before, "the first hint comes before anything the rewind changed"
            wait_until(lambda: any(isinstance(e, model.Grant) for e in got_hinted[first:]), timeout=10)
            wait_until(lambda: any(isinstance(e, model.Grant) for e in got_plain[plain_before:]), timeout=10)
            future = model.RewindTarget(model.RewindTo.TIME, time_ms=int(time.time() * 1000) + 3_600_000)
            with pytest.raises(InvalidArgumentError):
                client.rewind_group("g", "jobs", future)
            # its hint, then 0 (told together when the refusal comes first: the latest wins)
            wait_until(lambda: hints()[2:] in ([EXPECT_MS, 0], [0]), timeout=10, what=lambda: str(hints()))
        assert not [e for e in got_plain if isinstance(e, model.Expect)]
    finally:
        hinted.close()
        plain.close()
