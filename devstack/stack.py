"""`streamplane dev`: the coordinator on the embedded store plus N local Kafka clusters, in the foreground.

Two engines: librdkafka's mock cluster (`mock`, the default: in memory, starts in a second) or real Apache
Kafka brokers (`kafka`: one KRaft broker per cluster in its own JVM, its log under the data dir, so records
survive restarts). Clusters are registered as local-a, local-b, ...; their ports change on every start, so
a restart re-registers them with the new addresses and re-creates the topics of every known generation. The
coordinator's state (in the data dir) survives restarts, including kill -9.
"""

from __future__ import annotations

import json
import os
import queue
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from streamplane.coordinator import server
from streamplane.coordinator.assigner import AssignerConfig
from streamplane.coordinator.cluster_admin import RoutingAdmin
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology import Topology
from streamplane.devstack.kafka import USERS, KafkaBroker
from streamplane.errors import InvalidArgumentError
from streamplane.model import ADMIN_KAFKA, ADMIN_LOCAL, DRAINED, Cluster
from streamplane.process import block_stop_signals, wait_for_stop

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 30.0
ACTOR = "streamplane-dev"
ENGINES = ("mock", "kafka")
SECURITY = ("plaintext", "sasl_ssl")


def cluster_names(count: int) -> list[str]:
    """local-a, local-b, ... (at most 26)."""
    if not 1 <= count <= 26:
        raise InvalidArgumentError(f"--clusters must be between 1 and 26, not {count}")
    return [f"local-{letter}" for letter in string.ascii_lowercase[:count]]


@dataclass
class LocalCluster:
    name: str
    bootstrap_servers: str
    control_endpoint: str
    process: subprocess.Popen[str] | None = None  # the mock engine's cluster
    broker: KafkaBroker | None = None  # the kafka engine's broker

    def alive(self) -> bool:
        if self.broker is not None:
            return self.broker.alive()
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class LocalStack:
    """The local stack; `start()` brings it up, `stop()` ends every child."""

    data_dir: Path
    clusters: int = 2
    port: int = 7400
    host: str = "127.0.0.1"
    brokers: int = 3
    assigner_config: AssignerConfig | None = None
    engine: str = "mock"
    kafka_security: str = "plaintext"
    """'sasl_ssl' adds a SCRAM/PLAIN listener over TLS to each real broker (USERS, a generated certificate)."""
    local: list[LocalCluster] = field(default_factory=list)
    coordinator: server.RunningCoordinator | None = None

    def start(self) -> None:
        names = cluster_names(self.clusters)
        if self.engine not in ENGINES:
            raise InvalidArgumentError(f"--engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.kafka_security not in SECURITY:
            raise InvalidArgumentError(
                f"--kafka-security must be one of {', '.join(SECURITY)}, not {self.kafka_security!r}"
            )
        if self.kafka_security != "plaintext" and self.engine != "kafka":
            raise InvalidArgumentError("--kafka-security sasl_ssl needs --engine kafka (the mock cluster has no SASL)")
        try:
            if self.engine == "kafka":
                self._start_brokers(names)
            else:
                self._start_clusters(names)
            db = open_store(StoreConfig(driver="embedded", data_dir=Path(self.data_dir)))
            try:
                self.coordinator = server.start(
                    db, host=self.host, port=self.port, assigner_config=self.assigner_config
                )
            except Exception:
                db.close()
                raise
            self._register_and_reconcile(Topology(db, RoutingAdmin()))
        except BaseException:
            self.stop()
            raise

    def _start_clusters(self, names: list[str]) -> None:
        for name in names:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streamplane.devstack.mockcluster",
                    "--name",
                    name,
                    "--brokers",
                    str(self.brokers),
                    "--parent-pid",
                    str(os.getpid()),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.local.append(LocalCluster(name, "", "", proc))
        deadline = time.monotonic() + START_TIMEOUT_S
        for cluster in self.local:
            line = _readline_until(cluster.process, deadline)
            if not line:
                raise RuntimeError(
                    f"local cluster {cluster.name} did not start within {START_TIMEOUT_S:.0f} s "
                    f"(exit code {cluster.process.poll()})"
                )
            info = json.loads(line)
            cluster.bootstrap_servers, cluster.control_endpoint = info["bootstrap_servers"], info["control_endpoint"]

    def _start_brokers(self, names: list[str]) -> None:
        """One real broker per cluster, started side by side (each JVM takes seconds)."""
        errors: list[BaseException] = []

        def start(cluster: LocalCluster) -> None:
            try:
                assert cluster.broker is not None
                cluster.broker.start()
                cluster.bootstrap_servers = cluster.broker.bootstrap_servers
            except BaseException as err:  # reported below, after every broker had its chance
                errors.append(err)

        for name in names:
            broker = KafkaBroker(Path(self.data_dir) / "kafka" / name, sasl=self.kafka_security == "sasl_ssl")
            self.local.append(LocalCluster(name, "", "", broker=broker))
        threads = [threading.Thread(target=start, args=(c,), daemon=True) for c in self.local]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _register_and_reconcile(self, topology: Topology) -> None:
        for c in self.local:
            topology.register_cluster(
                Cluster(
                    name=c.name,
                    bootstrap_servers=c.bootstrap_servers,
                    zone="local",
                    admin=ADMIN_KAFKA if c.broker is not None else ADMIN_LOCAL,
                    control_endpoint=c.control_endpoint,
                ),
                update_existing=True,
                actor=ACTOR,
            )
        local = {c.name: c for c in topology.list_clusters() if c.name in {lc.name for lc in self.local}}
        for stream in topology.list_streams():
            for lane in stream.lanes:
                for gen in lane.generations:
                    if gen.cluster in local and gen.state != DRAINED:
                        topology.admin.ensure_topic(local[gen.cluster], gen.topic, gen.partitions)

    @property
    def coordinator_address(self) -> str:
        assert self.coordinator is not None
        return self.coordinator.address

    def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
            self.coordinator = None
        for cluster in self.local:
            if cluster.process is not None and cluster.process.poll() is None:
                cluster.process.terminate()  # every mock cluster stops at once; then each is waited for
        for cluster in self.local:
            cluster.stop()
        self.local.clear()

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _readline_until(proc: subprocess.Popen[str], deadline: float) -> str:
    """The first stdout line of `proc`, or '' if it exits or the deadline passes first."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline() if proc.stdout else ""), daemon=True).start()
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        return ""


def run_dev(
    *,
    clusters: int,
    data_dir: Path,
    port: int,
    host: str = "127.0.0.1",
    assigner_config: AssignerConfig | None = None,
    engine: str = "mock",
    kafka_security: str = "plaintext",
) -> int:
    """Run the local stack in the foreground until SIGINT or SIGTERM."""
    block_stop_signals()
    print(
        f"starting the local stack: {clusters} cluster(s) on the {engine} engine, data in {data_dir}",
        file=sys.stderr,
        flush=True,
    )
    stack = LocalStack(
        data_dir=data_dir,
        clusters=clusters,
        port=port,
        host=host,
        assigner_config=assigner_config,
        engine=engine,
        kafka_security=kafka_security,
    )
    stack.start()
    try:
        print(f"coordinator={stack.coordinator_address} store=embedded data_dir={data_dir}", flush=True)
        for cluster in stack.local:
            print(f"kafka.{cluster.name}={cluster.bootstrap_servers}", flush=True)
            if cluster.broker is not None and cluster.broker.sasl:
                users = ",".join(f"{u.name}:{u.password}" for u in USERS)
                print(
                    f"kafka.{cluster.name}.sasl_ssl={cluster.broker.sasl_bootstrap_servers} "
                    f"ssl.ca.location={cluster.broker.ca_file} users={users} "
                    "mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                    flush=True,
                )
        print("ready (Ctrl-C stops everything)", flush=True)
        wait_for_stop(lambda: not all(c.alive() for c in stack.local))
        dead = [c.name for c in stack.local if not c.alive()]
        if dead:
            print(f"local cluster {', '.join(dead)} exited; stopping", file=sys.stderr, flush=True)
            return 1
        return 0
    finally:
        stack.stop()
