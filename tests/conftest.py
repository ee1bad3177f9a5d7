"""Shared fixtures. Suites run on the local engines by default and on real ones when the environment says so:

- FDB_CLUSTER_FILE: the store conformance suite also runs against that FoundationDB cluster;
- STREAMPLANE_KAFKA_BOOTSTRAP: Kafka admin tests run against that Kafka cluster (by default, against a real
  Apache Kafka broker started from Maven Central's jars for the session).

What is skipped, and why, is printed in the summary (pytest -ra) and at the start of the session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, StoreUnavailableError, open_store
from streamplane.coordinator.store.api import Database, Transaction
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.devstack.cluster_control import LocalClusterControl
from tests.helpers import Domain, Proc, real_kafka_jars

# `streamplane dev` leaves its admin token where clients of its address find it: here, not in the user's home
os.environ.setdefault("STREAMPLANE_CREDENTIALS_DIR", tempfile.mkdtemp(prefix="streamplane-credentials-"))

FDB_CLUSTER_FILE = os.environ.get("FDB_CLUSTER_FILE", "")
POSTGRES_URL = os.environ.get("STREAMPLANE_TEST_POSTGRES_URL", "")
"""A PostgreSQL server to run the store's tests on; by default the session starts one from Debian's binaries."""
KAFKA_BOOTSTRAP = os.environ.get("STREAMPLANE_KAFKA_BOOTSTRAP", "")


def _fdb_skip_reason() -> str | None:
    if not FDB_CLUSTER_FILE:
        return "FoundationDB driver not exercised: FDB_CLUSTER_FILE is not set (no FoundationDB server here)"
    try:
        from streamplane.coordinator.store.foundation import load_fdb

        load_fdb()
    except StoreUnavailableError as err:
        return f"FoundationDB driver not exercised: {err}"
    return None


FDB_SKIP = _fdb_skip_reason()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"store drivers: embedded (a file, and in memory){'' if FDB_SKIP else ', fdb (' + FDB_CLUSTER_FILE + ')'}"
        + (f" -- skipped: {FDB_SKIP}" if FDB_SKIP else ""),
        "kafka: local mock clusters, and a real Apache Kafka broker (KRaft, its own JVM) for the real-engine tests"
        + (f"; admin tests on {KAFKA_BOOTSTRAP}" if KAFKA_BOOTSTRAP else ""),
    ]


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real PostgreSQL server for the session (Debian's binaries, as an unprivileged user when we are root);
    its `create_database()` gives each test a fresh database. STREAMPLANE_TEST_POSTGRES_URL names one to use
    instead (each test then gets a database created on it)."""
    from streamplane.devstack.postgres import PostgresServer, pg_bin
    from streamplane.errors import UnavailableError

    if POSTGRES_URL:

        class External:
            url = POSTGRES_URL

            def create_database(self) -> str:
                import uuid

                import psycopg
                from psycopg.conninfo import conninfo_to_dict, make_conninfo

                name = f"t_{uuid.uuid4().hex[:12]}"
                with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {name}")
                return make_conninfo(**{**conninfo_to_dict(POSTGRES_URL), "dbname": name})

        yield External()
        return
    try:
        pg_bin()
    except UnavailableError as err:
        pytest.skip(f"PostgreSQL driver not exercised: {err.message}")
    # its own folder in /tmp: pytest's are private to root, and PostgreSQL runs as another user when we are root
    folder = Path(tempfile.mkdtemp(prefix="streamplane-pg-"))
    server = PostgresServer(folder).start()
    yield server
    server.stop("immediate")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["embedded", "memory", "postgres", "fdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """Each store driver in turn (the embedded one also in memory, as the simulator runs it; PostgreSQL on a
    real server); the fdb run is skipped (with the reason) unless FDB_CLUSTER_FILE is usable."""
    if request.param == "postgres":
        from streamplane.coordinator.store.postgres import PostgresDatabase

        db: Database = PostgresDatabase(request.getfixturevalue("postgres").create_database())
    elif request.param == "memory":
        from streamplane.coordinator.store.embedded import EmbeddedDatabase

        db = EmbeddedDatabase(None)
    elif request.param == "fdb":
        if FDB_SKIP:
            pytest.skip(FDB_SKIP)
        from streamplane.coordinator.store.foundation import FoundationDBDatabase

        db = FoundationDBDatabase(FDB_CLUSTER_FILE)
    else:
        db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    yield db
    db.close()


@pytest.fixture
def prefix(store: Database) -> Iterator[bytes]:
    """A key prefix unique to the test; cleared afterwards on FoundationDB."""
    p = b"\x02test-" + uuid.uuid4().hex.encode() + b"\x00"
    yield p
    if store.driver == "fdb":

        def clear(tr: Transaction) -> None:
            tr.clear_range(p, p + b"\xff")

        store.transact(clear)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[tuple[str, LocalClusterControl]]:
    """One local Kafka-protocol cluster process (3 brokers) for the session: (bootstrap, control)."""
    proc = Proc([sys.executable, "-m", "streamplane.devstack.mockcluster", "--name", "test"])
    info = proc.wait_for(r'"bootstrap_servers": "([^"]+)", "control_endpoint": "([^"]+)"')
    yield info.group(1), LocalClusterControl(info.group(2), name="test")
    proc.stop()


@pytest.fixture(scope="session")
def real_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real Apache Kafka broker (KRaft, its own JVM) for the session, with a PLAINTEXT listener and a
    SASL_SSL one (SCRAM-SHA-256/512 and PLAIN). Skipped, saying why, when its jars cannot be had here."""
    from streamplane.devstack.kafka import KafkaBroker

    real_kafka_jars()
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), sasl=True).start()
    yield broker
    broker.stop()


@pytest.fixture
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """A real Kafka cluster: STREAMPLANE_KAFKA_BOOTSTRAP's, or the session's own broker."""
    if KAFKA_BOOTSTRAP:
        return KAFKA_BOOTSTRAP
    broker = request.getfixturevalue("real_kafka")
    return str(broker.bootstrap_servers)


@pytest.fixture
def coordinator(tmp_path: Path, local_cluster: tuple[str, LocalClusterControl]) -> Iterator[server.RunningCoordinator]:
    """A real coordinator (gRPC server over the embedded store) in this process; authentication is off, and
    the session's local cluster may be registered (under any name)."""
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        admin=RoutingAdmin(),
        control_endpoints=[local_cluster[1].endpoint],
    )
    yield running
    running.stop(0)


@pytest.fixture(params=["mock", "kafka"])
def secured_engine(request: pytest.FixtureRequest, tmp_path: Path, local_cluster) -> Iterator[str]:
    """A coordinator with authentication on (tests.helpers.issue_token signs its tokens) and clusters east and
    west: the local mock cluster, or a real Kafka broker. Yields its address."""
    from streamplane.coordinator.groups.timing import AssignerConfig
    from streamplane.coordinator.rpc.auth import TokenIssuer
    from streamplane.coordinator.rpc.guard import Guard
    from tests.helpers import TOKEN_KEY, issue_token, register_local_clusters, register_real_clusters

    bootstrap, control = local_cluster
    timing = request.node.get_closest_marker("assigner")
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "secured-store")),
        admin=RoutingAdmin(),
        guard=Guard(TokenIssuer(TOKEN_KEY)),
        control_endpoints=[control.endpoint],
        assigner_config=AssignerConfig(**timing.kwargs) if timing is not None else None,
    )
    admin = issue_token("admin", "ops")
    if request.param == "mock":
        register_local_clusters(running.address, bootstrap, control.endpoint, ("east", "west"), token=admin)
    else:
        register_real_clusters(running.address, request.getfixturevalue("real_kafka"), ("east", "west"), admin)
    yield running.address
    running.stop(0)


@pytest.fixture(scope="session")
def docker_compose() -> str:
    try:
        subprocess.run(["docker-compose", "version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("docker-compose is not installed (scripts/bootstrap.sh installs Debian's package)")
    return "docker-compose"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[2] SparkSession for every Spark test, quiet, with the streamplane source registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_CONF_DIR"] = str(Path(__file__).with_name("spark_conf"))  # log4j2: errors only
    from pyspark.sql import SparkSession

    from streamplane.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamplane-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Spark standalone cluster for the session: a master and a worker, each its own JVM, started with
    PySpark's own `spark-class` (pip's PySpark has no start-master.sh). Yields the master's `spark://` URL.
    Executors run in the worker's processes with the venv's Python, so they import the installed package."""
    import pyspark

    from tests.helpers import free_port, wait_until

    home = Path(pyspark.__file__).parent
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_CONF_DIR": str(Path(__file__).with_name("spark_conf")),
        "SPARK_WORKER_DIR": str(tmp_path_factory.mktemp("spark-worker")),
        "SPARK_NO_DAEMONIZE": "1",
    }
    spark_class = str(home / "bin" / "spark-class")
    master = Proc(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        env=env,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = Proc(
        [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "2", "--memory", "1536m",
         "--webui-port", str(worker_ui)],
        env=env,
    )  # fmt: skip

    def alive() -> bool:
        # The worker's own log says when the master has taken it: no web UI is asked, so a UI port that another
        # process answers on (each UI moves to the next port when its own is taken) cannot mislead the wait.
        return any("Successfully registered with master" in line for line in worker.stderr)

    try:
        wait_until(alive, timeout=90, what=lambda: "".join(master.stderr[-20:] + worker.stderr[-20:]))
        yield url
    finally:
        worker.stop()
        master.stop()


@pytest.fixture
def crashes() -> Iterator[list[str]]:
    """Threads that died of an exception while the test ran (a client's background thread may not)."""
    import threading

    died: list[str] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: died.append(f"{args.thread.name if args.thread else '?'}: {args.exc_value!r}")
    yield died
    threading.excepthook = previous


@pytest.fixture
def domain(tmp_path: Path) -> Iterator[Domain]:
    """The domain in tmp_path: an embedded store, a Topology over in-memory clusters, a manual clock (add
    clusters and streams with `domain.cluster(...)`, `domain.stream(...)`)."""
    built = Domain(tmp_path)
    yield built
    built.close()


# -- what each engine column ran ----------------------------------------------------------------------------------

E2E = Path(__file__).with_name("e2e")
"""Tests that start real processes (a coordinator, local Kafka clusters, Spark, Go) live here: the folder marks
them `e2e` (`-m "not e2e"` is the quick loop)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
        params = getattr(getattr(item, "callspec", None), "params", {})
        uses = set(getattr(item, "fixturenames", ())) & {"real_kafka", "kafka_bootstrap"}
        ids = item.nodeid.partition("[")[2].rstrip("]").split("-")
        real = bool(uses) or "kafka" in params.values() or "kafka" in ids or "test_real_kafka.py" in item.nodeid
        # carried by the test's reports: they reach the summary from pytest-xdist's worker processes too
        item.user_properties.append(("engine", "real Kafka" if real else "local engines"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counts: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") not in ("call", "setup") or not hasattr(report, "nodeid"):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            column = dict(getattr(report, "user_properties", ())).get("engine", "local engines")
            counts.setdefault(column, {}).setdefault(outcome, 0)
            counts[column][outcome] += 1
    terminalreporter.section("engine columns")
    for column, got in sorted(counts.items()):
        terminalreporter.write_line(f"{column}: " + ", ".join(f"{n} {k}" for k, n in sorted(got.items())))
