"""Issue 13: authentication, roles, bounded requests and resource limits, tried as an outside client would.

Every attack of the issue runs against a real coordinator with authentication on (tokens signed with a test
key): it is refused with the right status, nothing is written, and the coordinator keeps serving.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from streamplane import model
from streamplane.client import CoordinatorClient, WorkerSession
from streamplane.client.session import SessionEndedError
from streamplane.coordinator.commitlog.log import CHUNK
from streamplane.coordinator.rpc import server
from streamplane.coordinator.rpc.auth import TokenIssuer
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.sealing import read_producers
from streamplane.errors import FencedError, InvalidArgumentError, PermissionDeniedError, UnauthenticatedError
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import auth_pb2 as authpb
from streamplane.v1 import auth_pb2_grpc as authpb_grpc
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc
from streamplane.v1 import topology_pb2 as pb
from streamplane.v1 import topology_pb2_grpc as pb_grpc
from tests.helpers import wait_until

ISSUER = TokenIssuer(b"7" * 64)
Code = grpc.StatusCode


def token(
    role: str, subject: str = "", *, streams: tuple[str, ...] = (), groups: tuple[str, ...] = (), ttl_s: float = 3600
) -> str:
    return ISSUER.create(subject or role, role, now_s=time.time(), ttl_s=ttl_s, streams=streams, groups=groups)


class Junk(http.server.BaseHTTPRequestHandler):
    """A 'control endpoint' that answers HTML, and counts who asked."""

    calls = 0

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        Junk.calls += 1
        body = b"<html>not json</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 - http.server's names


@pytest.fixture(scope="module")
def junk() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, local_cluster, junk: str) -> Iterator[server.RunningCoordinator]:
    """A coordinator with authentication on; clusters sec-a and sec-b, stream sec-logs (2 partitions)."""
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path_factory.mktemp("secured"))),
        admin=RoutingAdmin(),
        guard=Guard(ISSUER),
        control_endpoints=[control.endpoint, junk],
        streams_per_principal=4,
    )
    with CoordinatorClient(running.address, token=token("admin", "root")) as admin:
        for name in ("sec-a", "sec-b"):
            admin.register_cluster(
                model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
        admin.create_stream("sec-logs", 2, cluster="sec-a")
    yield running
    running.stop(0)


_channels: dict[str, grpc.Channel] = {}


def stubs(address: str) -> dict[str, Any]:
    channel = _channels.setdefault(address, grpc.insecure_channel(address))
    return {
        "topology": pb_grpc.TopologyServiceStub(channel),
        "commitlog": cpb_grpc.CommitLogServiceStub(channel),
        "assigner": apb_grpc.AssignerServiceStub(channel),
        "auth": authpb_grpc.AuthServiceStub(channel),
    }


def call(
    address: str,
    service: str,
    method: str,
    request: Any,
    bearer: str | None = None,
    *,
    timeout: float = 5.0,
    metadata: tuple[tuple[str, str], ...] = (),
) -> tuple[grpc.StatusCode, str, float]:
    """(status, details, seconds) of one unary call made as an outside client would."""
    md = [*metadata, *((("authorization", f"Bearer {bearer}"),) if bearer else ())]
    started = time.monotonic()
    try:
        getattr(stubs(address)[service], method)(request, timeout=timeout, metadata=md)
        return Code.OK, "", time.monotonic() - started
    except grpc.RpcError as err:
        return err.code(), err.details() or "", time.monotonic() - started


def stream_call(
    address: str, service: str, method: str, request: Any, bearer: str | None, timeout: float = 0.5
) -> tuple[grpc.StatusCode, str]:
    """The status of a streaming call read until its deadline (DEADLINE_EXCEEDED: it was serving)."""
    md = (("authorization", f"Bearer {bearer}"),) if bearer else ()
    try:
        for _ in getattr(stubs(address)[service], method)(request, timeout=timeout, metadata=md):
            pass
        return Code.OK, ""
    except grpc.RpcError as err:
        return err.code(), err.details() or ""


def lanes_state(address: str) -> list[tuple]:
    with CoordinatorClient(address, token=token("viewer")) as c:
        return [
            (s.name, lane.name, [(g.number, g.state, g.cluster) for g in lane.generations])
            for s in c.list_streams()
            for lane in s.lanes
        ]


# -- authentication --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("credential", "says"),
    [
        (None, "no credential"),
        ("not-a-token", "not valid"),
        (TokenIssuer(b"8" * 64).create("root", "admin", now_s=time.time(), ttl_s=60), "not valid"),  # another key
        (ISSUER.create("root", "admin", now_s=time.time() - 7200, ttl_s=60), "expired"),
    ],
    ids=["none", "garbage", "forged", "expired"],
)
def test_a_call_without_a_valid_credential_is_unauthenticated(secured, credential: str | None, says: str) -> None:
    code, details, _ = call(secured.address, "topology", "ListStreams", pb.ListStreamsRequest(), credential)
    assert code == Code.UNAUTHENTICATED and says in details, details
    code, _, _ = call(
        secured.address,
        "topology",
        "ListStreams",
        pb.ListStreamsRequest(),
        metadata=(("authorization", "Basic cm9vdDpyb290"),),
    )
    assert code == Code.UNAUTHENTICATED


def test_the_client_raises_a_typed_error_and_the_cli_exits_7(secured) -> None:
    with CoordinatorClient(secured.address, token="nope") as c, pytest.raises(UnauthenticatedError):
        c.list_streams()
    with CoordinatorClient(secured.address, token=token("viewer")) as c, pytest.raises(PermissionDeniedError) as err:
        c.failover("sec-logs", "realtime", "sec-b")
    assert err.value.permission == "stream.change" and err.value.resource == "stream/sec-logs"
    from tests.helpers import cli

    done = cli("--token", token("viewer"), "failover", "sec-logs", "--to", "sec-b", coordinator=secured.address)
    assert done.returncode == 7 and "lacks stream.change" in done.stderr
    done = cli("stream", "list", coordinator=secured.address, env={"STREAMPLANE_TOKEN": ""})
    assert done.returncode == 7 and "no credential" in done.stderr


# -- the attacks of the issue ----------------------------------------------------------------------------------


def test_topology_changes_need_their_role_and_write_nothing_when_refused(secured) -> None:
    address = secured.address
    before = lanes_state(address)
    with CoordinatorClient(address, token=token("viewer")) as c:
        clusters_before = c.list_clusters()
    repoint = model.Cluster("sec-a", "evil.example.com:9092")
    heavy = model.Cluster("heavy", "evil.example.com:9092", capacity_weight=1e300)
    from streamplane.v1 import convert

    attempts = [
        (
            token("consumer"),
            "topology",
            "Failover",
            pb.FailoverRequest(stream="sec-logs", lane="realtime", target_cluster="sec-b"),
        ),
        (
            token("producer"),
            "topology",
            "Failover",
            pb.FailoverRequest(stream="sec-logs", lane="realtime", target_cluster="sec-b"),
        ),
        (
            token("operator"),
            "topology",
            "RegisterCluster",
            pb.RegisterClusterRequest(cluster=convert.cluster_to_pb(repoint), update_existing=True),
        ),
        (
            token("operator"),
            "topology",
            "RegisterCluster",
            pb.RegisterClusterRequest(cluster=convert.cluster_to_pb(heavy)),
        ),
        (
            token("consumer", groups=("mine",)),
            "assigner",
            "ConfigureGroup",
            apb.ConfigureGroupRequest(group="victim", lane="realtime", max_attempts=1000),
        ),
        (
            token("consumer"),
            "assigner",
            "ConfigureGroup",
            apb.ConfigureGroupRequest(group="victim", lane="realtime", max_attempts=1000),
        ),
    ]
    for bearer, service, method, request in attempts:
        code, details, _ = call(address, service, method, request, bearer)
        assert code == Code.PERMISSION_DENIED and " lacks " in details, (method, code, details)
    assert lanes_state(address) == before
    with CoordinatorClient(address, token=token("viewer")) as c:
        assert c.list_clusters() == clusters_before


def test_the_event_log_records_the_authenticated_principal_never_a_name_the_client_sent(secured) -> None:
    code, details, _ = call(
        secured.address, "topology", "AddLane",
        pb.AddLaneRequest(stream="sec-logs", lane="audit", priority=1, partitions=1, cluster="sec-a"),
        token("operator", "alice"), metadata=(("x-streamplane-actor", "mallory"),),
    )  # fmt: skip
    assert code == Code.OK, details
    with CoordinatorClient(secured.address, token=token("viewer")) as c:
        added = [e for e in c.watch_topology("", follow=False) if isinstance(e, model.LaneAdded)]
    assert added[-1].lane.name == "audit" and added[-1].actor == "alice"


def test_registrations_cannot_point_the_coordinator_at_an_address(secured) -> None:
    """Server-side request forgery: a local cluster's control endpoint is the coordinator's to choose."""
    from streamplane.v1 import convert

    hits = Junk.calls
    for endpoint in ("169.254.169.254:80", "127.0.0.1:22", "10.0.0.1:8080"):
        cluster = model.Cluster("ssrf", "127.0.0.1:9092", admin=model.ADMIN_LOCAL, control_endpoint=endpoint)
        code, details, _ = call(
            secured.address,
            "topology",
            "RegisterCluster",
            pb.RegisterClusterRequest(cluster=convert.cluster_to_pb(cluster)),
            token("admin"),
        )
        assert code == Code.PERMISSION_DENIED and "control_endpoint" in details
    assert Junk.calls == hits
    with CoordinatorClient(secured.address, token=token("viewer")) as c:
        assert "ssrf" not in {x.name for x in c.list_clusters()}


def test_a_control_endpoint_that_answers_something_else_than_json_is_unavailable_not_internal(secured, junk) -> None:
    with CoordinatorClient(secured.address, token=token("admin")) as c:
        c.register_cluster(model.Cluster("junk", "127.0.0.1:9", admin=model.ADMIN_LOCAL, control_endpoint=junk))
    code, details, _ = call(
        secured.address,
        "topology",
        "CreateStream",
        pb.CreateStreamRequest(name="on-junk", partitions=1, cluster="junk"),
        token("admin"),
    )
    assert code == Code.UNAVAILABLE and "did not answer a JSON object" in details
    assert "on-junk" not in {s for s, _, _ in lanes_state(secured.address)}


@pytest.fixture
def victim(secured) -> Iterator[WorkerSession]:
    """A worker of group 'victim' (principal victim-worker) holding both leases of sec-logs/realtime."""
    worker = WorkerSession(
        secured.address,
        group="victim",
        worker_id="v1",
        subscriptions={"sec-logs": ["realtime"]},
        token=token("consumer", "victim-worker", groups=("victim",)),
    )
    worker.join()
    events = threading.Thread(target=lambda: [None for _ in worker.events()], daemon=True)
    events.start()
    wait_until(lambda: len(worker.leases) == 2)
    yield worker
    worker.close()


def _commit(lid: str, epoch: int, acked: list[tuple[int, int]], high: int = 0, session: str = "") -> cpb.CommitRequest:
    return cpb.CommitRequest(
        group="victim",
        lease_id=lid,
        epoch=epoch,
        high_watermark=high,
        acked=[cpb.OffsetRange(start=s, end=e) for s, e in acked],
        session_id=session,
    )


def test_only_the_session_holding_a_lease_commits_for_it(secured, victim: WorkerSession) -> None:
    grant = victim.leases["sec-logs/realtime/g1/p0"]
    # the session id and the epoch are readable from DescribeGroup: the attack knows them
    attack = _commit(grant.lease_id, grant.epoch, [(0, 1_000_000)], high=1_000_000, session=victim.session_id)
    # another group's consumer: not a consumer of this group
    code, details, _ = call(
        secured.address, "commitlog", "Commit", attack, token("consumer", "mallory", groups=("other",))
    )
    assert code == Code.PERMISSION_DENIED and "lacks group.consume on group/victim" in details
    # a consumer of this group, but not the session's principal (epochs are readable from DescribeGroup)
    mallory = token("consumer", "mallory", groups=("victim",))
    code, details, _ = call(secured.address, "commitlog", "Commit", attack, mallory)
    assert code == Code.PERMISSION_DENIED and "belongs to victim-worker, not mallory" in details
    with CoordinatorClient(secured.address, token=mallory) as c:
        lease = model.LeaseCommit(grant.lease_id, grant.epoch, model.Commit(acked=[(0, 10**6)], high_watermark=10**6))
        (outcome,) = c.commit_batch("victim", [lease], session_id=victim.session_id)
        assert isinstance(outcome.error, PermissionDeniedError)
        with pytest.raises(InvalidArgumentError, match="must carry the session id"):
            c.commit_batch("victim", [lease])
    with CoordinatorClient(secured.address, token=token("viewer")) as c:
        assert c.progress("victim", grant.lease_id).low_watermark == 0, "nothing was written"
    # the holder itself commits
    code, details, _ = call(
        secured.address,
        "commitlog",
        "Commit",
        _commit(grant.lease_id, grant.epoch, [(0, 0 + 1)], high=1, session=victim.session_id),
        token("consumer", "victim-worker", groups=("victim",)),
    )
    assert code == Code.OK, details


def test_two_workers_sharing_one_credential_cannot_commit_for_each_others_leases(secured, victim) -> None:
    """Same principal, another session: its commits of the victim's leases are fenced, and write nothing."""
    shared = token("consumer", "victim-worker", groups=("victim",))
    other = WorkerSession(
        secured.address, group="victim", worker_id="v2", subscriptions={"sec-logs": ["realtime"]}, token=shared
    )
    other.join()
    try:
        grant = victim.leases["sec-logs/realtime/g1/p1"]
        lease = model.LeaseCommit(grant.lease_id, grant.epoch, model.Commit(acked=[(0, 500)], high_watermark=500))
        with CoordinatorClient(secured.address, token=shared) as c:
            (outcome,) = c.commit_batch("victim", [lease], session_id=other.session_id)
            assert isinstance(outcome.error, FencedError) and "held by another session" in outcome.error.message
            assert c.progress("victim", grant.lease_id).low_watermark == 0, "nothing was written"
            (mine,) = c.commit_batch("victim", [lease], session_id=victim.session_id)
            assert mine.error is None and c.progress("victim", grant.lease_id).low_watermark == 500
    finally:
        other.close()


def test_a_producer_session_is_bound_to_the_principal_that_opened_it(secured) -> None:
    beat = pb.ProducerHeartbeatRequest(
        producer_id="p-1", in_flight=[pb.GenerationRef(stream="sec-logs", lane="realtime", generation=1)]
    )
    assert call(secured.address, "topology", "ProducerHeartbeat", beat, token("producer", "prod-a"))[0] == Code.OK
    for method, request in (
        ("ProducerHeartbeat", pb.ProducerHeartbeatRequest(producer_id="p-1")),
        ("CloseProducer", pb.CloseProducerRequest(producer_id="p-1")),
    ):
        code, details, _ = call(secured.address, "topology", method, request, token("producer", "prod-b"))
        assert code == Code.PERMISSION_DENIED and "belongs to prod-a" in details
    kept = [p for p in read_producers(secured.db) if p.producer_id == "p-1"]
    assert kept and kept[0].in_flight == [("sec-logs", "realtime", 1)], "the fake heartbeat changed nothing"
    # a producer scoped to another stream cannot hold sec-logs' generations back from sealing either
    code, details, _ = call(
        secured.address,
        "topology",
        "ProducerHeartbeat",
        pb.ProducerHeartbeatRequest(producer_id="p-2", in_flight=beat.in_flight),
        token("producer", "prod-c", streams=("metrics",)),
    )
    assert code == Code.PERMISSION_DENIED and "stream/sec-logs" in details
    assert (
        call(
            secured.address,
            "topology",
            "CloseProducer",
            pb.CloseProducerRequest(producer_id="p-1"),
            token("producer", "prod-a"),
        )[0]
        == Code.OK
    )


# -- bounded work per request ----------------------------------------------------------------------------------


OTHERS_WAIT_S = 1.0
"""The longest another caller's ListStreams may take while a huge commit is decoded and applied: the commit
holds no lock others need, but its decoding holds the GIL in bursts (0.54 s was seen once on a loaded 2-core
machine against the 0.5 s this was; a commit that blocked others would hold them for its whole length)."""


def _latencies_while(address: str, work: Callable[[], Any]) -> tuple[Any, float]:
    """Run `work` while another client keeps calling ListStreams; (its result, the slowest other call)."""
    slowest, done = [0.0], threading.Event()

    def other() -> None:
        while not done.is_set():
            code, _, took = call(address, "topology", "ListStreams", pb.ListStreamsRequest(), token("viewer"))
            assert code == Code.OK
            slowest[0] = max(slowest[0], took)
            time.sleep(0.02)  # paces the other caller's traffic

    poller = threading.Thread(target=other, daemon=True)
    poller.start()
    try:
        return work(), slowest[0]
    finally:
        done.set()
        poller.join()


def test_huge_or_overlapping_commit_ranges_cost_little_and_block_nobody(secured) -> None:
    spark = token("consumer", "spark", groups=("spark-q",))

    def commit(lid: str, acked: list[tuple[int, int]], high: int = 0) -> tuple[grpc.StatusCode, str, float]:
        request = cpb.CommitRequest(
            group="spark-q",
            lease_id=lid,
            epoch=0,
            high_watermark=high,
            acked=[cpb.OffsetRange(start=s, end=e) for s, e in acked],
        )
        return call(secured.address, "commitlog", "Commit", request, spark, timeout=30)

    (code, details, took), slowest = _latencies_while(
        secured.address, lambda: commit("sec-logs/realtime/g1/p0", [(0, 2**62)])
    )
    assert code == Code.OK and took < 1.0 and slowest < OTHERS_WAIT_S, (details, took, slowest)
    overlapping = [(i, i + 50_000) for i in range(100_000)]
    (code, details, took), slowest = _latencies_while(
        secured.address, lambda: commit("sec-logs/realtime/g1/p1", overlapping)
    )
    assert code == Code.OK and took < 2.0 and slowest < OTHERS_WAIT_S, (details, took, slowest)
    with CoordinatorClient(secured.address, token=token("viewer")) as c:
        assert c.progress("spark-q", "sec-logs/realtime/g1/p1").low_watermark == 100_000 + 49_999
    # scattered ranges far above the low watermark: refused before anything is written, naming the limit
    scattered = [(2**40 + i * 2 * CHUNK, 2**40 + i * 2 * CHUNK + 1) for i in range(5000)]
    code, details, took = commit("sec-logs/realtime/g1/p1", scattered, high=2**41)
    assert code == Code.RESOURCE_EXHAUSTED and "blocks of 4096 offsets" in details and took < 1.0


def test_bad_values_get_invalid_argument_naming_the_field_and_quoting_a_short_prefix(secured) -> None:
    admin = token("admin")
    lid = "sec-logs/realtime/g" + "9" * 300 + "/p0"
    for service, method, request in [
        ("assigner", "CheckLease", apb.CheckLeaseRequest(group="victim", lease_id=lid, epoch=1)),
        ("commitlog", "Commit", cpb.CommitRequest(group="victim", lease_id=lid, epoch=1, session_id="s1")),
        ("commitlog", "GetProgress", cpb.GetProgressRequest(group="victim", lease_id=lid)),
        (
            "commitlog",
            "GetProgressBatch",
            cpb.GetProgressBatchRequest(group="victim", lease_ids=["ok/realtime/g1/p0", lid]),
        ),
        ("topology", "CreateStream", pb.CreateStreamRequest(name="x" * 200_000, partitions=1)),
        ("topology", "DescribeStream", pb.DescribeStreamRequest(name="\u00e9" * 100_000)),
    ]:
        code, details, _ = call(secured.address, service, method, request, admin)
        assert code == Code.INVALID_ARGUMENT and len(details) < 400, (method, code, details[:500])
        assert "lease_id" in details or "name" in details
    code, details = stream_call(
        secured.address, "topology", "WatchTopology", pb.WatchTopologyRequest(from_version="f" * 24), admin
    )
    assert code == Code.INVALID_ARGUMENT and "from_version" in details


# -- resource limits -------------------------------------------------------------------------------------------


def test_sessions_without_a_hello_neither_starve_unary_calls_nor_stay(tmp_path: Path, local_cluster) -> None:
    """Streams are capped in total (16 here); those that never say hello are ended at the hello deadline, and
    unary calls go on at their usual speed meanwhile (streams take no server thread)."""
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path)),
        admin=RoutingAdmin(),
        control_endpoints=[control.endpoint],
        max_workers=4,
        max_streams=16,
        hello_timeout_s=1.0,
    )
    try:
        with CoordinatorClient(running.address) as c:
            c.register_cluster(
                model.Cluster("c", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
            c.create_stream("hello-jobs", 2)
        never = threading.Event()

        def silent() -> Iterator[apb.WorkerMessage]:
            never.wait()
            yield from ()

        outcomes: list[grpc.StatusCode] = []

        def open_one() -> None:
            try:
                next(iter(stubs(running.address)["assigner"].Session(silent(), timeout=20)))
                outcomes.append(Code.OK)
            except grpc.RpcError as err:
                outcomes.append(err.code())

        openers = [threading.Thread(target=open_one, daemon=True) for _ in range(40)]
        for t in openers:
            t.start()
        wait_until(lambda: Code.RESOURCE_EXHAUSTED in outcomes, timeout=5)
        for _ in range(20):  # every unary call is served at its usual speed meanwhile
            code, _, took = call(running.address, "topology", "ListStreams", pb.ListStreamsRequest())
            assert code == Code.OK and took < 0.5
        for t in openers:
            t.join(timeout=10)
        assert outcomes.count(Code.RESOURCE_EXHAUSTED) == 40 - 16
        assert outcomes.count(Code.DEADLINE_EXCEEDED) == 16, f"closed after the hello deadline: {outcomes}"
        worker = WorkerSession(running.address, group="g", worker_id="w", subscriptions={"hello-jobs": []})
        worker.join()  # the server is free again
        worker.close()
        never.set()
    finally:
        running.stop(0)


def test_streams_are_capped_per_principal(secured) -> None:
    mine, other = token("viewer", "greedy"), token("viewer", "patient")
    md = (("authorization", f"Bearer {mine}"),)
    calls = [
        stubs(secured.address)["topology"].WatchTopology(pb.WatchTopologyRequest(), timeout=10, metadata=md)
        for _ in range(4)
    ]
    try:
        for c in calls:
            next(c)  # each is serving (the log has events)
        assert (
            stream_call(secured.address, "topology", "WatchTopology", pb.WatchTopologyRequest(), mine)[0]
            == Code.RESOURCE_EXHAUSTED
        )
        assert (
            stream_call(secured.address, "topology", "WatchTopology", pb.WatchTopologyRequest(), other)[0]
            == Code.DEADLINE_EXCEEDED
        )
    finally:
        for c in calls:
            c.cancel()
    wait_until(
        lambda: (
            stream_call(secured.address, "topology", "WatchTopology", pb.WatchTopologyRequest(), mine)[0]
            == Code.DEADLINE_EXCEEDED
        )
    )


def test_topology_changes_are_rate_limited_per_principal(secured) -> None:
    noisy = token("operator", "noisy")
    codes = [
        call(
            secured.address,
            "assigner",
            "ConfigureGroup",
            apb.ConfigureGroupRequest(group="rate", lane="realtime", max_attempts=3),
            noisy,
        )[0]
        for _ in range(260)
    ]
    assert Code.RESOURCE_EXHAUSTED in codes and codes[:150].count(Code.OK) == 150
    assert (
        call(
            secured.address,
            "assigner",
            "ConfigureGroup",
            apb.ConfigureGroupRequest(group="rate", lane="realtime", max_attempts=3),
            token("operator", "calm"),
        )[0]
        == Code.OK
    )


# -- roles: every RPC against every role -----------------------------------------------------------------------

ROLES = ("admin", "operator", "producer", "consumer", "viewer")
EVERYONE = set(ROLES)
# what each RPC needs, written out here (not read from the code under test); the requests are refused after
# the permission check (bad values or unknown names), so the matrix writes nothing
MATRIX: list[tuple[str, str, Any, set[str]]] = [
    ("topology", "RegisterCluster", pb.RegisterClusterRequest(), {"admin"}),
    ("topology", "ListClusters", pb.ListClustersRequest(), EVERYONE),
    ("topology", "CreateStream", pb.CreateStreamRequest(name="m", partitions=0), {"admin", "operator"}),
    ("topology", "DescribeStream", pb.DescribeStreamRequest(name="sec-logs"), EVERYONE),
    ("topology", "ListStreams", pb.ListStreamsRequest(), EVERYONE),
    ("topology", "AddLane", pb.AddLaneRequest(stream="nope", lane="x", partitions=1), {"admin", "operator"}),
    (
        "topology",
        "Failover",
        pb.FailoverRequest(stream="nope", lane="realtime", target_cluster="sec-b"),
        {"admin", "operator"},
    ),
    # a consumer's producer session writes its stream's dlq lane (rejected records) and nothing else
    ("topology", "ProducerHeartbeat", pb.ProducerHeartbeatRequest(producer_id=""), {"admin", "producer", "consumer"}),
    (
        "topology",
        "ProducerHeartbeat",
        pb.ProducerHeartbeatRequest(producer_id="", writes=[pb.LaneRef(stream="sec-logs", lane="realtime")]),
        {"admin", "producer"},
    ),
    (
        "topology",
        "ProducerHeartbeat",
        pb.ProducerHeartbeatRequest(producer_id="", writes=[pb.LaneRef(stream="sec-logs", lane="dlq")]),
        {"admin", "producer", "consumer"},
    ),
    (
        "topology",
        "ProducerHeartbeat",
        pb.ProducerHeartbeatRequest(
            producer_id="", in_flight=[pb.GenerationRef(stream="sec-logs", lane="backlog", generation=1)]
        ),
        {"admin", "producer"},
    ),
    ("topology", "CloseProducer", pb.CloseProducerRequest(producer_id=""), {"admin", "producer", "consumer"}),
    ("topology", "WatchTopology", pb.WatchTopologyRequest(), EVERYONE),
    ("topology", "ClusterHealth", pb.ClusterHealthRequest(name="nope"), EVERYONE),
    ("topology", "CordonCluster", pb.CordonClusterRequest(name="nope"), {"admin"}),
    ("topology", "RemoveCluster", pb.RemoveClusterRequest(name="nope"), {"admin"}),
    ("topology", "SetStreamPolicy", pb.SetStreamPolicyRequest(stream="nope"), {"admin", "operator"}),
    ("topology", "SetFleetPolicy", pb.FleetPolicy(max_failovers_per_minute=20_000), {"admin"}),
    ("topology", "GetFleetPolicy", pb.GetFleetPolicyRequest(), EVERYONE),
    (
        "topology",
        "AbandonGeneration",
        pb.AbandonGenerationRequest(stream="nope", lane="realtime", generation=1),
        {"admin", "operator"},
    ),
    ("topology", "DeleteStream", pb.DeleteStreamRequest(name="no-such-stream"), {"admin", "operator"}),
    ("commitlog", "Commit", cpb.CommitRequest(group="mx", lease_id="nope/realtime/g1/p0"), {"admin", "consumer"}),
    ("commitlog", "CommitBatch", cpb.CommitBatchRequest(group="mx"), {"admin", "consumer"}),
    ("commitlog", "GetProgress", cpb.GetProgressRequest(group="mx", lease_id="sec-logs/realtime/g1/p0"), EVERYONE),
    (
        "commitlog",
        "GetProgressBatch",
        cpb.GetProgressBatchRequest(group="mx", lease_ids=["sec-logs/realtime/g1/p0"]),
        EVERYONE,
    ),
    (
        "commitlog",
        "DueRetries",
        cpb.DueRetriesRequest(group="mx", lease_id="nope/realtime/g1/p0"),
        {"admin", "consumer"},
    ),
    ("commitlog", "GetLag", cpb.GetLagRequest(group="mx"), EVERYONE),
    ("commitlog", "ListRejects", cpb.ListRejectsRequest(stream="sec-logs", group="mx"), EVERYONE),
    (
        "commitlog",
        "PurgeRejects",
        cpb.PurgeRejectsRequest(stream="sec-logs", group="mx", before_unix_ms=1, dry_run=True),
        {"admin", "operator"},
    ),
    ("commitlog", "ConfigureGroup", apb.ConfigureGroupRequest(group="mx", lane="realtime"), {"admin", "operator"}),
    (
        "commitlog",
        "ClaimRedrive",
        cpb.ClaimRedriveRequest(stream="sec-logs", group="mx", owner="run-1", to_lane="realtime"),
        {"admin", "operator"},
    ),
    (
        "commitlog",
        "CompleteRedrive",
        cpb.CompleteRedriveRequest(stream="sec-logs", group="mx", owner="run-1"),
        {"admin", "operator"},
    ),
    ("assigner", "ConfigureGroup", apb.ConfigureGroupRequest(group="mx", lane="realtime"), {"admin", "operator"}),
    (
        "assigner",
        "CheckLease",
        apb.CheckLeaseRequest(group="mx", lease_id="nope/realtime/g1/p0", epoch=1),
        {"admin", "consumer"},
    ),
    ("assigner", "DescribeGroup", apb.DescribeGroupRequest(group="mx"), EVERYONE),
    ("assigner", "DeleteGroup", apb.DeleteGroupRequest(group="no-such-group"), {"admin", "operator"}),
    (
        "assigner",
        "CreateWindowGroup",
        apb.CreateWindowGroupRequest(group="mx-side", stream="sec-logs", from_unix_ms=1, dry_run=True),
        {"admin", "operator"},
    ),
    (
        "assigner",
        "RewindGroup",
        apb.RewindGroupRequest(group="mx", stream="sec-logs", earliest=True, dry_run=True),
        {"admin", "operator"},
    ),
    ("assigner", "WatchGroup", apb.WatchGroupRequest(group="mx"), EVERYONE),
    ("assigner", "Session", None, {"admin", "consumer"}),
    ("auth", "CreateToken", authpb.CreateTokenRequest(subject="x", role="nope"), {"admin"}),
    ("auth", "RevokeToken", authpb.RevokeTokenRequest(token_id="not a token id"), {"admin"}),
    ("auth", "WhoAmI", authpb.WhoAmIRequest(), EVERYONE),
]


def _session(address: str, bearer: str) -> tuple[grpc.StatusCode, str]:
    hello = apb.WorkerMessage(
        hello=apb.Hello(group="mx", worker_id="w-matrix", subscriptions=[apb.Subscription(stream="nope")])
    )
    try:
        next(
            iter(
                stubs(address)["assigner"].Session(
                    iter([hello]), timeout=5, metadata=(("authorization", f"Bearer {bearer}"),)
                )
            )
        )
        return Code.OK, ""
    except grpc.RpcError as err:
        return err.code(), err.details() or ""


def test_every_rpc_against_every_role(secured) -> None:
    services = {
        "topology": pb.DESCRIPTOR,
        "commitlog": cpb.DESCRIPTOR,
        "assigner": apb.DESCRIPTOR,
        "auth": authpb.DESCRIPTOR,
    }
    listed = {(s, m) for s, m, _, _ in MATRIX}
    every = {(s, m.name) for s, d in services.items() for svc in d.services_by_name.values() for m in svc.methods}
    assert listed == every, "a new RPC needs its row in the matrix"
    wrong = []
    for service, method, request, allowed in MATRIX:
        for role in ROLES:
            bearer = token(role, f"m-{role}")
            if method == "Session":
                code, details = _session(secured.address, bearer)
            elif method.startswith("Watch"):
                code, details = stream_call(secured.address, service, method, request, bearer)
            else:
                code, details, _ = call(secured.address, service, method, request, bearer)
            denied = code == Code.PERMISSION_DENIED and " lacks " in details
            if denied == (role in allowed) or code in (Code.UNAUTHENTICATED, Code.INTERNAL, Code.UNKNOWN):
                wrong.append((method, role, code.name, details[:120]))
    assert wrong == []


def test_scoped_tokens_reach_only_their_streams_and_groups(secured) -> None:
    scoped = token("consumer", "scoped", streams=("metrics",), groups=("mx",))
    code, details = _session(secured.address, scoped)  # subscribes to stream 'nope': not one of its streams
    assert code == Code.PERMISSION_DENIED and "stream/nope" in details
    code, details, _ = call(
        secured.address,
        "commitlog",
        "Commit",
        cpb.CommitRequest(group="mx", lease_id="sec-logs/realtime/g1/p0"),
        scoped,
    )
    assert code == Code.PERMISSION_DENIED and "stream/sec-logs" in details


def test_a_token_scoped_to_groups_lists_only_its_own_groups_rejects(secured) -> None:
    """Rejects carry handlers' error texts: a token scoped to groups names one of them; every group's is refused."""
    scoped = token("consumer", "scoped-dlq", groups=("mx",))
    with CoordinatorClient(secured.address, token=token("admin", "root")) as admin:  # mx has read the stream
        admin.commit("mx", model.LeaseCommit("sec-logs/realtime/g1/p0", 0, model.Commit(high_watermark=1)))
    asks = {
        "": Code.PERMISSION_DENIED,
        "other": Code.PERMISSION_DENIED,
        "mx": Code.OK,
    }
    for group, want in asks.items():
        request = cpb.ListRejectsRequest(stream="sec-logs", group=group)
        code, details, _ = call(secured.address, "commitlog", "ListRejects", request, scoped)
        assert code == want, (group, code, details)
    code, _, _ = call(
        secured.address, "commitlog", "ListRejects", cpb.ListRejectsRequest(stream="sec-logs"), token("viewer")
    )
    assert code == Code.OK, "an unscoped viewer lists every group's"


def test_describe_group_applies_the_one_group_name_rule(secured) -> None:
    viewer = token("viewer", "names")
    for bad in ("", "Upper", "a.b", "a/b", "a b", "-lead", "x" * 64, "y" * 1000):
        request = apb.DescribeGroupRequest(group=bad)
        code, details, _ = call(secured.address, "assigner", "DescribeGroup", request, viewer)
        assert code == Code.INVALID_ARGUMENT and "is not a valid name" in details, (bad, code, details)
    code, _, _ = call(secured.address, "assigner", "DescribeGroup", apb.DescribeGroupRequest(group="ok-group"), viewer)
    assert code == Code.OK


def test_group_events_carry_the_authenticated_principal_and_the_worker_id_apart(secured) -> None:
    """A consumer token whose subject is pcons-1 joins as worker_id='security-admin': the event's actor is the
    principal, and the claimed name is only its worker id."""
    with CoordinatorClient(secured.address, token=token("admin", "root")) as admin:
        admin.create_stream("sec-actor", 1, cluster="sec-a")
    session = WorkerSession(
        secured.address,
        group="actors",
        worker_id="security-admin",
        subscriptions={"sec-actor": []},
        token=token("consumer", "pcons-1", groups=("actors",)),
    )
    session.join()
    try:
        with CoordinatorClient(secured.address, token=token("admin", "root")) as admin:
            joined = [e for e in admin.watch_group("actors", "", follow=False) if e.change == "member_joined"]
    finally:
        session.close()
    assert joined and joined[-1].actor == "pcons-1" and joined[-1].worker_id == "security-admin"


@pytest.mark.parametrize("declares", [True, False], ids=["declares-its-writes", "older-client"])
def test_a_producer_of_one_stream_never_holds_back_another_streams_seal(secured, declares: bool) -> None:
    """A producer token scoped to stream B heartbeats with an old topology version and nothing in flight. Before
    the fix it held back every stream's draining generation, here A's, for as long as it heartbeated."""
    suffix = "d" if declares else "o"
    a, b = f"sec-hold-a{suffix}", f"sec-hold-b{suffix}"
    with CoordinatorClient(secured.address, token=token("admin", "root")) as admin:
        admin.create_stream(a, 1, cluster="sec-a")
        admin.create_stream(b, 1, cluster="sec-a")
        admin.failover(a, "realtime", "sec-b", reason="a seal to hold back")
    producer_b = token("producer", f"p-{b}", streams=(b,))
    writes = [pb.LaneRef(stream=b, lane="realtime")] if declares else []
    beat = pb.ProducerHeartbeatRequest(
        producer_id=f"prod-{b}", topology_version="", writes=writes, declares_writes=declares
    )

    def sealed() -> bool:
        code, details, _ = call(secured.address, "topology", "ProducerHeartbeat", beat, producer_b)
        assert code == Code.OK, details
        with CoordinatorClient(secured.address, token=token("viewer")) as viewer:
            gen = viewer.describe_stream(a).require_lane("realtime").generation(1)
        return gen is not None and gen.state != model.DRAINING

    wait_until(sealed, timeout=10, what=lambda: f"{a}'s generation 1 stayed draining")


def test_a_revoked_token_is_refused_by_every_replica_within_a_second_and_its_sessions_end(secured) -> None:
    second = server.start(secured.db, admin=RoutingAdmin(), guard=Guard(ISSUER))  # another replica, one store
    try:
        worker = token("consumer", "leaked", groups=("rv-g",))
        with CoordinatorClient(secured.address, token=worker) as c:
            me = c.whoami()
        assert me["token_id"] and me["expires_unix_s"] > time.time()
        session = WorkerSession(
            second.address, group="rv-g", worker_id="rv-w", subscriptions={"sec-logs": []}, token=worker
        )
        session.join()
        events = iter(session.events())
        with CoordinatorClient(secured.address, token=token("admin", "root")) as admin:
            assert admin.revoke_token(me["token_id"], "leaked in a log") is True
            assert admin.revoke_token(me["token_id"]) is False  # idempotent
        revoked_at = time.monotonic()
        for address in (secured.address, second.address):

            def refused(address: str = address) -> bool:
                code, details, _ = call(address, "auth", "WhoAmI", authpb.WhoAmIRequest(), worker)
                return code == Code.UNAUTHENTICATED and "was revoked" in details

            wait_until(refused, timeout=2)
        assert time.monotonic() - revoked_at < 1.5
        with pytest.raises(SessionEndedError, match="was revoked"):
            for _ in events:
                pass
        code, details, _ = call(
            secured.address, "auth", "RevokeToken", authpb.RevokeTokenRequest(token_id="../x"), token("admin")
        )
        assert code == Code.INVALID_ARGUMENT and "is not a token id" in details
    finally:
        second.stop(0)


def test_the_token_key_rotates_with_an_overlap_then_the_old_key_is_retired(tmp_path: Path) -> None:
    from streamplane.coordinator.rpc.auth import load_keys
    from tests.helpers import cli, start_coordinator

    key_file = tmp_path / "token.key"
    old = TokenIssuer.of(load_keys(key_file, create=True))
    proc, address = start_coordinator(tmp_path / "db", token_key=key_file)
    try:
        before = old.create("ops", "admin", now_s=time.time(), ttl_s=3600)
        rotated = cli("token", "rotate-key", "--token-key-file", str(key_file))
        assert rotated.returncode == 0 and "1 older key(s) still verifying" in rotated.stdout, rotated.stderr
        new = TokenIssuer.of(load_keys(key_file))
        after = new.create("ops", "admin", now_s=time.time(), ttl_s=3600)
        assert new.key != old.key and len(load_keys(key_file)) == 2

        def works(bearer: str) -> bool:
            return call(address, "auth", "WhoAmI", authpb.WhoAmIRequest(), bearer)[0] == Code.OK

        wait_until(lambda: works(after), timeout=3)  # the coordinator read the rotated file
        assert works(before)  # the overlap: tokens signed with the old key still hold
        issued = cli("-o", "json", "token", "create", "--role", "viewer", coordinator=address, env={
            "STREAMPLANE_TOKEN": after})  # fmt: skip
        assert issued.returncode == 0, issued.stderr
        retired = cli("token", "rotate-key", "--token-key-file", str(key_file), "--retire")
        assert retired.returncode == 0 and len(load_keys(key_file)) == 1
        wait_until(lambda: not works(before), timeout=3)
        assert works(after)
    finally:
        proc.stop()


def test_the_go_client_sends_its_bearer_token_from_the_environment_or_a_file(secured, tmp_path: Path) -> None:
    """Dial's token path (STREAMPLANE_TOKEN, else STREAMPLANE_TOKEN_FILE), as its TLS paths are tested."""
    import os
    import shutil
    import subprocess

    from tests.helpers import REPO

    go = shutil.which("go")
    if go is None:
        pytest.skip("the Go client is not exercised: no Go toolchain on this machine")

    def whoami(**env: str) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMPLANE_TOKEN", "STREAMPLANE_TLS"))}
        return subprocess.run(
            [go, "test", "-count=1", "-v", "-run", "TestWhoAmI", "."],
            cwd=REPO / "clients" / "go",
            env={**base, "STREAMPLANE_COORDINATOR": secured.address, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = whoami(STREAMPLANE_TOKEN=token("consumer", "go-worker", groups=("go-g",)))
    assert done.returncode == 0 and "whoami name=go-worker role=consumer via=token" in done.stdout, done.stdout
    (tmp_path / "token").write_text(token("viewer", "go-viewer") + "\n")
    done = whoami(STREAMPLANE_TOKEN_FILE=str(tmp_path / "token"))
    assert done.returncode == 0 and "whoami name=go-viewer role=viewer via=token" in done.stdout, done.stdout
    forged = TokenIssuer(b"9" * 64).create("root", "admin", now_s=time.time(), ttl_s=60)
    done = whoami(STREAMPLANE_TOKEN=forged)
    assert done.returncode != 0 and "Unauthenticated" in done.stdout + done.stderr
