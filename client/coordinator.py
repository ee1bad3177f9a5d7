"""A typed client of the coordinator's gRPC services.

Every call goes through `_call`, which applies the timeout, the actor metadata and retries of reads on
UNAVAILABLE, and turns gRPC errors into streamplane errors in one place (`streamplane.rpc`).
"""

from __future__ import annotations

import getpass
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from streamplane.rpc import raise_from_rpc_error
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc
from streamplane.v1 import topology_pb2 as pb
from streamplane.v1 import topology_pb2_grpc as pb_grpc

DEFAULT_COORDINATOR = "127.0.0.1:7400"
T = TypeVar("T")


def default_actor() -> str:
    """user@host, recorded in the event log as who made a change."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class CoordinatorClient:
    """Calls to one coordinator.

    Args:
        target: host:port of the coordinator; default STREAMPLANE_COORDINATOR or 127.0.0.1:7400.
        timeout_s: deadline of each unary call.
        actor: who the calls act for, recorded with every change.
        retries: how many times a read is retried while the coordinator is unavailable (with backoff).
    """

    def __init__(
        self, target: str | None = None, *, timeout_s: float = 30.0, actor: str | None = None, retries: int = 3
    ) -> None:
        self.target = target or os.environ.get("STREAMPLANE_COORDINATOR") or DEFAULT_COORDINATOR
        self._timeout_s = timeout_s
        self._metadata = (("x-streamplane-actor", actor or default_actor()),)
        self._retries = retries
        self._channel = grpc.insecure_channel(self.target)
        self.topology = pb_grpc.TopologyServiceStub(self._channel)
        self.commitlog = cpb_grpc.CommitLogServiceStub(self._channel)
        self.assigner = apb_grpc.AssignerServiceStub(self._channel)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata every call carries (who acts)."""
        return self._metadata

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: Any, *, idempotent: bool = False) -> T:
        attempts = self._retries + 1 if idempotent else 1
        for attempt in range(attempts):
            try:
                return method(request, timeout=self._timeout_s, metadata=self._metadata)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE and attempt + 1 < attempts:
                    time.sleep(min(0.2 * 2**attempt, 2.0))
                    continue
                raise_from_rpc_error(err, self.target)
        raise AssertionError("unreachable")

    def register_cluster(self, cluster: pb.Cluster, *, update_existing: bool = False) -> pb.RegisterClusterResponse:
        return self._call(
            self.topology.RegisterCluster, pb.RegisterClusterRequest(cluster=cluster, update_existing=update_existing)
        )

    def list_clusters(self) -> list[pb.Cluster]:
        return list(self._call(self.topology.ListClusters, pb.ListClustersRequest(), idempotent=True).clusters)

    def create_stream(self, name: str, partitions: int, cluster: str = "") -> pb.StreamResponse:
        return self._call(
            self.topology.CreateStream, pb.CreateStreamRequest(name=name, partitions=partitions, cluster=cluster)
        )

    def describe_stream(self, name: str) -> pb.Stream:
        return self.describe_stream_versioned(name)[0]

    def describe_stream_versioned(self, name: str) -> tuple[pb.Stream, str]:
        """The stream and the newest event version it reflects: a watch from there misses no later change."""
        got = self._call(self.topology.DescribeStream, pb.DescribeStreamRequest(name=name), idempotent=True)
        return got.stream, got.version

    def producer_heartbeat(
        self, producer_id: str, topology_version: str, in_flight: list[tuple[str, str, int]]
    ) -> pb.ProducerHeartbeatResponse:
        request = pb.ProducerHeartbeatRequest(
            producer_id=producer_id,
            topology_version=topology_version,
            in_flight=[pb.GenerationRef(stream=s, lane=lane, generation=g) for s, lane, g in in_flight],
        )
        return self._call(self.topology.ProducerHeartbeat, request, idempotent=True)

    def close_producer(self, producer_id: str) -> None:
        self._call(self.topology.CloseProducer, pb.CloseProducerRequest(producer_id=producer_id), idempotent=True)

    def list_streams(self) -> list[pb.Stream]:
        return list(self._call(self.topology.ListStreams, pb.ListStreamsRequest(), idempotent=True).streams)

    def add_lane(
        self, stream: str, lane: str, priority: int, partitions: int = 0, cluster: str = ""
    ) -> pb.StreamResponse:
        return self._call(
            self.topology.AddLane,
            pb.AddLaneRequest(stream=stream, lane=lane, priority=priority, partitions=partitions, cluster=cluster),
        )

    def failover(
        self, stream: str, lane: str, target_cluster: str, partitions: int = 0, reason: str = ""
    ) -> pb.FailoverResponse:
        return self._call(
            self.topology.Failover,
            pb.FailoverRequest(
                stream=stream, lane=lane, target_cluster=target_cluster, partitions=partitions, reason=reason
            ),
        )

    def describe_group(self, group: str) -> apb.GroupDescription:
        return self._call(self.assigner.DescribeGroup, apb.DescribeGroupRequest(group=group), idempotent=True)

    def commit(self, request: cpb.CommitRequest) -> cpb.CommitResponse:
        """Record progress of a lease (idempotent, so it is retried while the coordinator is unavailable)."""
        return self._call(self.commitlog.Commit, request, idempotent=True)

    def commit_batch(self, group: str, commits: list[cpb.CommitRequest]) -> cpb.CommitBatchResponse:
        """Commit many leases of one group in one call; each lease's result says whether it was recorded."""
        request = cpb.CommitBatchRequest(group=group, commits=commits)
        return self._call(self.commitlog.CommitBatch, request, idempotent=True)

    def progress(self, group: str, lease_id: str, max_ranges: int = 1000) -> cpb.Progress:
        request = cpb.GetProgressRequest(group=group, lease_id=lease_id, max_ranges=max_ranges)
        return self._call(self.commitlog.GetProgress, request, idempotent=True)

    def due_retries(self, group: str, lease_id: str, epoch: int, limit: int = 1000) -> list[cpb.RetryState]:
        request = cpb.DueRetriesRequest(group=group, lease_id=lease_id, epoch=epoch, limit=limit)
        return list(self._call(self.commitlog.DueRetries, request, idempotent=True).due)

    def lag(self, group: str = "", stream: str = "", lane: str = "") -> cpb.GetLagResponse:
        """Lag of a group (of every group that committed, when empty)."""
        request = cpb.GetLagRequest(group=group, stream=stream, lane=lane)
        return self._call(self.commitlog.GetLag, request, idempotent=True)

    def configure_group(self, group: str, lane: str, max_attempts: int) -> None:
        request = cpb.ConfigureGroupRequest(group=group, lane=lane, max_attempts=max_attempts)
        self._call(self.commitlog.ConfigureGroup, request)

    def watch_topology(
        self, from_version: str = "", *, idle_timeout_s: float | None = None
    ) -> Iterator[pb.TopologyEvent]:
        """Every event after `from_version`, then new ones as they commit.

        With `idle_timeout_s`, the iteration ends once no event arrived for that long (for `events` without
        --follow); otherwise it runs until the caller stops iterating.
        """
        call = self.topology.WatchTopology(pb.WatchTopologyRequest(from_version=from_version), metadata=self._metadata)
        try:
            yield from (call if idle_timeout_s is None else _until_idle(call, idle_timeout_s))
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                raise_from_rpc_error(err, self.target)
        finally:
            call.cancel()


_END = object()


def _until_idle(call: Any, idle_timeout_s: float) -> Iterator[Any]:
    """Messages of a streaming call until none arrives for `idle_timeout_s` (grpc's next() cannot time out)."""
    messages: queue.Queue[Any] = queue.Queue()

    def pump() -> None:
        try:
            for message in call:
                messages.put(message)
        except grpc.RpcError as err:
            messages.put(err)
        messages.put(_END)

    threading.Thread(target=pump, name="watch-pump", daemon=True).start()
    while True:
        try:
            item = messages.get(timeout=idle_timeout_s)
        except queue.Empty:
            return
        if item is _END:
            return
        if isinstance(item, grpc.RpcError):
            raise item
        yield item
