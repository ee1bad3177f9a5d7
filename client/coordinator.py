"""The client's transport: typed calls to the coordinator's gRPC services, model objects in and out.

Every call goes through `_call`, which applies the timeout, the credential and retries of reads on
UNAVAILABLE, and turns gRPC errors into streamplane errors in one place (`streamplane.rpc`).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from streamplane import model as m
from streamplane.client.credentials import ClientTls, Credentials, TokenSource
from streamplane.errors import StreamplaneError, UnavailableError
from streamplane.rpc import error_from_rpc_error, raise_from_rpc_error
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import auth_pb2 as authpb
from streamplane.v1 import auth_pb2_grpc as authpb_grpc
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc
from streamplane.v1 import convert
from streamplane.v1 import topology_pb2 as pb
from streamplane.v1 import topology_pb2_grpc as pb_grpc

DEFAULT_COORDINATOR = "127.0.0.1:7400"
T = TypeVar("T")


MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""The largest answer the client takes from the coordinator: a description of a 100,000-partition group is
about 4.4 MB, past gRPC's default 4 MB (the coordinator still bounds what it receives)."""
KEEPALIVE_MS = 2000
"""How often the client pings its replica when no data arrived, and how long it waits for the answer: a
replica that is stopped (SIGSTOP, a stalled VM) or cut off keeps its TCP connection open, and without pings
every call would wait out its deadline there; with them the channel drops it within about two of these and
moves to the next replica. The coordinator accepts pings this often (see `coordinator/rpc/server.py`)."""
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_MS),  # a keepalive that joins a ping already out waits this long
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def channel_target(target: str) -> tuple[str, list[tuple[str, Any]]]:
    """gRPC's target and options for one coordinator address, or several (`host:p1,host:p2`, the replicas of
    one coordinator): the channel then holds one live replica at a time and moves to another by itself when it
    goes away (pick_first over the list; a DNS name with several records works the same as one address).
    Names are resolved here for a list (gRPC lists only IP addresses); TLS still checks the first name."""
    addresses = [a.strip() for a in target.split(",") if a.strip()]
    if len(addresses) <= 1:
        return target, []
    resolved = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError) as err:
            raise UnavailableError(f"coordinator address {address!r} cannot be resolved: {err}") from err
        for family, _, _, _, sockaddr in infos:
            ip = sockaddr[0]
            resolved.append(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
    unique = list(dict.fromkeys(resolved))
    scheme = "ipv6" if all(a.startswith("[") for a in unique) else "ipv4"
    if scheme == "ipv4":
        unique = [a for a in unique if not a.startswith("[")]
    first_host = addresses[0].rpartition(":")[0].strip("[]")
    options: list[tuple[str, Any]] = [("grpc.ssl_target_name_override", first_host)]
    return f"{scheme}:{','.join(unique)}", options


class CoordinatorClient:
    """Calls to one coordinator.

    Args:
        target: host:port of the coordinator; default STREAMPLANE_COORDINATOR or 127.0.0.1:7400.
        timeout_s: deadline of each unary call.
        retries: how many times a read is retried while the coordinator is unavailable (with backoff).
        token: the bearer token, or a callable returning the current one (default: found as
            `streamplane.client.credentials` says, a token file read again when it changes); the event log records
            its subject as who made a change.
        tls: TLS to the coordinator (default: `ClientTls.find()`, from the environment; None there: plaintext).
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        timeout_s: float = 30.0,
        retries: int = 3,
        token: TokenSource = None,
        tls: ClientTls | None = None,
    ) -> None:
        self.target = target or os.environ.get("STREAMPLANE_COORDINATOR") or DEFAULT_COORDINATOR
        self._timeout_s = timeout_s
        first = self.target.split(",")[0].strip()  # a dev stack's token file is named after its address
        self.credentials = token if isinstance(token, Credentials) else Credentials(first, token)
        self._retries = retries
        tls = tls or ClientTls.find()
        self.tls = tls
        """Its TLS settings (None: plaintext): what a producer it opens for the same coordinator uses."""
        grpc_target, options = channel_target(self.target)
        if tls is not None:
            ca, key, chain = tls.files()
            credentials = grpc.ssl_channel_credentials(ca, key, chain)
            self._channel = grpc.secure_channel(grpc_target, credentials, options=CHANNEL_OPTIONS + options)
        else:
            self._channel = grpc.insecure_channel(grpc_target, options=CHANNEL_OPTIONS + options)
        self.topology = pb_grpc.TopologyServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.commitlog = cpb_grpc.CommitLogServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.assigner = apb_grpc.AssignerServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.auth = authpb_grpc.AuthServiceStub(self._channel)  # type: ignore[no-untyped-call]

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata every call carries (the current credential)."""
        return self.credentials.metadata()

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: Callable[..., T], request: Any, *, idempotent: bool = False, timeout_s: float | None = None
    ) -> T:
        attempts = self._retries + 1 if idempotent else 1
        for attempt in range(attempts):
            try:
                return method(request, timeout=timeout_s or self._timeout_s, metadata=self.metadata)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE and attempt + 1 < attempts:
                    time.sleep(min(0.2 * 2**attempt, 2.0))
                    continue
                raise_from_rpc_error(err, self.target)
        raise AssertionError("unreachable")

    def create_token(
        self,
        subject: str,
        role: str,
        *,
        streams: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
        ttl_s: int = 0,
    ) -> tuple[str, int]:
        """A signed token for `subject` with `role` (admins only): (token, expiry in Unix seconds)."""
        request = authpb.CreateTokenRequest(
            subject=subject, role=role, streams=list(streams), groups=list(groups), ttl_s=ttl_s
        )
        got = self._call(self.auth.CreateToken, request)
        return got.token, got.expires_unix_s

    def revoke_token(self, token_id: str, reason: str = "") -> bool:
        """Take a token back (admins only); False if it was revoked already. Every replica refuses it within a
        second, and ends the worker sessions it opened."""
        request = authpb.RevokeTokenRequest(token_id=token_id, reason=reason)
        return bool(self._call(self.auth.RevokeToken, request, idempotent=True).revoked)

    def whoami(self) -> dict[str, Any]:
        """The caller as the coordinator sees it: name, role, streams, groups, and how it was authenticated."""
        got = self._call(self.auth.WhoAmI, authpb.WhoAmIRequest(), idempotent=True)
        return {
            "name": got.name,
            "role": got.role,
            "streams": list(got.streams),
            "groups": list(got.groups),
            "via": got.via,
            "token_id": got.token_id,
            "expires_unix_s": got.expires_unix_s,
        }

    def register_cluster(self, cluster: m.Cluster, *, update_existing: bool = False) -> m.ClusterAt:
        request = pb.RegisterClusterRequest(cluster=convert.cluster_to_pb(cluster), update_existing=update_existing)
        got = self._call(self.topology.RegisterCluster, request)
        return m.ClusterAt(got.version, convert.cluster_from_pb(got.cluster))

    def cluster_health(self, name: str) -> tuple[m.Cluster, list[m.Probe]]:
        """A cluster with its health and reasons, and the health monitor's recent probes (oldest first)."""
        got = self._call(self.topology.ClusterHealth, pb.ClusterHealthRequest(name=name), idempotent=True)
        return convert.cluster_from_pb(got.cluster), [convert.probe_from_pb(name, p) for p in got.probes]

    def cordon_cluster(self, name: str, cordoned: bool = True) -> m.Cluster:
        got = self._call(self.topology.CordonCluster, pb.CordonClusterRequest(name=name, cordoned=cordoned))
        return convert.cluster_from_pb(got)

    def remove_cluster(self, name: str) -> str:
        """Forget a cluster (refused while it holds undrained generations); the event's version."""
        return str(self._call(self.topology.RemoveCluster, pb.RemoveClusterRequest(name=name)).version)

    def set_stream_policy(self, stream: str, policy: m.FailoverPolicy) -> m.Stream:
        request = pb.SetStreamPolicyRequest(stream=stream, policy=convert.failover_policy_to_pb(policy))
        return convert.stream_from_pb(self._call(self.topology.SetStreamPolicy, request).stream)

    def set_fleet_policy(self, policy: m.FleetPolicy) -> m.FleetPolicy:
        return convert.fleet_policy_from_pb(
            self._call(self.topology.SetFleetPolicy, convert.fleet_policy_to_pb(policy))
        )

    def fleet_policy(self) -> m.FleetPolicy:
        got = self._call(self.topology.GetFleetPolicy, pb.GetFleetPolicyRequest(), idempotent=True)
        return convert.fleet_policy_from_pb(got)

    def abandon_generation(self, stream: str, lane: str, generation: int, reason: str) -> m.GenerationAbandoned:
        """Give up a draining or sealed generation whose cluster is gone; the event lists what was lost."""
        request = pb.AbandonGenerationRequest(stream=stream, lane=lane, generation=generation, reason=reason)
        return convert.generation_abandoned_from_pb(self._call(self.topology.AbandonGeneration, request))

    def delete_stream(self, name: str, *, force: bool = False, reason: str = "") -> m.StreamDeletion:
        """Delete a stream and every group's progress on it, then its topics on every cluster; refused while
        it is in use unless `force`. The answer names the topics deleted and those left, with why."""
        request = pb.DeleteStreamRequest(name=name, force=force, reason=reason)
        return convert.stream_deletion_from_pb(self._call(self.topology.DeleteStream, request))

    def list_clusters(self, *, prefix: str = "", health: str = "") -> list[m.Cluster]:
        """Every cluster (with `prefix`, in `health`), page after page."""
        return [c for page in self.cluster_pages(prefix=prefix, health=health) for c in page.clusters]

    def cluster_pages(self, *, prefix: str = "", health: str = "", page_size: int = 0) -> Iterator[m.ClusterPage]:
        """Pages of clusters in name order, fetched one at a time as the caller goes on."""
        return self._pages(
            self.topology.ListClusters,
            lambda token: pb.ListClustersRequest(prefix=prefix, page_size=page_size, page_token=token, health=health),
            lambda got: m.ClusterPage(
                [convert.cluster_from_pb(c) for c in got.clusters], got.next_page_token, got.total
            ),
        )

    def _pages(
        self, method: Callable[..., Any], request: Callable[[str], Any], page: Callable[[Any], T]
    ) -> Iterator[T]:
        """Every page of a paged call, asked for one at a time as the caller goes on: `request(token)` from ""
        until an answer's next_page_token is "" again."""
        token = ""
        while True:
            got = self._call(method, request(token), idempotent=True)
            yield page(got)
            token = got.next_page_token
            if not token:
                return

    def create_stream(
        self, name: str, partitions: int, cluster: str = "", *, topic: m.TopicSettings | None = None
    ) -> m.StreamAt:
        """A stream with its realtime and dlq lanes; `topic` sets its topics' Kafka settings (for good)."""
        request = pb.CreateStreamRequest(
            name=name,
            partitions=partitions,
            cluster=cluster,
            topic=convert.topic_settings_to_pb(topic or m.TopicSettings()),
        )
        return _stream_at(self._call(self.topology.CreateStream, request))

    def describe_stream(self, name: str) -> m.Stream:
        return self.describe_stream_versioned(name).stream

    def describe_stream_versioned(self, name: str) -> m.StreamAt:
        """The stream and the newest event version it reflects: a watch from there misses no later change."""
        return _stream_at(
            self._call(self.topology.DescribeStream, pb.DescribeStreamRequest(name=name), idempotent=True)
        )

    def producer_heartbeat(
        self,
        producer_id: str,
        topology_version: str,
        in_flight: list[tuple[str, str, int]],
        errors: list[m.ClusterErrors] | None = None,
        writes: list[tuple[str, str]] | None = None,
        timeout_s: float | None = None,
    ) -> m.ProducerLease:
        """Keep a producer session: `writes` are the (stream, lane)s it routes to (its token must allow each).
        `timeout_s` bounds each attempt (default: the client's), so that a replica that stopped answering
        costs less than the session's TTL."""
        request = pb.ProducerHeartbeatRequest(
            producer_id=producer_id,
            topology_version=topology_version,
            in_flight=convert.generation_refs_to_pb(in_flight),
            errors=convert.cluster_errors_to_pb(errors or []),
            writes=[pb.LaneRef(stream=st, lane=ln) for st, ln in writes or []],
            declares_writes=writes is not None,
        )
        got = self._call(self.topology.ProducerHeartbeat, request, idempotent=True, timeout_s=timeout_s)
        return m.ProducerLease(got.heartbeat_interval_ms, got.ttl_ms, got.topology_version)

    def close_producer(self, producer_id: str) -> None:
        self._call(self.topology.CloseProducer, pb.CloseProducerRequest(producer_id=producer_id), idempotent=True)

    def list_streams(self, *, prefix: str = "", cluster: str = "") -> list[m.Stream]:
        """Every stream (with `prefix`, on `cluster`), page after page."""
        return [s for page in self.stream_pages(prefix=prefix, cluster=cluster) for s in page.streams]

    def stream_pages(self, *, prefix: str = "", cluster: str = "", page_size: int = 0) -> Iterator[m.StreamPage]:
        """Pages of streams in name order, fetched one at a time as the caller goes on."""
        return self._pages(
            self.topology.ListStreams,
            lambda token: pb.ListStreamsRequest(prefix=prefix, page_size=page_size, page_token=token, cluster=cluster),
            lambda got: m.StreamPage(
                [convert.stream_from_pb(s) for s in got.streams], got.next_page_token, got.total, list(got.unreadable)
            ),
        )

    def add_lane(self, stream: str, lane: str, priority: int, partitions: int = 0, cluster: str = "") -> m.StreamAt:
        request = pb.AddLaneRequest(stream=stream, lane=lane, priority=priority, partitions=partitions, cluster=cluster)
        return _stream_at(self._call(self.topology.AddLane, request))

    def failover(
        self, stream: str, lane: str, target_cluster: str, partitions: int = 0, reason: str = ""
    ) -> m.FailoverResult:
        request = pb.FailoverRequest(
            stream=stream, lane=lane, target_cluster=target_cluster, partitions=partitions, reason=reason
        )
        got = self._call(self.topology.Failover, request)
        return m.FailoverResult(
            got.version, convert.generation_from_pb(got.previous), convert.generation_from_pb(got.current)
        )

    def describe_group(self, group: str) -> m.GroupDescription:
        got = self._call(self.assigner.DescribeGroup, apb.DescribeGroupRequest(group=group), idempotent=True)
        return convert.group_from_pb(got)

    def delete_group(self, group: str, *, force: bool = False, reason: str = "") -> m.GroupDeleted:
        """Remove a group and everything it kept; refused while members are live unless `force`."""
        request = apb.DeleteGroupRequest(group=group, force=force, reason=reason)
        return convert.group_deleted_from_pb(self._call(self.assigner.DeleteGroup, request))

    def rewind_group(
        self,
        group: str,
        stream: str,
        target: m.RewindTarget,
        *,
        lane: str = "",
        dry_run: bool = False,
        force: bool = False,
    ) -> m.RewindPlan:
        """Send a live group back to a time, the earliest records kept, or offsets, over every generation of
        `stream` (or one lane); `dry_run` only plans. FailedPreconditionError when some generation cannot be
        reprocessed, unless `force`."""
        request = convert.rewind_request_to_pb(group, stream, target, lane=lane, dry_run=dry_run, force=force)
        answer = self._call(self.assigner.RewindGroup, request, idempotent=dry_run)
        return convert.rewind_plan_from_pb(answer, group, stream, target)

    def create_window_group(
        self,
        group: str,
        stream: str,
        *,
        from_ms: int,
        until_ms: int = 0,
        lane: str = "",
        force: bool = False,
        dry_run: bool = False,
    ) -> m.Window:
        """Make a side group that reads [from_ms, until_ms) of `stream` (until_ms 0: now) beside the live
        groups; its consumers' `run()` returns once the window is processed. `dry_run` only plans."""
        request = apb.CreateWindowGroupRequest(
            group=group,
            stream=stream,
            lane=lane,
            from_unix_ms=from_ms,
            until_unix_ms=until_ms,
            force=force,
            dry_run=dry_run,
        )
        answer = self._call(self.assigner.CreateWindowGroup, request, idempotent=dry_run)
        return convert.window_from_pb(answer, group, stream)

    def check_lease(self, group: str, lease_id: str, epoch: int) -> None:
        """Raise FencedError unless the lease is still held at `epoch`."""
        request = apb.CheckLeaseRequest(group=group, lease_id=lease_id, epoch=epoch)
        self._call(self.assigner.CheckLease, request, idempotent=True)

    def open_session(self, hello: m.Hello, outgoing: Iterator[m.Heartbeat | m.Release | m.Renew]) -> SessionCall:
        """Open a worker session: `hello`, then what `outgoing` yields, go to the coordinator."""
        messages = (convert.worker_message_to_pb(x) for x in itertools.chain((hello,), outgoing))
        return SessionCall(self.assigner.Session(messages, metadata=self.metadata), self.target)

    def commit(self, group: str, commit: m.LeaseCommit) -> m.CommitOutcome:
        """Record progress of a lease (idempotent, so it is retried while the coordinator is unavailable)."""
        got = self._call(self.commitlog.Commit, convert.commit_to_pb(group, commit), idempotent=True)
        return m.CommitOutcome(
            commit.lease_id, got.low_watermark, tuple(got.exhausted), copies=convert.copies_from_pb(got.copies)
        )

    def commit_batch(self, group: str, commits: list[m.LeaseCommit], *, session_id: str = "") -> list[m.CommitOutcome]:
        """Commit many leases of one group in one call; each lease's outcome says whether it was recorded.
        `session_id`: the worker session holding the leases (required by a coordinator that checks credentials,
        for leases; a commit from another session is fenced)."""
        request = cpb.CommitBatchRequest(
            group=group, commits=[convert.commit_to_pb("", c) for c in commits], session_id=session_id
        )
        got = self._call(self.commitlog.CommitBatch, request, idempotent=True)
        return [convert.outcome_from_pb(r) for r in got.results]

    def progress(self, group: str, lease_id: str, max_ranges: int = 1000) -> m.Progress:
        request = cpb.GetProgressRequest(group=group, lease_id=lease_id, max_ranges=max_ranges)
        return convert.progress_from_pb(self._call(self.commitlog.GetProgress, request, idempotent=True))

    def progress_batch(self, group: str, lease_ids: Sequence[str], max_ranges: int = 100_000) -> list[m.Progress]:
        """One GetProgressBatch: the progress of the first of `lease_ids` that fit in a call, in their order (up to
        m.MAX_PROGRESS_LEASES leases and `max_ranges` done ranges; at least the first, cut at `max_ranges` as
        by `progress`); ask again from the first one left out. UnimplementedError from a coordinator older than
        the call."""
        asked = list(lease_ids[: m.MAX_PROGRESS_LEASES])
        request = cpb.GetProgressBatchRequest(group=group, lease_ids=asked, max_ranges=max_ranges)
        got = self._call(self.commitlog.GetProgressBatch, request, idempotent=True)
        if asked and not got.progress:  # the first lease is always listed: a coordinator that does not is broken
            raise StreamplaneError(f"the coordinator listed none of the {len(asked)} leases' progress asked")
        return [convert.progress_from_pb(x) for x in got.progress]

    def due_retries(self, group: str, lease_id: str, epoch: int, limit: int = 1000) -> list[m.RetryState]:
        request = cpb.DueRetriesRequest(group=group, lease_id=lease_id, epoch=epoch, limit=limit)
        got = self._call(self.commitlog.DueRetries, request, idempotent=True)
        return [convert.retry_state_from_pb(r) for r in got.due]

    def lag(self, group: str = "", stream: str = "", lane: str = "", *, partitions: bool = True) -> m.Lag:
        """Lag of a group (of every group that committed, when empty); without `partitions`, the lanes' totals
        only (a small answer, whatever the group's size)."""
        request = cpb.GetLagRequest(group=group, stream=stream, lane=lane, lanes_only=not partitions)
        return convert.lag_from_pb(self._call(self.commitlog.GetLag, request, idempotent=True))

    def lag_pages(self, group: str = "", stream: str = "", lane: str = "", page_size: int = 1000) -> Iterator[m.Lag]:
        """Per-partition lag page by page (no lanes' totals), fetched one at a time as the caller goes on."""
        return self._pages(
            self.commitlog.GetLag,
            lambda token: cpb.GetLagRequest(
                group=group, stream=stream, lane=lane, page_size=page_size, page_token=token
            ),
            convert.lag_from_pb,
        )

    def reject_pages(
        self,
        stream: str,
        *,
        group: str = "",
        lane: str = "",
        since_ms: int = 0,
        page_size: int = 100,
        purged: bool = False,
    ) -> Iterator[m.RejectPage]:
        """A stream's rejected records (one group's, or every group's), page by page as the caller goes on; with
        `since_ms`, only those rejected then or later; purged ones too with `purged`."""
        return self._pages(
            self.commitlog.ListRejects,
            lambda token: cpb.ListRejectsRequest(
                stream=stream,
                group=group,
                lane=lane,
                since_unix_ms=since_ms,
                page_size=page_size,
                page_token=token,
                include_purged=purged,
            ),
            convert.reject_page_from_pb,
        )

    def purge_rejects(self, stream: str, *, before_ms: int, group: str = "", dry_run: bool = False) -> Iterator[int]:
        """Purge a stream's rejects recorded before `before_ms` (one group's, or every group's), a batch a call:
        yields how many each batch purged (would purge, with `dry_run`), as it goes."""
        token = ""
        while True:
            request = cpb.PurgeRejectsRequest(
                stream=stream, group=group, before_unix_ms=before_ms, page_token=token, dry_run=dry_run
            )
            got = self._call(self.commitlog.PurgeRejects, request, idempotent=True)
            yield got.purged
            token = got.next_page_token
            if not token:
                return

    def claim_redrive(
        self,
        stream: str,
        group: str,
        owner: str,
        *,
        to_lane: str = "realtime",
        since_ms: int = 0,
        until_ms: int = 0,
        cursor: str = "",
        batch_size: int = 0,
        in_flight: int = 0,
        complete_batch_id: int = 0,
        left: Iterable[tuple[m.PartitionRef, int]] = (),
    ) -> m.RedriveClaim:
        """The next batch of a dlq redrive run `owner`, which holds `in_flight` batches not completed (see
        `streamplane.client.redrive`); its batch `complete_batch_id` (0: none) completed first, but those
        `left`, which stay pending (only a coordinator whose claims say `completes` does that)."""
        request = cpb.ClaimRedriveRequest(
            stream=stream,
            group=group,
            owner=owner,
            to_lane=to_lane,
            since_unix_ms=since_ms,
            until_unix_ms=until_ms,
            cursor=cursor,
            batch_size=batch_size,
            in_flight=in_flight,
            packed=True,
            complete_batch_id=complete_batch_id,
        )
        convert.partition_offsets_to_pb(left, request.left)
        return convert.redrive_claim_from_pb(self._call(self.commitlog.ClaimRedrive, request, idempotent=True))

    def complete_redrive(
        self,
        stream: str,
        group: str,
        owner: str,
        left: Iterable[tuple[m.PartitionRef, int]] = (),
        batch_id: int = 0,
    ) -> int:
        """The run's claimed batch `batch_id` (0: its oldest) is in the target lane: its rejects are marked
        redriven, but those `left` (the run could not read them), which stay pending; how many."""
        request = cpb.CompleteRedriveRequest(stream=stream, group=group, owner=owner, batch_id=batch_id)
        convert.partition_offsets_to_pb(left, request.left)
        return int(self._call(self.commitlog.CompleteRedrive, request, idempotent=True).redriven)

    def configure_group(
        self,
        group: str,
        lane: str = "",
        max_attempts: int = 0,
        lag_target_ms: int = 0,
        expire_after_ms: int = 0,
        *,
        where: str | None = None,
        max_slices: int = 0,
        split: tuple[str, int] | None = None,
    ) -> None:
        """A lane's max attempts and/or time-lag target for the group (0 leaves a setting; lag_target_ms -1:
        no target), and/or how long the group may stay inactive before it expires (expire_after_ms -1: never),
        and/or the record predicate every member must filter with (None leaves it; "" removes it), and/or the
        most slices a partition is split into (0 leaves it), and/or a split: (partition id
        stream/lane/g<generation>/p<partition>, slices; 1 merges it again)."""
        request = apb.ConfigureGroupRequest(
            group=group,
            lane=lane,
            max_attempts=max_attempts,
            lag_target_ms=lag_target_ms,
            expire_after_ms=expire_after_ms,
            where=where,
            max_slices=max_slices,
            split_partition=split[0] if split else "",
            split_slices=split[1] if split else 0,
        )
        self._call(self.assigner.ConfigureGroup, request)

    def watch_topology(self, from_version: str = "", *, follow: bool = True) -> Iterator[m.TopologyEvent]:
        """Every event after `from_version`, then new ones as they commit, until the caller stops iterating.

        With `follow=False`, the iteration ends once the log's events are delivered (`events` without --follow):
        the coordinator ends the call at the log's head, however long reading it takes.
        """
        request = pb.WatchTopologyRequest(from_version=from_version, until_head=not follow)
        call = self.topology.WatchTopology(request, metadata=self.metadata)
        return self._follow(call, convert.event_from_pb)

    def watch_group(self, group: str, from_version: str = "", *, follow: bool = True) -> Iterator[m.GroupChanged]:
        """Every event of one group's log after `from_version` (members joining and leaving, leases granted,
        revoking, revoked, released), then new ones as they commit; `follow` as in `watch_topology`."""
        request = apb.WatchGroupRequest(group=group, from_version=from_version, until_head=not follow)
        call = self.assigner.WatchGroup(request, metadata=self.metadata)
        return self._follow(call, convert.group_event_from_pb)

    def _follow(self, call: Any, decode: Callable[[Any], T]) -> Iterator[T]:
        try:
            for message in call:
                yield decode(message)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                raise_from_rpc_error(err, self.target)
        finally:
            call.cancel()


def _stream_at(got: pb.StreamResponse) -> m.StreamAt:
    return m.StreamAt(got.version, convert.stream_from_pb(got.stream))


class SessionCall:
    """One open worker session: a welcome, then typed events; gRPC errors come out as streamplane errors."""

    def __init__(self, call: Any, target: str) -> None:
        self._call, self._target, self._cancelled = call, target, False

    def welcome(self) -> m.Welcome:
        """The coordinator's first message; raises its error (unknown stream, duplicate worker id, ...)."""
        try:
            first = next(self._call)
        except grpc.RpcError as err:
            raise error_from_rpc_error(err, self._target) from err
        welcome = convert.welcome_from_pb(first)
        if welcome is None:
            raise StreamplaneError("the coordinator did not start the session with a welcome")
        return welcome

    def events(self) -> Iterator[m.SessionEvent]:
        """Grants, revokes and seals; ends when cancelled here, raises the coordinator's error otherwise."""
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[m.SessionEvent]]:
        """The events as they come, one list per message (a change's grants come together)."""
        try:
            for message in self._call:
                yield list(convert.session_events_from_pb(message))
        except grpc.RpcError as err:
            if self._cancelled and err.code() == grpc.StatusCode.CANCELLED:
                return
            raise error_from_rpc_error(err, self._target) from err

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()
