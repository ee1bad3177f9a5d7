"""Real Apache Kafka brokers on this machine: the broker's jars from Maven Central, one JVM per broker in
KRaft combined mode (broker and controller in one process), no Docker.

`ensure_jars()` fetches the pinned version once with Maven into `.cache/kafka/<version>/lib` (inside the
repository, ignored by git) and reuses it. `KafkaBroker` formats a data directory and starts one broker on
free loopback ports with a PLAINTEXT listener and, when asked, a SASL_SSL listener (SCRAM-SHA-256,
SCRAM-SHA-512 and PLAIN, with a generated self-signed certificate and users). `KafkaCluster` runs several
of them as one replicated cluster: every node a voter of one KRaft quorum, topics replicated to all of them by
default.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamplane.errors import InvalidArgumentError, UnavailableError

KAFKA_VERSION = "4.4.0"
"""The newest 4.x whose artifacts resolve on Maven Central (share groups are production-ready from 4.2)."""
ROOT = Path(__file__).resolve().parent.parent
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
SPARK_KAFKA_POM = Path(__file__).resolve().parent / "kafka" / "spark-kafka-pom.xml"


def jar_dir(version: str = KAFKA_VERSION) -> Path:
    return ROOT / ".cache" / "kafka" / version / "lib"


def ensure_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory of the broker's jars, fetched with Maven the first time. UnavailableError says in one
    sentence why they cannot be had (no Java, no Maven, an artifact that does not resolve)."""
    lib = jar_dir(version)
    if not (lib / f"kafka_2.13-{version}.jar").exists():
        _maven_copy(POM, {"kafka.version": version}, lib, f"Apache Kafka {version}")
    return lib


TOOLS_POM = Path(__file__).resolve().parent / "kafka" / "tools-pom.xml"


def tools_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's command-line tools' jars (kafka-consumer-groups.sh is ConsumerGroupCommand),
    fetched with Maven the first time into `.cache/kafka-tools/<version>/lib`."""
    lib = ROOT / ".cache" / "kafka-tools" / version / "lib"
    if not (lib / f"kafka-tools-{version}.jar").exists():
        _maven_copy(TOOLS_POM, {"kafka.version": version}, lib, f"Apache Kafka's tools {version}")
    return lib


def spark_kafka_jars(spark_version: str) -> list[Path]:
    """The jars Spark's own Kafka source (spark-sql-kafka-0-10) needs beyond those PySpark ships, for
    `spark_version` (which must be the installed PySpark's), fetched with Maven the first time into
    `.cache/spark-kafka/<version>/lib`. UnavailableError says in one sentence why they cannot be had."""
    import pyspark

    lib = ROOT / ".cache" / "spark-kafka" / spark_version / "lib"
    if not (lib / f"spark-sql-kafka-0-10_2.13-{spark_version}.jar").exists():
        _maven_copy(SPARK_KAFKA_POM, {"spark.version": spark_version}, lib, f"Spark's Kafka source {spark_version}")
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in lib.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar: str) -> str:
    """A jar's artifact name without its version ("kafka-clients-3.9.2.jar" -> "kafka-clients")."""
    return re.sub(r"-\d+\.\d[\w.\-]*\.jar$", "", jar)


def _maven_copy(pom: Path, properties: dict[str, str], lib: Path, what: str) -> None:
    """Copy the runtime dependencies `pom` names into `lib` with Maven (atomically: a directory appears whole)."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise UnavailableError(f"{what} needs {tool} on PATH to be fetched from Maven Central")
    tmp = lib.with_name("lib.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    result = subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            *(f"-D{k}={v}" for k, v in properties.items()),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        last = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise UnavailableError(f"{what} did not resolve from Maven Central: {' / '.join(last)}")
    tmp.rename(lib)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class SaslUser:
    name: str
    password: str


USERS = (SaslUser("alice", "alice-secret"), SaslUser("bob", "bob-secret"))
"""The users of a broker's SASL_SSL listener (SCRAM credentials and PLAIN)."""


class KafkaBroker:
    """One real Kafka broker (KRaft combined mode) in its own JVM.

    Args:
        data_dir: where its log, configuration and certificate go (made if missing).
        sasl: also open a SASL_SSL listener for USERS, with a self-signed certificate for localhost.
        heap_mb: the JVM's heap.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        sasl: bool = False,
        heap_mb: int = 256,
        node_id: int = 1,
        controller_port: int = 0,
        voters: str = "",
        cluster_id: str = "",
        replicas: int = 1,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.sasl = sasl
        self.heap_mb = heap_mb
        self.node_id = node_id
        self.port, self.controller_port = free_port(), controller_port or free_port()
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id or uuid.uuid4().hex[:22]
        self.replicas = replicas
        """Brokers in its cluster: the default replication factor of topics (internal ones too)."""
        self.sasl_port = free_port() if sasl else 0
        self.ca_file = self.data_dir / "cert.pem"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        return f"localhost:{self.sasl_port}"

    def _properties(self) -> str:
        listeners = [f"PLAINTEXT://127.0.0.1:{self.port}", f"CONTROLLER://127.0.0.1:{self.controller_port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        lines = []
        if self.sasl:
            listeners.append(f"SASL_SSL://localhost:{self.sasl_port}")
            advertised.append(f"SASL_SSL://localhost:{self.sasl_port}")
            protocols.append("SASL_SSL:SASL_SSL")
            plain_users = " ".join(f'user_{u.name}="{u.password}"' for u in USERS)
            lines += [
                "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.sasl_ssl.plain.sasl.jaas.config="
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={self.data_dir / 'keystore.pem'}",
            ]
        lines += [
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={self.voters}",
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"listener.security.protocol.map={','.join(protocols)}",
            f"log.dirs={self.data_dir / 'log'}",
            f"default.replication.factor={self.replicas}",
            f"offsets.topic.replication.factor={self.replicas}",
            f"transaction.state.log.replication.factor={self.replicas}",
            "transaction.state.log.min.isr=1",
            f"share.coordinator.state.topic.replication.factor={self.replicas}",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
        ]
        return "\n".join(lines) + "\n"

    def _certificate(self) -> None:
        key, cert = self.data_dir / "key.pem", self.ca_file
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        # Kafka's PEM keystore: the private key (PKCS#8) then the certificate chain
        (self.data_dir / "keystore.pem").write_text(key.read_text() + cert.read_text())

    def _java(self, lib: Path, main: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap_mb}m",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss512k",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def start(self, timeout_s: float = 60.0) -> KafkaBroker:
        """Format (first time) and start the broker; return once it accepts requests."""
        lib = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        if self.sasl and not self.ca_file.exists():
            self._certificate()
        config.write_text(self._properties())
        if not (self.data_dir / "log" / "meta.properties").exists():
            scram = []
            for u in USERS if self.sasl else ():
                for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    scram += ["--add-scram", f"{mech}=[name={u.name},password={u.password}]"]
            fmt = ["format", "-t", self.cluster_id, "-c", str(config), *scram]
            result = subprocess.run(self._java(lib, "kafka.tools.StorageTool", *fmt), capture_output=True, text=True)
            if result.returncode != 0:
                said = (result.stderr.strip() or result.stdout.strip())[-500:] or "it printed nothing"
                raise UnavailableError(
                    f"formatting the Kafka broker's storage failed (exit {result.returncode}): {said}"
                )
        log = open(self.data_dir / "broker.log", "ab")  # noqa: SIM115 - the broker writes to it while it runs
        self._proc = subprocess.Popen(
            self._java(lib, "kafka.Kafka", str(config)), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise UnavailableError(f"the Kafka broker exited with {self._proc.returncode}; see {log.name}")
            if self._ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise UnavailableError(f"the Kafka broker did not become ready within {timeout_s} s; see {log.name}")

    def _ready(self) -> bool:
        from streamplane.client.kafka import KafkaConnection

        try:
            with KafkaConnection.connect_any(self.bootstrap_servers) as conn:
                return bool(conn.metadata([]).brokers)
        except Exception:  # not listening yet, or still starting
            return False

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the JVM, as a crash would (`start()` brings it back with its log)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, 9)
                self._proc.wait()
        self._proc = None


class KafkaCluster:
    """`count` real brokers as one cluster (KRaft combined mode, each node a voter), each in its own JVM under
    data_dir/node-<id>. With one broker it is that broker, under data_dir itself (as before)."""

    def __init__(self, data_dir: Path, count: int = 1, *, sasl: bool = False) -> None:
        if not 1 <= count <= 9:
            raise InvalidArgumentError(f"--brokers must be between 1 and 9 for real Kafka, not {count}")
        self.data_dir = Path(data_dir)
        if count == 1:
            self.brokers = [KafkaBroker(self.data_dir, sasl=sasl)]
        else:
            ports = {n: free_port() for n in range(1, count + 1)}
            voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in ports.items())
            cluster_id = _cluster_id(self.data_dir)
            self.brokers = [
                KafkaBroker(
                    self.data_dir / f"node-{n}",
                    sasl=sasl,
                    node_id=n,
                    controller_port=p,
                    voters=voters,
                    cluster_id=cluster_id,
                    replicas=count,
                )
                for n, p in ports.items()
            ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers)

    def broker(self, node_id: int) -> KafkaBroker:
        return next(b for b in self.brokers if b.node_id == node_id)

    def start(self, timeout_s: float = 90.0) -> KafkaCluster:
        """Start every broker side by side (a quorum needs most of its voters up before any is ready)."""
        try:
            side_by_side([functools.partial(b.start, timeout_s) for b in self.brokers])
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self, down: set[int] | frozenset[int] = frozenset()) -> bool:
        """Every broker runs, but those taken down on purpose."""
        return all(b.alive() or b.node_id in down for b in self.brokers)

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()


def side_by_side(calls: list[Callable[[], object]]) -> None:
    """Run every call on its own thread (JVMs take seconds each to start); raise the first error once all ended."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as err:  # reported below, after every call had its chance
            errors.append(err)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _cluster_id(data_dir: Path) -> str:
    """The cluster's id, kept beside its nodes so that a restart formats nothing again."""
    path = data_dir / "cluster.id"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex[:22])
    return path.read_text().strip()
