"""`streamplane dev`: the coordinator on the embedded store plus N local Kafka clusters, in the foreground.

With `--store postgres` the store is a throwaway PostgreSQL cluster under the data dir (Debian's binaries, run
as the `postgres` user when we are root), and `--replicas N` runs N coordinator processes on it, each on its
own port: a highly available control plane to kill replicas of (`streamplane fault coordinator`).

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
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from streamplane.client.credentials import forget_token, save_token
from streamplane.coordinator.rpc.auth import ADMIN, TokenIssuer, load_keys
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.topology import Topology
from streamplane.devstack.cluster_control import LocalClusterControl
from streamplane.devstack.fault_control import ControlServer
from streamplane.devstack.kafka import USERS, KafkaCluster, side_by_side
from streamplane.devstack.postgres import PostgresServer, reachable_folder
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError
from streamplane.model import ADMIN_KAFKA, ADMIN_LOCAL, DRAINED, Cluster
from streamplane.process import block_stop_signals, wait_for_stop

ADMIN_TOKEN_TTL_S = 30 * 24 * 3600
"""The local admin token's life: a dev stack's data dir lives that long at most, in practice."""

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 30.0
ACTOR = "streamplane-dev"
ENGINES = ("mock", "kafka")
STORES = ("embedded", "postgres")
MAX_REPLICAS = 9
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
    kafka: KafkaCluster | None = None  # the kafka engine's brokers
    mock_brokers: int = 0  # the mock engine's broker count (ids 1..n)
    down: set[int] = field(default_factory=set)
    """Brokers taken down by a fault (`streamplane fault`): their being gone does not stop the stack."""
    paused: set[int] = field(default_factory=set)

    @property
    def brokers(self) -> list[int]:
        if self.kafka is not None:
            return [b.node_id for b in self.kafka.brokers]
        return list(range(1, self.mock_brokers + 1))

    def alive(self) -> bool:
        """Running, or down on purpose."""
        if self.kafka is not None:
            return self.kafka.alive(self.down)
        return self.process is not None and self.process.poll() is None

    def control(self) -> LocalClusterControl:
        return LocalClusterControl(self.control_endpoint, name=self.name)

    def stop(self) -> None:
        if self.kafka is not None:
            for node in self.paused:
                if self.kafka.broker(node).alive():
                    os.kill(self.kafka.broker(node).pid, signal.SIGCONT)  # a stopped JVM cannot take its SIGTERM
            self.kafka.stop()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class CoordinatorChild:
    """The coordinator as a child process (`streamplane coordinator` on the data dir's embedded store), so it
    can be killed with SIGKILL and come back while the clusters stay up; it exits when the stack's process is
    gone. Restarted on the same port whenever it dies without being asked to stop."""

    def __init__(
        self,
        data_dir: Path,
        host: str,
        port: int,
        session_ttl_ms: int,
        extra_args: Sequence[str] = (),
        console_port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        self.data_dir, self.host, self.port, self.session_ttl_ms = data_dir, host, port, session_ttl_ms
        self.extra_args = list(extra_args)
        """Security settings: the token key, the local clusters' control endpoints."""
        self.console_port = console_port
        """The web console's port (0: a free one, then kept across restarts); None: no console."""
        self.metrics_port = metrics_port
        """The Prometheus /metrics port (0: a free one, bound by the coordinator itself, then kept across
        restarts); None: no metrics."""
        self.console_url = ""
        self.address = ""
        self.replica_id = ""
        """The replica id of the process serving now (a new one at every restart)."""
        self.paused = False
        self.restarts = 0
        self.killed_at = 0.0
        """When (Unix seconds) it was last SIGKILLed by `kill`: the start of a takeover to time."""
        self._proc: subprocess.Popen[str] | None = None
        self._stopping = False
        self._lock = threading.Lock()
        self._serving = threading.Condition(self._lock)
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int:
        proc = self._proc
        return proc.pid if proc is not None else 0

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="coordinator-watch", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        command = [
            sys.executable,
            "-m",
            "streamplane.cli.main",
            "coordinator",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--session-ttl-ms",
            str(self.session_ttl_ms),
            "--parent-pid",
            str(os.getpid()),
            *self.extra_args,
        ]
        if self.console_port is not None:
            command += ["--console-port", str(self.console_port), "--console-actions", "--console-sample-ms", "1000"]
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = _readline_until(proc, time.monotonic() + START_TIMEOUT_S)
        if not line.startswith("coordinator="):
            try:  # its output ended: it is exiting (its status may lag its last line by a moment)
                code: int | None = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            proc.kill()
            proc.wait()
            if code is None:
                raise UnavailableError(f"the coordinator did not start within {START_TIMEOUT_S:.0f} s; see its log")
            raise ChildExitedError(f"the coordinator exited with code {code} before serving; see its reason", code)
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        address = fields["coordinator"]
        with self._serving:
            self._proc, self.address, self.replica_id, self.paused = proc, address, fields.get("replica", ""), False
            self.port = int(address.rsplit(":", 1)[1])  # a restart listens where clients look
            if "console" in fields:
                self.console_url = fields["console"]
                self.console_port = int(self.console_url.rstrip("/").rsplit(":", 1)[1])
            if "metrics" in fields:
                self.metrics_port = int(fields["metrics"].rsplit(":", 1)[1])
            self._serving.notify_all()

    def _watch(self) -> None:
        while True:
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            with self._lock:
                if self._stopping:
                    return
                self._proc = None
            print(f"coordinator exited with {code}; restarting it on port {self.port}", file=sys.stderr, flush=True)
            while not self._stopping:
                try:
                    self._spawn()
                    self.restarts += 1
                    break
                except (RuntimeError, OSError) as err:  # the port may still be taken for a moment
                    print(f"coordinator restart failed: {err}; trying again", file=sys.stderr, flush=True)
                    time.sleep(1.0)

    def kill(self, timeout_s: float = START_TIMEOUT_S) -> tuple[int, int, float]:
        """SIGKILL the coordinator and wait until its restart serves: (old pid, new pid, seconds away)."""
        with self._lock:
            proc = self._proc
            if proc is None:
                raise FailedPreconditionError("the coordinator is restarting already")
        began = time.monotonic()
        self.killed_at = time.time()
        proc.kill()
        with self._serving:
            if not self._serving.wait_for(lambda: self._proc is not None and self._proc is not proc, timeout_s):
                raise UnavailableError(f"the coordinator did not come back within {timeout_s:.0f} s")
            return proc.pid, self.pid, time.monotonic() - began

    def pause(self) -> int:
        """SIGSTOP the process (a zombie: it holds its connections and wakes believing it is current); its pid."""
        with self._lock:
            proc = self._proc
            if proc is None:
                raise FailedPreconditionError("the coordinator is restarting")
            proc.send_signal(signal.SIGSTOP)
            self.paused = True
            return proc.pid

    def resume(self) -> int:
        """SIGCONT a paused process; its pid."""
        with self._lock:
            proc = self._proc
            if proc is None or not self.paused:
                raise FailedPreconditionError("that coordinator replica is not paused")
            proc.send_signal(signal.SIGCONT)
            self.paused = False
            return proc.pid

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            proc = self._proc
        if proc is not None and self.paused:
            proc.send_signal(signal.SIGCONT)  # a stopped process never sees SIGTERM
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class LocalStack:
    """The local stack; `start()` brings it up, `stop()` ends every child. The fault methods break and mend
    its parts on purpose (`streamplane fault` calls them through the stack's control endpoint)."""

    data_dir: Path
    clusters: int = 2
    port: int = 7400
    host: str = "127.0.0.1"
    brokers: int = 0
    """Brokers per cluster; 0: the engine's default (3 on the mock engine, 1 on real Kafka)."""
    session_ttl_ms: int = 3000
    engine: str = "mock"
    kafka_security: str = "plaintext"
    """'sasl_ssl' adds a SCRAM/PLAIN listener over TLS to each real broker (USERS, a generated certificate)."""
    store: str = "embedded"
    """'embedded' (SQLite in the data dir, one coordinator process) or 'postgres' (a throwaway server)."""
    replicas: int = 1
    """Coordinator processes; more than one needs the PostgreSQL store."""
    local: list[LocalCluster] = field(default_factory=list)
    coordinators: list[CoordinatorChild] = field(default_factory=list)
    postgres: PostgresServer | None = None
    store_url: str = ""
    """The PostgreSQL store's URL ('' on the embedded store)."""
    admin_token: str = ""
    """An admin token for the stack's own coordinator (authentication is on, even locally)."""
    token_file: Path | None = None
    """Where the admin token was left for the CLI and clients of the coordinator's address."""
    console_port: int | None = 0
    """The web console's port (0: a free one; None: no console). On in the dev stack, with operator actions."""
    metrics_port: int = 0
    """The first coordinator's Prometheus /metrics port (0: a free one, bound by the coordinator and kept
    across its restarts)."""

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def coordinator(self) -> CoordinatorChild | None:
        """The first replica (the only one on the embedded store)."""
        return self.coordinators[0] if self.coordinators else None

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
        if self.kafka_security != "plaintext" and self.brokers > 1:
            raise InvalidArgumentError("--kafka-security sasl_ssl runs one broker per cluster: leave out --brokers")
        if self.store not in STORES:
            raise InvalidArgumentError(f"--store must be one of {', '.join(STORES)}, not {self.store!r}")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise InvalidArgumentError(f"--replicas must be between 1 and {MAX_REPLICAS}, not {self.replicas}")
        if self.replicas > 1 and self.store != "postgres":
            raise InvalidArgumentError(
                "--replicas needs --store postgres: the embedded store serves one coordinator process"
            )
        try:
            if self.engine == "kafka":
                self._start_brokers(names)
            else:
                self._start_clusters(names)
            if self.store == "postgres":
                folder = reachable_folder(Path(self.data_dir) / "postgres")
                if folder != Path(self.data_dir) / "postgres":
                    print(f"PostgreSQL runs as user postgres in {folder}", file=sys.stderr, flush=True)
                self.postgres = PostgresServer(folder).start()
                self.store_url = self.postgres.ensure_database("streamplane")
            db = open_store(StoreConfig.from_env(Path(self.data_dir), self.store_url or "embedded"))
            try:  # before the coordinator opens the store: one process at a time holds it
                endpoints = [c.control_endpoint for c in self.local if c.control_endpoint]
                self._register_and_reconcile(Topology(db, RoutingAdmin(), control_endpoints=endpoints))
            finally:
                db.close()
            security = ["--token-key-file", str(self.token_key_file)]
            for c in self.local:
                if c.control_endpoint:
                    security += ["--allow-control-endpoint", c.control_endpoint]
            security += ["--store", self.store_url] if self.store_url else []
            issuer = TokenIssuer.of(load_keys(self.token_key_file, create=True))
            for i in range(self.replicas):  # each its own port (the next ones after --port) and metrics port
                child = CoordinatorChild(
                    Path(self.data_dir),
                    self.host,
                    self.port + i if self.port else 0,
                    self.session_ttl_ms,
                    security,
                    self.console_port if i == 0 else None,
                    self.metrics_port if i == 0 else 0,
                )
                child.start()
                self.coordinators.append(child)
            self.metrics_port = self.coordinators[0].metrics_port or 0
            self.admin_token = issuer.create("dev-admin", ADMIN, now_s=time.time(), ttl_s=ADMIN_TOKEN_TTL_S)
            for target in self._token_targets():
                self.token_file = save_token(target, self.admin_token)
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
                    str(self.brokers or 3),
                    "--parent-pid",
                    str(os.getpid()),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.local.append(LocalCluster(name, "", "", proc, mock_brokers=self.brokers or 3))
        deadline = time.monotonic() + START_TIMEOUT_S
        for cluster in self.local:
            assert cluster.process is not None  # started just above
            line = _readline_until(cluster.process, deadline)
            if not line:
                try:
                    code: int | None = cluster.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
                if code is None:
                    raise UnavailableError(
                        f"local cluster {cluster.name} did not start within {START_TIMEOUT_S:.0f} s; its log is above"
                    )
                raise ChildExitedError(
                    f"local cluster {cluster.name} exited with code {code} before serving; its reason is above", code
                )
            info = json.loads(line)
            cluster.bootstrap_servers, cluster.control_endpoint = info["bootstrap_servers"], info["control_endpoint"]

    def _start_brokers(self, names: list[str]) -> None:
        """Real brokers for every cluster, all started side by side (each JVM takes seconds)."""
        for name in names:
            kafka = KafkaCluster(
                Path(self.data_dir) / "kafka" / name, self.brokers or 1, sasl=self.kafka_security == "sasl_ssl"
            )
            self.local.append(LocalCluster(name, kafka.bootstrap_servers, "", kafka=kafka))
        side_by_side([c.kafka.start for c in self.local if c.kafka is not None])

    def _register_and_reconcile(self, topology: Topology) -> None:
        for c in self.local:
            topology.register_cluster(
                Cluster(
                    name=c.name,
                    bootstrap_servers=c.bootstrap_servers,
                    zone="local",
                    admin=ADMIN_KAFKA if c.kafka is not None else ADMIN_LOCAL,
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
                        topology.admin.ensure_topic(local[gen.cluster], gen.topic, gen.partitions, stream.topic)

    @property
    def coordinator_address(self) -> str:
        """Every replica's address, comma-separated: what clients are given."""
        assert self.coordinators
        return ",".join(c.address for c in self.coordinators)

    def _token_targets(self) -> list[str]:
        """The addresses the admin token is left for: the list, and each replica alone (for the CLI)."""
        return list(dict.fromkeys([*(c.address for c in self.coordinators), self.coordinator_address]))

    # -- faults, on purpose: the same on both engines
    def cluster(self, name: str) -> LocalCluster:
        for c in self.local:
            if c.name == name:
                return c
        raise NotFoundError(
            f"no local cluster {name!r}; there are {', '.join(c.name for c in self.local)}", kind="cluster", name=name
        )

    def replica(self, number: int = 0, *, leader: bool = False, owner: str = "") -> int:
        """Which replica (1-based) a fault is for: `number`, the one leading the sealer and the autopilot
        (`leader`), or the one running group `owner`'s assignment; 1 when none is named."""
        if sum((bool(number), leader, bool(owner))) > 1:
            raise InvalidArgumentError("name one replica: --replica K, --leader or --owner GROUP")
        if number:
            if not 1 <= number <= len(self.coordinators):
                raise InvalidArgumentError(f"--replica must be between 1 and {len(self.coordinators)}, not {number}")
            return number
        if not (leader or owner) or len(self.coordinators) == 1:
            return 1
        from streamplane.coordinator.groups import leadership

        db = open_store(StoreConfig.from_env(Path(self.data_dir), self.store_url))
        try:
            wanted = db.transact(lambda tr: leadership.group_owner(tr, owner) if owner else leadership.leader(tr))
        finally:
            db.close()
        for i, child in enumerate(self.coordinators, 1):
            if wanted and child.replica_id == wanted:
                return i
        what = f"group {owner!r} has no owner" if owner else "no replica leads"
        raise FailedPreconditionError(f"{what} among the running replicas now; try again in a moment")

    def restart_store(self) -> dict[str, Any]:
        """Restart the PostgreSQL server (every replica loses every connection); FailedPrecondition on the
        embedded store, which lives inside the coordinator's process."""
        if self.postgres is None:
            raise FailedPreconditionError("the store is embedded in the coordinator: kill the coordinator instead")
        began = time.monotonic()
        self.postgres.restart()
        return {"store": "postgres", "url": self.store_url, "away_s": round(time.monotonic() - began, 3)}

    def _describe(self, number: int) -> dict[str, Any]:
        child = self.coordinators[number - 1]
        return {"replica": number, "replica_id": child.replica_id, "address": child.address, "pid": child.pid}

    def kill_coordinator(self, number: int = 1) -> dict[str, Any]:
        """SIGKILL a replica; it is restarted on its port (a new replica id) while the clusters stay up."""
        old, new, away = self.coordinators[number - 1].kill()
        return {**self._describe(number), "killed_pid": old, "pid": new, "away_s": round(away, 3)}

    def pause_coordinator(self, number: int = 1) -> dict[str, Any]:
        """SIGSTOP a replica: it keeps its sockets and wakes, at `resume_coordinator`, as a zombie."""
        self.coordinators[number - 1].pause()
        return {**self._describe(number), "state": "paused"}

    def resume_coordinator(self, number: int = 1) -> dict[str, Any]:
        self.coordinators[number - 1].resume()
        return {**self._describe(number), "state": "running"}

    def broker_down(self, cluster: str, broker: int = 0, *, pause: bool = False) -> dict[str, Any]:
        """Take one broker down (0: every broker of the cluster): the mock engine closes its listener; on real
        Kafka its JVM gets SIGKILL, or SIGSTOP with `pause` (it hangs: connections open, no answers)."""
        c = self.cluster(cluster)
        targets = self._brokers(c, broker)
        for b in targets:
            if c.kafka is not None:
                if pause:
                    os.kill(c.kafka.broker(b).pid, signal.SIGSTOP)
                    c.paused.add(b)
                else:
                    c.down.add(b)
                    c.kafka.broker(b).kill()
            else:
                if pause:
                    raise InvalidArgumentError("--pause needs --engine kafka (the mock engine can only close a broker)")
                c.control().broker_down(b)
                c.down.add(b)
        return {"cluster": cluster, "brokers": targets, "state": "paused" if pause else "down"}

    def broker_up(self, cluster: str, broker: int = 0) -> dict[str, Any]:
        """Bring a broker back (0: every one of the cluster): resumed if paused, restarted if killed."""
        c = self.cluster(cluster)
        targets = self._brokers(c, broker)
        for b in targets:
            if c.kafka is not None:
                node = c.kafka.broker(b)
                if b in c.paused:
                    os.kill(node.pid, signal.SIGCONT)
                    c.paused.discard(b)
                if b in c.down or not node.alive():
                    node.start()  # same ports and log: it comes back with its records
                    c.down.discard(b)
            else:
                c.control().broker_up(b)
                c.down.discard(b)
        return {"cluster": cluster, "brokers": targets, "state": "up"}

    def set_leader(self, cluster: str, topic: str, partition: int, broker: int) -> dict[str, Any]:
        """Move a partition's leadership (the mock engine; real brokers here are one per cluster)."""
        c = self.cluster(cluster)
        if c.kafka is not None:
            raise FailedPreconditionError(
                "on real Kafka, move a leader by taking its broker down (fault broker CLUSTER ID --down): "
                "an in-sync replica takes over"
            )
        self._brokers(c, broker)
        c.control().set_leader(topic, partition, broker)
        return {"cluster": cluster, "topic": topic, "partition": partition, "leader": broker}

    def _brokers(self, c: LocalCluster, broker: int) -> list[int]:
        if broker == 0:
            return c.brokers
        if broker not in c.brokers:
            raise InvalidArgumentError(
                f"cluster {c.name} has brokers {', '.join(map(str, c.brokers))}; there is no broker {broker}"
            )
        return [broker]

    def state(self) -> dict[str, Any]:
        """What runs where, for `streamplane fault` and people."""
        return {
            "engine": self.engine,
            "store": self.store,
            "coordinator": {
                "address": self.coordinator_address,
                "pid": self.coordinator.pid if self.coordinator else 0,
                "restarts": self.coordinator.restarts if self.coordinator else 0,
            },
            "replicas": [
                {**self._describe(i), "restarts": c.restarts, "paused": c.paused, "killed_at": c.killed_at}
                for i, c in enumerate(self.coordinators, 1)
            ],
            "clusters": {
                c.name: {
                    "bootstrap_servers": c.bootstrap_servers,
                    "brokers": c.brokers,
                    "down": sorted(c.down),
                    "paused": sorted(c.paused),
                }
                for c in self.local
            },
        }

    @property
    def token_key_file(self) -> Path:
        """The key that signs this stack's tokens: kept in the data dir, so tokens outlive restarts."""
        return Path(self.data_dir) / "token.key"

    def stop(self) -> None:
        if self.coordinators:
            if self.admin_token:
                for target in self._token_targets():
                    forget_token(target, self.admin_token)
            for child in self.coordinators:
                child.stop()
            self.coordinators.clear()
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
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


class ChildExitedError(UnavailableError):
    """A process of the stack exited before it served; `streamplane dev` ends with its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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
    session_ttl_ms: int = 3000,
    engine: str = "mock",
    kafka_security: str = "plaintext",
    brokers: int = 0,
    console_port: int | None = 0,
    store: str = "embedded",
    replicas: int = 1,
) -> int:
    """Run the local stack in the foreground until SIGINT or SIGTERM, with its control endpoint for faults
    (`control=HOST:PORT`, also written to DATA_DIR/dev.json for `streamplane fault`)."""
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
        session_ttl_ms=session_ttl_ms,
        engine=engine,
        kafka_security=kafka_security,
        brokers=brokers,
        console_port=console_port,
        store=store,
        replicas=replicas,
    )
    stack.start()
    control = None
    try:
        control = ControlServer(stack, data_dir)
        print(f"coordinator={stack.coordinator_address} store={store} data_dir={data_dir}", flush=True)
        if stack.store_url:
            print(f"postgres={stack.store_url}", flush=True)
        for cluster in stack.local:
            print(f"kafka.{cluster.name}={cluster.bootstrap_servers}", flush=True)
            node = cluster.kafka.brokers[0] if cluster.kafka is not None else None
            if node is not None and node.sasl:
                users = ",".join(f"{u.name}:{u.password}" for u in USERS)
                print(
                    f"kafka.{cluster.name}.sasl_ssl={node.sasl_bootstrap_servers} "
                    f"ssl.ca.location={node.ca_file} users={users} "
                    "mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                    flush=True,
                )
        print(f"control={control.endpoint}", flush=True)
        if stack.coordinator is not None and stack.coordinator.console_url:
            print(f"console={stack.coordinator.console_url}", flush=True)
        print(f"metrics={stack.metrics_url}", flush=True)
        print(f"token_file={stack.token_file}", flush=True)
        print("ready (Ctrl-C stops everything)", flush=True)
        wait_for_stop(lambda: not all(c.alive() for c in stack.local))
        dead = [c.name for c in stack.local if not c.alive()]
        if dead:
            print(f"local cluster {', '.join(dead)} exited; stopping", file=sys.stderr, flush=True)
            return 1
        return 0
    finally:
        if control is not None:
            control.close()
        stack.stop()
