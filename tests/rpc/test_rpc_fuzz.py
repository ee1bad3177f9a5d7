"""Every RPC's request message with extreme values (hypothesis): never INTERNAL or UNKNOWN, never a call slower
than 3 s (one gRPC refuses by its size never reaches the coordinator, and is not timed), and the coordinator's
state consistent afterwards (issue 13).

Requests are built from the messages' own descriptors, so a field added later is fuzzed too. Calls are made
as an admin, to reach past the permission checks. Cluster registrations are fuzzed on a coordinator of their
own: a registered address that does not answer would make later stream creations wait for Kafka.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamplane import model
from streamplane.client import CoordinatorClient
from streamplane.coordinator.rpc import server
from streamplane.coordinator.rpc.auth import TokenIssuer
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.v1 import assigner_pb2, auth_pb2, commitlog_pb2, topology_pb2
from tests.rpc.test_security import stubs

ISSUER = TokenIssuer(b"5" * 64)
EXAMPLES = int(os.environ.get("STREAMPLANE_FUZZ_EXAMPLES", "30"))
"""Requests per RPC (CI runs the default; a soak sets more)."""
BAD = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)

NAMES = ["", "fz-logs", "realtime", "dlq", "fz", "g1", "fz-a", "a" * 63, "A", "x" * 5000, "é" * 300, "\x00", "../x",
         "fz-logs/realtime/g1/p0", "fz-logs/realtime/g999999999999999999/p0", "fz-logs/realtime/g" + "9" * 200 + "/p0",
         "f" * 24, "0" * 24, "127.0.0.1:1", "sec:9092", "\ud7ff\U0010ffff", " ", "logs,realtime", "-1"]  # fmt: skip
INTS = [0, 1, 2, -1, 7, 1000, 2**31 - 1, 2**31, 2**62, 2**63 - 1, -(2**63)]
UINTS = [0, 1, 2, 3, 1000, 4096, 4097, 2**31, 2**32 - 1]
FLOATS = [0.0, 1.0, -1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan]


def scalar(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return st.sampled_from(NAMES)
    if t == FieldDescriptor.TYPE_BYTES:  # a megabyte at the top only: lists of them would not fit a request
        big = [b"\xff" * (1 << 20)] if depth == 0 else []
        return st.sampled_from([b"", b"\xff", b"\x01" * 1000, os.urandom(64), *big])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.sampled_from(FLOATS)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.sampled_from(UINTS)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.sampled_from([*UINTS, 2**63, 2**64 - 1])
    if t == FieldDescriptor.TYPE_INT32:
        return st.sampled_from([x for x in INTS if -(2**31) <= x < 2**31])
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    return st.sampled_from(INTS)


def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Field values for one message: each field left out, or an extreme value (lists of 0, 1, 3 or many)."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3 or field.message_type.GetOptions().map_entry:
                continue
            one = message(field.message_type, depth + 1)
        else:
            one = scalar(field, depth)
        if field.is_repeated:
            nested = field.type == FieldDescriptor.TYPE_MESSAGE
            many = st.integers(0, 3) | st.just(20 if depth else 500 if nested else 5000)
            one = many.flatmap(lambda n, one=one: st.lists(one, min_size=n, max_size=n) if n <= 3 else
                               one.map(lambda x, n=n: [x] * n))  # fmt: skip
        parts[field.name] = st.none() | one
    return st.fixed_dictionaries(parts).map(lambda d: {k: v for k, v in d.items() if v is not None})


def build(cls: type, values: dict[str, Any]) -> Any:
    def fill(msg: Any, values: dict[str, Any]) -> None:
        for name, value in values.items():
            field = msg.DESCRIPTOR.fields_by_name[name]
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if field.is_repeated:
                    for item in value:
                        fill(getattr(msg, name).add(), item)
                else:
                    fill(getattr(msg, name), value)
            elif field.is_repeated:
                getattr(msg, name).extend(value)
            else:
                setattr(msg, name, value)

    msg = cls()
    fill(msg, values)
    return msg


SERVICES = {
    "topology": (topology_pb2, "TopologyService"),
    "commitlog": (commitlog_pb2, "CommitLogService"),
    "assigner": (assigner_pb2, "AssignerService"),
    "auth": (auth_pb2, "AuthService"),
}
METHODS = [
    (service, m)
    for service, (module, name) in SERVICES.items()
    for m in module.DESCRIPTOR.services_by_name[name].methods
]


def _start(tmp: Any, local_cluster: Any) -> tuple[server.RunningCoordinator, str]:
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp)),
        admin=RoutingAdmin(),
        guard=Guard(ISSUER, change_burst=1e9, changes_per_s=1e9),
        control_endpoints=[control.endpoint],
    )
    admin = ISSUER.create("fuzzer", "admin", now_s=time.time(), ttl_s=3600)
    with CoordinatorClient(running.address, token=admin) as c:
        c.register_cluster(model.Cluster("fz-a", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint))
        c.create_stream("fz-logs", 2, cluster="fz-a")
    return running, admin


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, local_cluster) -> Iterator[tuple[str, str]]:
    running, admin = _start(tmp_path_factory.mktemp("fuzz"), local_cluster)
    yield running.address, admin
    running.stop(0)


def _call(address: str, admin: str, service: str, method: Any, request: Any) -> tuple[grpc.StatusCode, str, float]:
    stub = getattr(stubs(address)[service], method.name)
    md = (("authorization", f"Bearer {admin}"),)
    started = time.monotonic()
    try:
        if method.client_streaming:  # a session: the fuzzed hello, then the stream ends
            hello = request if request.HasField("hello") else type(request)(hello=assigner_pb2.Hello())
            for _ in stub(iter([hello]), timeout=1.0, metadata=md):
                break
        elif method.server_streaming:  # a watch: what it sends in its first moments
            for _ in stub(request, timeout=0.3, metadata=md):
                pass
        else:
            stub(request, timeout=5.0, metadata=md)
        return grpc.StatusCode.OK, "", time.monotonic() - started
    except grpc.RpcError as err:
        code = err.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and method.server_streaming:
            code = grpc.StatusCode.OK  # a watch serving until its deadline
        return code, err.details() or "", time.monotonic() - started


def _check(address: str, admin: str, service: str, method: Any, values: dict[str, Any]) -> None:
    request = build(message_factory.GetMessageClass(method.input_type), values)  # wherever its .proto defines it
    code, details, took = _call(address, admin, service, method, request)
    assert code not in BAD, f"{method.name}: {code.name} {details[:300]} for {str(request)[:300]}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        return  # gRPC refused it by its size before our code ran: its time is the client's, sending 50 MB
    # bounded work answers at once: a second is what it takes on a quiet machine, three on a loaded 2-core one
    # (a CommitBatch of the largest shape took 1.01 s during a full run); unbounded work takes far longer
    assert took < (4.0 if method.server_streaming else 3.0), f"{method.name} took {took:.2f} s"


@pytest.mark.parametrize(
    ("service", "method"),
    [(s, m) for s, m in METHODS if m.name != "RegisterCluster"],
    ids=lambda x: getattr(x, "name", x),
)
def test_extreme_requests_never_fail_internally_nor_slowly(fuzzed, service: str, method: Any) -> None:
    address, admin = fuzzed

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(message(method.input_type))
    def run(values: dict[str, Any]) -> None:
        _check(address, admin, service, method, values)

    run()
    _consistent(address, admin, deletes=method.name == "DeleteStream")


def test_extreme_cluster_registrations(tmp_path, local_cluster) -> None:
    running, admin = _start(tmp_path, local_cluster)
    try:
        (method,) = [m for s, m in METHODS if m.name == "RegisterCluster"]

        @settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(message(method.input_type))
        def run(values: dict[str, Any]) -> None:
            _check(running.address, admin, "topology", method, values)

        run()
        _consistent(running.address, admin)
    finally:
        running.stop(0)


def _consistent(address: str, admin: str, *, deletes: bool = False) -> None:
    """The coordinator still serves, and every lane has exactly one active generation, on a known cluster; the
    fixture's stream is still there, unless the method deletes streams (then it is gone whole)."""
    with CoordinatorClient(address, token=admin) as c:
        clusters = {x.name for x in c.list_clusters()}
        for stream in c.list_streams():
            for lane in stream.lanes:
                active = [g for g in lane.generations if g.state == model.ACTIVE]
                assert len(active) == 1, (stream.name, lane.name, lane.generations)
                assert {g.cluster for g in lane.generations} <= clusters
        if deletes and "fz-logs" not in {s.name for s in c.list_streams()}:
            c.create_stream("fz-logs", 2, cluster="fz-a")  # the next methods fuzz against it (the fixture is shared)
        assert c.describe_stream("fz-logs").name == "fz-logs"


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\xff", b"\x0a\xff\x01", b"\x08" * 3], ids=["ff", "cut", "varint"])
def test_undecodable_request_bytes_are_invalid_argument_on_every_rpc(fuzzed, garbage: bytes) -> None:
    """Bytes that are not a valid message get INVALID_ARGUMENT with one sentence, on every RPC, the session's
    stream included; before, UNKNOWN ("Unexpected <class DecodeError>"), and INTERNAL on Session."""
    address, admin = fuzzed
    channel = grpc.insecure_channel(address)
    md = (("authorization", f"Bearer {admin}"),)
    wrong = []
    for service, method in METHODS:
        path = f"/streamplane.v1.{SERVICES[service][1]}/{method.name}"
        try:
            if method.client_streaming:
                call = channel.stream_stream(path, request_serializer=bytes, response_deserializer=bytes)
                next(iter(call(iter([garbage]), timeout=5, metadata=md)))
            elif method.server_streaming:
                call = channel.unary_stream(path, request_serializer=bytes, response_deserializer=bytes)
                next(iter(call(garbage, timeout=5, metadata=md)))
            else:
                channel.unary_unary(path, request_serializer=bytes, response_deserializer=bytes)(
                    garbage, timeout=5, metadata=md
                )
            wrong.append((method.name, "OK"))
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.INVALID_ARGUMENT or "is not a valid message" not in (err.details() or ""):
                wrong.append((method.name, err.code().name, (err.details() or "")[:100]))
    channel.close()
    assert wrong == []
