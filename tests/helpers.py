"""Helpers for tests that run real processes: the coordinator, the local stack, the CLI."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

TOKEN_KEY = b"5" * 64
"""The key of the `secured_engine` fixture's coordinator: `issue_token` signs with it."""


def issue_token(role: str, subject: str, **scope: tuple[str, ...]) -> str:
    """A token of `role` (scoped with streams=… and groups=…) that the `secured_engine` coordinator accepts."""
    from streamplane.coordinator.rpc.auth import TokenIssuer

    return TokenIssuer(TOKEN_KEY).create(subject, role, now_s=time.time(), ttl_s=3600, **scope)


def offset_lag(address: str, group: str, stream: str) -> int:
    """The group's offset lag on the stream, asked with an admin token; -1 while it has committed nothing (an
    empty lag is no lag yet)."""
    from streamplane.client import CoordinatorClient

    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        lag = client.lag(group, stream=stream)
    return lag.offset_lag if lag.lanes else -1


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: Callable[[], str] | None = None) -> None:
    """Poll `predicate` until it is true; fail the test if `timeout` seconds pass first (saying `what()`)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not reached within {timeout} s" + (f": {what()}" if what else ""))
        time.sleep(0.02)


def real_kafka_jars() -> None:
    """Skip the test, saying why, when Apache Kafka's jars cannot be had here (fetched from Maven Central once)."""
    from streamplane.devstack.kafka import ensure_jars
    from streamplane.errors import UnavailableError

    try:
        ensure_jars()
    except UnavailableError as err:
        pytest.skip(f"real-Kafka tests skipped: {err.message}")


def cli(
    *args: str, coordinator: str | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real `streamplane` CLI in a subprocess."""
    cmd = [sys.executable, "-m", "streamplane.cli.main"]
    if coordinator:
        cmd += ["--coordinator", coordinator]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


class Proc:
    """A long-running child process whose stdout lines are collected in the background."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.popen = subprocess.Popen(
            list(args),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr.append(line)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """The first stdout line (seen so far or later) matching `pattern`."""
        regex = re.compile(pattern)
        for line in self.seen:
            if m := regex.search(line):
                return m
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.popen.poll() is not None:
                    break
                continue
            self.seen.append(line)
            if m := regex.search(line):
                return m
        raise AssertionError(
            f"no line matching {pattern!r} within {timeout} s; exit={self.popen.poll()}; "
            f"stdout={self.seen[-10:]}; stderr={''.join(self.stderr)[-2000:]}"
        )

    def send(self, line: str) -> None:
        """Write one line to the process's stdin."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def kill9(self) -> None:
        """SIGKILL the process (and only it: children must notice by themselves)."""
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL the whole session if it does not exit."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode


def start_coordinator(
    data_dir: Path,
    port: int = 0,
    *,
    control_endpoints: Sequence[str] = (),
    token_key: Path | None = None,
    store: str = "",
) -> tuple[Proc, str]:
    """Start `streamplane coordinator` on the embedded store, allowing registrations of local clusters with
    `control_endpoints`; return it and its address. Authentication is off (loopback, no key) unless `token_key`
    names the key file its tokens are signed with."""
    allow = [arg for endpoint in control_endpoints for arg in ("--allow-control-endpoint", endpoint)]
    if token_key is not None:
        allow += ["--token-key-file", str(token_key)]
    if store:  # a shared store (postgresql://...): replicas of one coordinator
        allow += ["--store", store]
    proc = Proc(
        [
            sys.executable, "-m", "streamplane.cli.main", "coordinator", "--data-dir", str(data_dir),
            "--port", str(port), *allow,
        ]
    )  # fmt: skip
    address = proc.wait_for(r"coordinator=(\S+)").group(1)
    return proc, address


def scoped_token(address: str, role: str, stream: str, group: str = "") -> str:
    """A least-privilege token, issued as an operator does: `streamplane token create --role ROLE --stream S
    [--group G]`, with the admin credential `streamplane dev` left for its address."""
    args = ["token", "create", "--role", role, "--stream", stream] + (["--group", group] if group else [])
    done = cli(*args, coordinator=address)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def start_dev(data_dir: Path, *extra: str) -> tuple[Proc, str, dict[str, str]]:
    """Start `streamplane dev`; return it, the coordinator address and {cluster: bootstrap}."""
    proc = Proc(
        [sys.executable, "-m", "streamplane.cli.main", "dev", "--data-dir", str(data_dir), "--port", "0", *extra]
    )
    address = proc.wait_for(r"coordinator=(\S+)").group(1)
    proc.wait_for(r"^ready")
    clusters = dict(re.findall(r"^kafka\.(\S+?)=(\S+)$", "\n".join(proc.seen), re.M))
    return proc, address, clusters


def register_real_clusters(address: str, broker: Any, names: Sequence[str], token: str | None = None) -> None:
    """Register a real Kafka broker (the `real_kafka` fixture's) under each of `names` (as `token`'s holder)."""
    from streamplane import model
    from streamplane.client import CoordinatorClient

    with CoordinatorClient(address, token=token) as client:
        for name in names:
            client.register_cluster(
                model.Cluster(name=name, bootstrap_servers=broker.bootstrap_servers, admin=model.ADMIN_KAFKA)
            )


def register_local_clusters(
    address: str, bootstrap: str, control_endpoint: str, names: Sequence[str], token: str | None = None
) -> None:
    """Register the local cluster under each of `names` (tests fail over between names of one cluster)."""
    from streamplane import model
    from streamplane.client import CoordinatorClient

    with CoordinatorClient(address, token=token) as client:
        for name in names:
            client.register_cluster(
                model.Cluster(
                    name=name,
                    bootstrap_servers=bootstrap,
                    admin=model.ADMIN_LOCAL,
                    control_endpoint=control_endpoint,
                )
            )


def make_certificates(folder: Path, *clients: str) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and localhost, and one client certificate per common name in
    `clients`, with openssl: {"ca", "server.crt", "server.key", "<cn>.crt", "<cn>.key"}."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=streamplane-test-ca",
            "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), *((c, []) for c in clients)):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr")  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-out", f"{name}.crt", *ext)  # fmt: skip
    found = {"ca": folder / "ca.crt"}
    for name in ("server", *clients):
        found[f"{name}.crt"], found[f"{name}.key"] = folder / f"{name}.crt", folder / f"{name}.key"
    return found


class RunningConsumer:
    """A Consumer's `run()` on a thread of its own: what its handler saw, and what `run()` raised. Records whose
    value starts with `reject` (when given) are rejected to the dlq lane."""

    def __init__(self, address: str, group: str, stream: str, *, reject: bytes = b"", **settings: Any) -> None:
        from collections import Counter

        from streamplane.client import Consumer

        self.seen: Counter[bytes] = Counter()
        self.raised: BaseException | None = None
        self.consumer = Consumer(address, group=group, stream=stream, **settings)
        self._reject = reject
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _handle(self, msg: Any) -> None:
        self.seen[msg.value] += 1
        if self._reject and msg.value.startswith(self._reject):
            msg.reject("poison: cannot parse")

    def _run(self) -> None:
        try:
            self.consumer.run(self._handle)
        except BaseException as err:
            self.raised = err

    def stop(self) -> None:
        self.consumer.close()
        self.thread.join(10)


class ProcessingLog:
    """Every processing: (value, lease id, epoch, worker, time) per record, from any number of workers'
    handlers; `overlaps` finds two holders of one lease processing at the same time."""

    def __init__(self, handler_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[bytes, str, int, str, float]] = []
        self.handler_s = handler_s
        """How long each record takes its handler (slower than the input: a backlog waits at a revoke)."""

    def handler(self, worker: str) -> Callable[[Any], None]:
        def handle(msg: Any) -> None:
            with self.lock:
                self.rows.append((msg.value, msg.lease_id, msg.epoch, worker, time.time()))
            if self.handler_s:
                time.sleep(self.handler_s)  # stands for the handler's work

        return handle

    def values(self) -> set[bytes]:
        with self.lock:
            return {r[0] for r in self.rows}

    def overlaps(self) -> list[str]:
        """Leases whose holders at two epochs processed records in overlapping time windows."""
        import itertools
        from collections import defaultdict

        windows: dict[str, dict[int, list[float]]] = defaultdict(dict)
        with self.lock:
            rows = list(self.rows)
        for _, lease, epoch, _, at in rows:
            w = windows[lease].setdefault(epoch, [at, at])
            w[0], w[1] = min(w[0], at), max(w[1], at)
        found = []
        for lease, by_epoch in windows.items():
            ordered = sorted(by_epoch.items())
            for (e1, (_, end1)), (e2, (start2, _)) in itertools.pairwise(ordered):
                if end1 >= start2:
                    found.append(f"{lease}: epoch {e1} ran until {end1:.3f}, after epoch {e2} began at {start2:.3f}")
        return found


class Relay:
    """A TCP relay in front of one address that a test can stall: `stall()` stops moving bytes both ways while
    every connection stays open, as a SIGSTOPped coordinator replica or a black-holed link looks to a client;
    `release()` moves them again."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: Any, sink: Any) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            source.close()  # closing a closed socket is a no-op
            sink.close()

    def stall(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()


_HOSTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def host_of(assigner: Any) -> Any:
    """The session host of an Assigner's replica (its store, settings, replica id and clock), as the server pairs
    them; one per Assigner. Its writer is not started: what its sessions send is written at once."""
    from streamplane.coordinator.groups.sessions.host import SessionHost

    host = _HOSTS.get(assigner)
    if host is None:
        host = _HOSTS[assigner] = SessionHost(
            assigner.db, assigner.config, replica_id=assigner.replica_id, clock=assigner.clock
        )
    return host


class Domain:
    """The coordinator's domain to test against, with no server: an embedded store (in `path`, or in memory),
    a Topology over in-memory Kafka clusters, and a manual clock. `cluster` and `stream` add to it and return it,
    so a set-up reads as one line: `Domain(tmp_path).cluster("c").stream("s", 2)`."""

    def __init__(self, path: Path | None = None, *, clock: Any = None) -> None:
        from streamplane.clock import ManualClock
        from streamplane.coordinator.store.embedded import EmbeddedDatabase
        from streamplane.coordinator.topology.topology import Topology
        from streamplane.testing.cluster_admin import MemoryClusterAdmin

        self.clock = clock if clock is not None else ManualClock()
        self.db = EmbeddedDatabase(path)
        self.admin = MemoryClusterAdmin()
        self.topology = Topology(self.db, self.admin, self.clock)

    def cluster(self, *names: str) -> Domain:
        """Register clusters named `names` (bootstrap "<name>:9092")."""
        from streamplane.model import Cluster

        for name in names:
            self.topology.register_cluster(Cluster(name, f"{name}:9092"))
        return self

    def stream(self, name: str, partitions: int, cluster: str = "c", **lanes: int) -> Domain:
        """Create stream `name` on `cluster`, and lanes beyond the default ones: lane name=priority, each with
        `partitions` partitions."""
        self.topology.create_stream(name, partitions, cluster)
        for lane, priority in lanes.items():
            self.topology.add_lane(name, lane, priority, partitions, cluster)
        return self

    def close(self) -> None:
        self.db.close()


def read_back(address: str, stream: str, group: str, n: int, **settings: Any) -> set[bytes]:
    """The values of the first `n` distinct records a consumer of `group` reads from `stream`."""
    seen: set[bytes] = set()
    from streamplane.client import Consumer

    with Consumer(address, group=group, stream=stream, **settings) as consumer:
        for msg in consumer:
            seen.add(msg.value)
            msg.ack()
            if len(seen) == n:
                break
    return seen


def fetches_asked(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The partitions each Fetch of our wire client asks for, in order: `KafkaConnection.fetch` is spied on (it
    still sends every request) for the rest of the test."""
    from streamplane.client.kafka import KafkaConnection

    asked: list[list[int]] = []
    real_fetch = KafkaConnection.fetch

    def counted(self: KafkaConnection, topic: str, offsets: dict[int, int], **kwargs: Any) -> Any:
        asked.append(sorted(offsets))
        return real_fetch(self, topic, offsets, **kwargs)

    monkeypatch.setattr(KafkaConnection, "fetch", counted)
    return asked
