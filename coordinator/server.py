"""The coordinator process: open the store, serve the gRPC services (with health and reflection), stop cleanly.

`streamplane coordinator` runs it in the foreground and prints `coordinator=HOST:PORT` once it serves.
"""

from __future__ import annotations

import os
from concurrent import futures
from dataclasses import dataclass

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.assigner import Assigner, AssignerConfig
from streamplane.coordinator.assigner_servicer import AssignerServicer
from streamplane.coordinator.cluster_admin import ClusterAdmin, RoutingAdmin
from streamplane.coordinator.commitlog_servicer import CommitLogServicer, lag
from streamplane.coordinator.metrics import LAG, MetricsInterceptor, serve_metrics
from streamplane.coordinator.sealing import Sealer, SealingConfig
from streamplane.coordinator.servicer import TopologyServicer
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology import Topology
from streamplane.errors import UnavailableError
from streamplane.process import block_stop_signals, die_with_parent, wait_for_stop
from streamplane.v1 import (
    assigner_pb2,
    assigner_pb2_grpc,
    commitlog_pb2,
    commitlog_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
SERVICE_NAMES = (
    topology_pb2.DESCRIPTOR.services_by_name["TopologyService"].full_name,
    assigner_pb2.DESCRIPTOR.services_by_name["AssignerService"].full_name,
    commitlog_pb2.DESCRIPTOR.services_by_name["CommitLogService"].full_name,
)


@dataclass
class RunningCoordinator:
    """A started coordinator: its server, address and store."""

    server: grpc.Server
    address: str
    db: Database
    health: health.HealthServicer
    assigner: Assigner
    sealer: Sealer

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop the assignment loop, then serving (open streams end: their sessions are left for the next
        coordinator to resume, not ended), then close the store."""
        self.health.enter_graceful_shutdown()
        self.assigner.stop()
        self.server.stop(grace_s).wait()
        self.sealer.stop()
        self.db.close()


def start(
    db: Database,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    admin: ClusterAdmin | None = None,
    assigner_config: AssignerConfig | None = None,
    sealing_config: SealingConfig | None = None,
    max_workers: int = 512,
    clock: Clock = SYSTEM,
) -> RunningCoordinator:
    """Start the gRPC server on host:port (0 picks a free port) over an open store; `clock` is its time."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=[MetricsInterceptor()],
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)],
    )
    topology = Topology(db, admin or RoutingAdmin(), clock)
    topology_pb2_grpc.add_TopologyServiceServicer_to_server(
        TopologyServicer(topology, sealing_config, clock=clock), server
    )
    assigner = Assigner(db, assigner_config, clock=clock)
    sealer = Sealer(db, topology.admin, lambda: assigner.is_leader, sealing_config, clock=clock)
    commitlog_pb2_grpc.add_CommitLogServiceServicer_to_server(CommitLogServicer(db, clock=clock), server)
    LAG.source = lambda: lag(db, "", now_ms=clock.now_ms())
    assigner_pb2_grpc.add_AssignerServiceServicer_to_server(AssignerServicer(assigner), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpc's way of saying the address could not be bound
        bound = 0
    if bound == 0:
        raise UnavailableError(f"cannot listen on {host}:{port}: the address is in use or not available")
    server.start()
    assigner.start()
    sealer.start()
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    address = f"{host}:{bound}"
    log.info("coordinator.started", address=address, store=db.driver)
    return RunningCoordinator(server, address, db, health_servicer, assigner, sealer)


def serve_forever(
    config: StoreConfig,
    *,
    host: str,
    port: int,
    metrics_port: int = 0,
    assigner_config: AssignerConfig | None = None,
    parent_pid: int = 0,
) -> int:
    """Run a coordinator until SIGINT or SIGTERM; print `coordinator=HOST:PORT` once it serves.

    With `metrics_port`, Prometheus metrics are served on host:metrics_port/metrics. With `parent_pid` (the
    local stack's supervisor), it stops when that process is gone.
    """
    block_stop_signals()
    if parent_pid and not die_with_parent(parent_pid):
        return 1
    db = open_store(config)
    try:
        running = start(db, host=host, port=port, assigner_config=assigner_config)
    except Exception:
        db.close()
        raise
    if metrics_port:
        serve_metrics(host, metrics_port)
    print(f"coordinator={running.address} store={db.driver}", flush=True)
    log.info("coordinator.stopping", signal=wait_for_stop(lambda: bool(parent_pid) and os.getppid() != parent_pid))
    running.stop()
    return 0
