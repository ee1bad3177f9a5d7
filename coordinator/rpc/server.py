"""The coordinator process: open the store, serve the gRPC services (with health and reflection), stop cleanly.

`streamplane coordinator` runs it in the foreground and prints `coordinator=HOST:PORT` once it serves.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import threading
from collections.abc import Collection
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.commitlog.lag_sweep import LagSweeper
from streamplane.coordinator.commitlog.service import CommitLog
from streamplane.coordinator.console import Console
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.lifecycle import REAP_EVERY_MS, GroupReaper
from streamplane.coordinator.groups.sessions.host import SessionHost
from streamplane.coordinator.groups.sessions.hub import SessionHub
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.loop import BackgroundLoop
from streamplane.coordinator.rpc.assigner_servicer import AssignerServicer
from streamplane.coordinator.rpc.auth_servicer import AuthServicer
from streamplane.coordinator.rpc.call_metrics import MetricsInterceptor
from streamplane.coordinator.rpc.commitlog_servicer import CommitLogServicer
from streamplane.coordinator.rpc.event_loop import EventLoopThread
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.rpc.limits import HELLO_TIMEOUT_S, MAX_STREAMS, StreamLimits
from streamplane.coordinator.rpc.metrics import FLEET, LAG, serve_metrics
from streamplane.coordinator.rpc.topology_servicer import TopologyServicer
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology.autopilot import Autopilot, AutopilotConfig
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin, KafkaAdmin, RoutingAdmin
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import InvalidArgumentError, UnavailableError
from streamplane.process import block_stop_signals, die_with_parent, tune_collector, wait_for_stop
from streamplane.rpc import add_servicer
from streamplane.v1 import (
    assigner_pb2,
    assigner_pb2_grpc,
    auth_pb2,
    auth_pb2_grpc,
    commitlog_pb2,
    commitlog_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
STOP_DEADLINE_S = 3.0
"""How long a stopping coordinator process may take before it ends regardless."""
STOP_CANCEL_S = 0.5
"""After the grace period, how long stopping waits for cancelled calls before it goes on regardless (gRPC
sometimes never reports the end of a call that received undecodable messages)."""
STREAMS_PER_PRINCIPAL = 10_000
"""Streams (worker sessions, watches) one principal may hold open (a worker holds one session): a fleet whose
workers share one identity fits, one client opening streams in a loop does not take them all."""
UNARY_THREADS = 64
"""Threads serving unary calls (each a store transaction or two); streams take none."""
SERVICE_NAMES = (
    topology_pb2.DESCRIPTOR.services_by_name["TopologyService"].full_name,
    assigner_pb2.DESCRIPTOR.services_by_name["AssignerService"].full_name,
    commitlog_pb2.DESCRIPTOR.services_by_name["CommitLogService"].full_name,
    auth_pb2.DESCRIPTOR.services_by_name["AuthService"].full_name,
)


@dataclass
class RunningCoordinator:
    """A started coordinator: its server, address and store."""

    server: grpc.aio.Server
    loop: EventLoopThread
    address: str
    db: Database
    health: health.aio.HealthServicer
    assigner: Assigner
    sessions: SessionHost
    sealer: Sealer
    autopilot: Autopilot
    reaper: GroupReaper
    lag_sweep: BackgroundLoop
    console: Console | None = None

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop the assignment loop, then serving (open streams end: their sessions are left for the next
        coordinator to resume, not ended), then close the store. Bounded: calls still running after the grace
        period are cancelled, and stopping goes on STOP_CANCEL_S later whatever they do."""
        try:
            self.loop.run(self.health.enter_graceful_shutdown(), STOP_CANCEL_S)
        except Exception as err:
            log.warning("coordinator.health_shutdown_failed", error=str(err))
        if self.console is not None:
            self.console.stop()
        self.sessions.stop()  # first: the streams that end as the server stops leave their sessions as they are
        self.assigner.stop()
        try:
            self.loop.run(self.server.stop(grace_s), grace_s + STOP_CANCEL_S)
        except Exception:
            log.warning("coordinator.stop_timeout", grace_s=grace_s)
        self.loop.stop(STOP_CANCEL_S)
        self.sealer.stop()
        self.autopilot.stop()
        self.reaper.stop()
        self.lag_sweep.stop()
        for collector in (LAG, FLEET):  # scrapes after this see no series from a closed store
            collector.source = None
        self.db.close()


LAG_SWEEP_MS = 1000
"""How often the lag sweep reads its pages (see `lag_sweep`): the metrics' and console's lag is that old at
least, and a pass's pages long at most."""


@dataclass(frozen=True)
class ConsoleSettings:
    """The web console: off unless a coordinator is given these (`--console-port`)."""

    port: int = 0
    """0 picks a free port."""
    actions: bool = False
    """Operator actions (failover, drain, freeze) from the console; read-only without."""
    sample_ms: int = 5000
    """How often the lag charts take a sample."""


@dataclass(frozen=True)
class ServerTls:
    """The coordinator's TLS: its certificate chain and key (PEM files); with `client_ca`, every client must
    present a certificate signed by it (mutual TLS; the certificate's common name is its identity)."""

    cert_file: Path
    key_file: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        def read(path: Path, what: str) -> bytes:
            try:
                return path.read_bytes()
            except OSError as err:
                raise InvalidArgumentError(f"{what} {path} cannot be read: {err.strerror}") from err

        chain = read(self.cert_file, "--tls-cert")
        key = read(self.key_file, "--tls-key")
        ca = read(self.client_ca, "--tls-client-ca") if self.client_ca else None
        return grpc.ssl_server_credentials([(key, chain)], root_certificates=ca, require_client_auth=ca is not None)


def is_loopback(host: str) -> bool:
    """Whether `host` listens only on this machine (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def start(
    db: Database,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    admin: ClusterAdmin | None = None,
    assigner_config: AssignerConfig | None = None,
    sealing_config: SealingConfig | None = None,
    max_workers: int = UNARY_THREADS,
    max_streams: int = MAX_STREAMS,
    clock: Clock = SYSTEM,
    guard: Guard | None = None,
    tls: ServerTls | None = None,
    control_endpoints: Collection[str] = (),
    hello_timeout_s: float = HELLO_TIMEOUT_S,
    streams_per_principal: int = STREAMS_PER_PRINCIPAL,
    autopilot_config: AutopilotConfig | None = None,
    console: ConsoleSettings | None = None,
    reap_every_ms: int = REAP_EVERY_MS,
    kafka_settings: KafkaSettings = PLAINTEXT,
) -> RunningCoordinator:
    """Start the gRPC server on host:port (0 picks a free port) over an open store; `clock` is its time.

    Unary calls run on `max_workers` threads; streams (at most `max_streams` open) on one event loop thread.
    `guard` authenticates and authorizes every call (default: authentication off); `tls` serves TLS;
    `control_endpoints` are the local clusters' control channels a registration may name; `kafka_settings` the
    TLS and SASL settings a cluster may name (`config_ref`), with which every connection to it is made;
    `console` serves the web console on host:console.port (over TLS when `tls` is given).
    """
    guard = guard or Guard(clock=clock)
    guard.attach(db)
    limits = StreamLimits(max_streams, streams_per_principal, guard.name_of)
    admin = admin or RoutingAdmin(KafkaAdmin(settings=kafka_settings))
    topology = Topology(db, admin, clock, control_endpoints=control_endpoints, kafka_settings=kafka_settings)
    assigner = Assigner(db, assigner_config, clock=clock)
    sessions = SessionHost(db, assigner_config, replica_id=assigner.replica_id, clock=clock)
    autopilot = Autopilot(
        topology, lambda: assigner.is_leader, autopilot_config, clock=clock, replica=assigner.replica_id
    )
    sealer = Sealer(db, topology.admin, lambda: assigner.is_leader, sealing_config, clock=clock)
    commit_log = CommitLog(db, clock=clock, admin=topology.admin)
    reaper = GroupReaper(db, lambda: assigner.is_leader, clock=clock, every_ms=reap_every_ms)
    lag_sweeper = LagSweeper(db, clock)
    lag_sweep = BackgroundLoop("lag-sweep", lag_sweeper.step, interval_ms=LAG_SWEEP_MS, clock=clock)
    loop = EventLoopThread()
    health_servicer = health.aio.HealthServicer()

    async def serve() -> tuple[grpc.aio.Server, int]:
        """Build the server and bind its port (on the loop: an asyncio server belongs to one loop)."""
        server = grpc.aio.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
            interceptors=[MetricsInterceptor(), limits],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
                # clients ping every 2 s when idle, to leave a stopped replica (client/coordinator.py)
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
                ("grpc.http2.max_ping_strikes", 0),
            ],
        )
        add_servicer(
            topology_pb2_grpc.add_TopologyServiceServicer_to_server,
            TopologyServicer(topology, sealer, guard=guard, probes=autopilot.probes),
            server,
        )
        add_servicer(
            commitlog_pb2_grpc.add_CommitLogServiceServicer_to_server,
            CommitLogServicer(commit_log, guard=guard),
            server,
        )
        hub = SessionHub(sessions, loop.loop)
        add_servicer(
            assigner_pb2_grpc.add_AssignerServiceServicer_to_server,
            AssignerServicer(assigner, hub, guard=guard, hello_timeout_s=hello_timeout_s, admin=topology.admin),
            server,
        )
        add_servicer(auth_pb2_grpc.add_AuthServiceServicer_to_server, AuthServicer(guard, clock=clock), server)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        try:
            if tls is not None:
                return server, server.add_secure_port(f"{host}:{port}", tls.credentials())
            return server, server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # grpc's way of saying the address could not be bound
            return server, 0

    try:
        server, bound = loop.run(serve())
    except BaseException:
        loop.stop()
        raise
    if bound == 0:
        loop.stop()
        raise UnavailableError(f"cannot listen on {host}:{port}: the address is in use or not available")
    LAG.source = lambda: lag_sweeper.lag(clock.now_ms())  # a scrape reads no commit log: the sweep did
    FLEET.source = lambda: (topology.list_clusters(), topology.generation_counts(), topology.fleet_policy())
    web = None
    if console is not None:
        try:
            web = Console(
                topology,
                assigner,
                guard,
                host=host,
                port=console.port,
                actions=console.actions,
                sample_ms=console.sample_ms,
                clock=clock,
                probes=autopilot.probes,
                lag=lambda: lag_sweeper.lag(clock.now_ms()),
                tls=(tls.cert_file, tls.key_file) if tls else None,
            )
        except OSError as err:
            loop.stop()
            raise UnavailableError(f"cannot serve the console on {host}:{console.port}: {err.strerror}") from err
    sessions.start()  # before serving: a session's first heartbeat finds the replica's writer running
    assigner.start()
    loop.run(server.start())
    sealer.start()
    autopilot.start()
    reaper.start()
    lag_sweep.start()
    if web is not None:
        web.start()

    async def serving() -> None:
        for name in ("", *SERVICE_NAMES):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    loop.run(serving())
    address = f"{host}:{bound}"
    log.info("coordinator.started", address=address, store=db.driver, tls=tls is not None, auth=guard.enabled)
    return RunningCoordinator(
        server, loop, address, db, health_servicer, assigner, sessions, sealer, autopilot, reaper, lag_sweep, web
    )


def reload_kafka_settings(settings: KafkaSettings, path: str) -> None:
    """SIGHUP: read the Kafka settings file again and use it from now on (a rotated password or certificate);
    one that does not load is refused, in the log, and the settings in use stay. Never raises: it runs in the
    loop that waits for the process's stop."""
    try:
        changed = settings.take(KafkaSettings.load(path))
    except InvalidArgumentError as err:
        log.error("kafka_settings.reload_refused", file=path, error=err.message, kept=list(settings.refs))
    except Exception:
        log.exception("kafka_settings.reload_failed", file=path, kept=list(settings.refs))
    else:
        log.info("kafka_settings.reloaded", file=path, refs=list(settings.refs), changed=changed)


def serve_forever(
    config: StoreConfig,
    *,
    host: str,
    port: int,
    metrics_port: int | None = None,
    assigner_config: AssignerConfig | None = None,
    parent_pid: int = 0,
    guard: Guard | None = None,
    tls: ServerTls | None = None,
    control_endpoints: Collection[str] = (),
    insecure: bool = False,
    console: ConsoleSettings | None = None,
    kafka_settings: KafkaSettings = PLAINTEXT,
    kafka_settings_file: str = "",
) -> int:
    """Run a coordinator until SIGINT or SIGTERM; print `coordinator=HOST:PORT` once it serves. With
    `kafka_settings_file` (what `kafka_settings` were read from), SIGHUP reads it again (`reload_kafka_settings`).

    With `metrics_port`, Prometheus metrics are served on host:metrics_port/metrics (0: a free port, named on
    that line as `metrics=HOST:PORT`). With `parent_pid` (the
    local stack's supervisor), it stops when that process is gone. Beyond loopback it needs TLS and
    authentication unless `insecure`.
    """
    if not is_loopback(host) and not insecure:
        if tls is None:
            raise InvalidArgumentError(
                f"refusing to listen on {host} without TLS: pass --tls-cert and --tls-key (or --insecure)"
            )
        if guard is None or not guard.enabled:
            raise InvalidArgumentError(
                f"refusing to listen on {host} without authentication: pass --token-key-file, or --tls-client-ca "
                "with --identities (or --insecure)"
            )
    block_stop_signals(hangup=bool(kafka_settings_file))
    if parent_pid and not die_with_parent(parent_pid):
        return 1
    db = open_store(config)
    try:
        running = start(
            db,
            host=host,
            port=port,
            assigner_config=assigner_config,
            guard=guard,
            tls=tls,
            control_endpoints=control_endpoints,
            console=console,
            kafka_settings=kafka_settings,
        )
    except Exception:
        db.close()
        raise
    tune_collector()
    served = f" console={running.console.url}" if running.console else ""
    if metrics_port is not None:
        try:
            served += f" metrics={host}:{serve_metrics(host, metrics_port)}"
        except OSError as e:
            running.stop(grace_s=0)
            raise UnavailableError(f"cannot serve metrics on {host}:{metrics_port}: {e.strerror or e}") from e
    print(f"coordinator={running.address} store={db.driver} replica={running.assigner.replica_id}{served}", flush=True)
    reload = (lambda: reload_kafka_settings(kafka_settings, kafka_settings_file)) if kafka_settings_file else None
    stopped_by = wait_for_stop(lambda: bool(parent_pid) and os.getppid() != parent_pid, on_hangup=reload)
    log.info("coordinator.stopping", signal=stopped_by)
    watchdog = threading.Timer(STOP_DEADLINE_S, _exit_now, args=(1, "coordinator.stop_deadline_passed"))
    watchdog.daemon = True
    watchdog.start()
    running.stop(grace_s=1.0)  # open streams end now: their workers resume their sessions at the next coordinator
    _exit_now(0, "coordinator.stopped")


def _exit_now(code: int, event: str) -> NoReturn:
    """End the process now. A handler thread that gRPC could not cancel (a call stuck in a request iterator)
    would otherwise hold the interpreter's exit, which joins every server thread; the store is closed by now,
    or, past the deadline, left for its next opener to recover, as after a crash."""
    log.info(event)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
