"""The client end to end, with real processes: 200,000 records through a failover, a worker killed with -9,
a worker joining, a coordinator restart, a broker down while another worker joins and 0.1% poison records;
then a zstd bomb against a worker's RSS."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from streamplane import model
from streamplane.client import CoordinatorClient, PartitionFetcher, Producer
from streamplane.client.consumer import REASON_HEADER
from streamplane.coordinator.rpc.auth import TokenIssuer, load_keys
from streamplane.devstack.cluster_control import LocalClusterControl
from streamplane.devstack.kafka import KafkaBroker
from streamplane.errors import StreamplaneError
from tests.helpers import Proc, free_port, real_kafka_jars, start_coordinator, wait_until

WORKER = str(Path(__file__).parents[1] / "e2e_worker.py")
TOTAL = int(os.environ.get("STREAMPLANE_E2E_RECORDS", "200000"))
PARTITIONS = 8
GROUP = "e2e"
STREAM = "events"
MAX_ATTEMPTS = 3


class Stack:
    """Two clusters, a and b, and a coordinator on a fixed port (so it can be restarted where clients look).
    The mock engine: a local cluster process of 3 brokers each; the kafka engine: a real broker (its own JVM)
    each. Authentication is on, as in production: the test itself acts with an admin token (STREAMPLANE_TOKEN,
    set by the fixture), producers with a `producer` token and workers with a `consumer` token, each scoped to
    the stream and group."""

    def __init__(self, tmp: Path, engine: str) -> None:
        self.tmp, self.engine = tmp, engine
        self.key = tmp / "token.key"
        self.issuer = TokenIssuer.of(load_keys(self.key, create=True))
        self.clusters: dict[str, model.Cluster] = {}
        self._procs: list[Proc] = []
        self._brokers: dict[str, KafkaBroker] = {}
        if engine == "kafka":
            self._brokers = {name: KafkaBroker(tmp / "kafka" / name) for name in ("a", "b")}
            starting = [threading.Thread(target=b.start) for b in self._brokers.values()]
            for t in starting:
                t.start()
            for t in starting:
                t.join()
            for name, broker in self._brokers.items():
                self.clusters[name] = model.Cluster(name, broker.bootstrap_servers, admin=model.ADMIN_KAFKA)
        else:
            for name in ("a", "b"):
                proc = Proc([sys.executable, "-m", "streamplane.devstack.mockcluster", "--name", name])
                info = proc.wait_for(r'"bootstrap_servers": "([^"]+)", "control_endpoint": "([^"]+)"')
                self._procs.append(proc)
                self.clusters[name] = model.Cluster(
                    name, info.group(1), admin=model.ADMIN_LOCAL, control_endpoint=info.group(2)
                )
        self.port = free_port()
        self.endpoints = [c.control_endpoint for c in self.clusters.values() if c.control_endpoint]
        self.coordinator, self.address = start_coordinator(
            tmp / "coordinator", self.port, control_endpoints=self.endpoints, token_key=self.key
        )

    def token(self, role: str, subject: str) -> str:
        """A token of `role`, scoped to the stream (and, for a consumer, the group) as an operator issues it."""
        groups = (GROUP,) if role == "consumer" else ()
        scope = {"streams": (STREAM,), "groups": groups} if role in ("producer", "consumer") else {}
        return self.issuer.create(subject, role, now_s=time.time(), ttl_s=3600, **scope)

    def restart_coordinator(self) -> None:
        self.coordinator.stop()
        self.coordinator, _ = start_coordinator(
            self.tmp / "coordinator", self.port, control_endpoints=self.endpoints, token_key=self.key
        )

    def bootstrap(self, name: str) -> str:
        return self.clusters[name].bootstrap_servers

    def broker_down(self, name: str, topic: str) -> None:
        """A broker of cluster `name` stops answering for half of `topic`'s partitions (mock: they lead on a
        broker that goes down; kafka: the cluster's one broker is paused, so every fetch hangs)."""
        if self.engine == "kafka":
            os.kill(self._brokers[name].pid, signal.SIGSTOP)
            return
        control = LocalClusterControl(self.clusters[name].control_endpoint, name=name)
        for p in range(PARTITIONS // 2):
            control.set_leader(topic, p, 1)
        control.broker_down(1)

    def broker_up(self, name: str) -> None:
        if self.engine == "kafka":
            os.kill(self._brokers[name].pid, signal.SIGCONT)
        else:
            LocalClusterControl(self.clusters[name].control_endpoint, name=name).broker_up(1)

    def own(self, proc: Proc) -> Proc:
        """Stop `proc` with the stack (a worker a test killed or stopped already is passed over)."""
        self._procs.insert(0, proc)  # workers stop before the clusters they read
        return proc

    def stop(self) -> None:
        self.coordinator.stop()
        for proc in self._procs:
            proc.stop()
        for broker in self._brokers.values():
            broker.stop()


def _stack(tmp: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> Stack:
    s = Stack(tmp, engine)
    monkeypatch.setenv("STREAMPLANE_TOKEN", s.token("admin", "e2e-operator"))
    with CoordinatorClient(s.address) as client:
        for cluster in s.clusters.values():
            client.register_cluster(cluster)
        client.create_stream(STREAM, PARTITIONS, cluster="a")
        client.configure_group(GROUP, "realtime", MAX_ATTEMPTS)
    return s


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    s = _stack(tmp_path, "mock", monkeypatch)
    yield s
    s.stop()


@pytest.fixture(params=["mock", "kafka"])
def on_engine(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    if request.param == "kafka":
        real_kafka_jars()
    s = _stack(tmp_path, request.param, monkeypatch)
    yield s
    s.stop()


def worker(stack: Stack, name: str, **extra: object) -> Proc:
    out = stack.tmp / f"{name}.ids"
    proc = Proc(
        [sys.executable, WORKER, stack.address, GROUP, STREAM, name, str(out), json.dumps(extra)],
        env={"STREAMPLANE_TOKEN": stack.token("consumer", f"worker-{name}")},
    )
    proc.wait_for(r'"event": "started"')
    return stack.own(proc)  # a test that fails (or forgets) still leaves no worker running after it


class LagProbe:
    """Samples the group's time lag every 250 ms (skipping while the coordinator is away)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                with CoordinatorClient(self.address, timeout_s=2, retries=0) as client:
                    lag = client.lag(GROUP, STREAM, "realtime")
                self.samples.append((time.monotonic(), max((p.time_lag_ms for p in lag.partitions), default=0)))
            except StreamplaneError:
                continue

    def recovered_after(self, t: float, within_s: float = 10.0, under_ms: int = 2000) -> float | None:
        """Seconds after `t` until the first sample under `under_ms` (None if none within `within_s`)."""
        for at, lag_ms in self.samples:
            if t <= at <= t + within_s and lag_ms < under_ms:
                return at - t
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def produce_all(address: str, done: threading.Event, errors: list, token: str) -> None:
    """TOTAL records over about 20 s, with a `producer` token; every 1000th is poison."""
    with Producer(address, token=token, **{"linger.ms": 20}) as producer:
        started = time.monotonic()
        for i in range(TOTAL):
            value = b"poison-%d" % i if i % 1000 == 999 else b"id-%d" % i
            producer.produce(
                STREAM, value, key=b"%d" % i, on_delivery=lambda err, msg: err is not None and errors.append(err)
            )
            if i % 1000 == 0:
                ahead = started + i / (TOTAL / 20) - time.monotonic()
                if ahead > 0:  # paced over 20 s of real time, so every fault below lands while records flow
                    time.sleep(ahead)  # paces the producer (see the comment above)
        left = producer.flush(60)
    assert left == 0
    done.set()


def read_topic(bootstrap: str, topic: str, partitions: int) -> list:
    out = []
    for p in range(partitions):
        f = PartitionFetcher(bootstrap, topic, p)
        while (got := f.fetch()).batch is not None or got.skipped:
            out += list(got.batch.records()) if got.batch is not None else []
        f.close()
    return out


class Row(NamedTuple):
    """One line of a worker's file: a record processed (or failed) by a lease holder at a time."""

    failed: bool
    value: bytes
    lease: str
    epoch: int
    at_ms: int


def rows(stack: Stack, workers: dict[str, Proc]) -> list[Row]:
    out = []
    for name in workers:
        path = stack.tmp / f"{name}.ids"
        for line in path.read_bytes().splitlines() if path.exists() else ():
            parts = line.split(b" ")
            failed = parts[0] == b"failed"
            if failed:
                parts = parts[1:]
            if len(parts) == 4:  # a line cut by kill -9 is left out
                out.append(Row(failed, parts[0], parts[1].decode(), int(parts[2]), int(parts[3])))
    return out


def test_records_survive_failover_kill9_join_restart_broker_fault_and_poison(on_engine: Stack) -> None:
    stack = on_engine
    workers = {"w1": worker(stack, "w1", retry_backoff_s=0.2), "w2": worker(stack, "w2", retry_backoff_s=0.2)}
    probe = LagProbe(stack.address)
    produced, errors = threading.Event(), []
    ingest = stack.token("producer", "e2e-ingest")
    producer = threading.Thread(target=produce_all, args=(stack.address, produced, errors, ingest))
    producer.start()
    faults: dict[str, float] = {}
    started, started_ms = time.monotonic(), time.time_ns() // 1_000_000
    try:
        time.sleep(4)  # fault script: each fault 4 s of real traffic after the previous one
        with CoordinatorClient(stack.address) as client:
            client.failover(STREAM, "realtime", "b", reason="e2e drill")
        faults["failover"] = time.monotonic()
        time.sleep(4)  # real traffic between faults
        workers["w1"].kill9()
        faults["kill -9"] = time.monotonic()
        workers["w3"] = worker(stack, "w3", retry_backoff_s=0.2)
        faults["join"] = time.monotonic()
        time.sleep(4)  # real traffic between faults
        stack.restart_coordinator()
        faults["coordinator restart"] = time.monotonic()
        time.sleep(4)  # real traffic between faults
        # a broker down under the partitions while a worker joins: revokes wait on leaderless or hung fetches
        stack.broker_down("b", f"sp.{STREAM}.realtime.g2")
        workers["w4"] = worker(stack, "w4", retry_backoff_s=0.2)
        faults["broker down + join"] = time.monotonic()
        time.sleep(3)  # the fault's duration: the broker stays down while the worker joins
        stack.broker_up("b")
        producer.join(timeout=120)
        assert produced.is_set() and not errors, errors[:3]

        poison = {b"poison-%d" % i for i in range(TOTAL) if i % 1000 == 999}
        wanted = {b"id-%d" % i for i in range(TOTAL) if i % 1000 != 999}
        dlq_topic = f"sp.{STREAM}.dlq.g1"

        def processed() -> Counter[bytes]:
            """How often each value was processed; failures count under b"failed <value>"."""
            return Counter(b"failed " + r.value if r.failed else r.value for r in rows(stack, workers))

        def missing() -> str:
            left = sorted(wanted - set(processed()))
            return f"{len(left)} records not processed, e.g. {left[:5]}"

        def dlq_missing() -> str:
            left = sorted(poison - {r.value for r in read_topic(stack.bootstrap("a"), dlq_topic, PARTITIONS)})
            return f"{len(left)} poison records not in the dlq lane, e.g. {left[:5]}"

        wait_until(lambda: wanted <= set(processed()), timeout=90, what=missing)
        wait_until(lambda: dlq_missing().startswith("0 "), timeout=60, what=dlq_missing)

        def progress() -> dict[str, tuple[int, int, int, int]]:
            """(low watermark, high watermark, rejects, retries) of every realtime partition of the group."""
            with CoordinatorClient(stack.address) as client:
                leases = [x.lease_id for x in client.describe_group(GROUP).leases if "/realtime/" in x.lease_id]
                got = {lid: client.progress(GROUP, lid, max_ranges=1) for lid in leases}
            return {lid: (p.low_watermark, p.high_watermark, p.rejects, p.retries) for lid, p in got.items()}

        def all_done() -> bool:
            now = progress()
            return len(now) == 2 * PARTITIONS and all(low == high for low, high, _, _ in now.values())

        # everything done in the commit log: poison offsets can only be done by their reject
        wait_until(all_done, timeout=60, what=lambda: str(progress()))
        assert sum(r for _, _, r, _ in progress().values()) >= len(poison)
    finally:
        probe.stop()
        for proc in workers.values():
            proc.stop()

    done = rows(stack, workers)
    seen = processed()
    assert not (set(seen) & poison), "a poison record was recorded as processed"
    assert wanted <= set(seen)
    dlq = read_topic(stack.bootstrap("a"), dlq_topic, PARTITIONS)
    reasons = {r.value: dict(r.headers)[REASON_HEADER] for r in dlq}
    assert set(reasons) == poison, f"{len(poison - set(reasons))} poison records missing from the dlq lane"
    assert all(r.startswith(b"max attempts reached; last error: ValueError") for r in reasons.values())
    copies = Counter(r.value for r in dlq)
    twice = sorted(v for v, n in copies.items() if n == 2)
    print(f"\ndlq: {len(poison)} poison records, {len(twice)} copied twice (a holder crashed between copy and mark)")
    assert max(copies.values()) <= 2, f"a poison record copied more than twice: {copies.most_common(3)}"
    assert len(twice) <= len(poison) // 2, "a second copy only after a crash of the holder"

    # attempts: at least the limit, and at most the limit plus one per move of the record's lease
    failures: Counter[bytes] = Counter(r.value for r in done if r.failed)
    epochs: dict[str, set[int]] = {}
    lease_of: dict[bytes, str] = {}
    for r in done:
        epochs.setdefault(r.lease, set()).add(r.epoch)
        lease_of[r.value] = r.lease
    short = {p: failures[p] for p in poison if failures[p] < MAX_ATTEMPTS}
    assert not short, f"poison records rejected before {MAX_ATTEMPTS} attempts: {list(short.items())[:5]}"
    over = {p: failures[p] for p in poison if failures[p] > MAX_ATTEMPTS + len(epochs[lease_of[p]]) - 1}
    assert not over, f"more attempts than the limit plus one per lease move: {list(over.items())[:5]}"

    # duplicates, by the fault they followed; a broker fault with a clean revoke duplicates nothing
    first: dict[bytes, int] = {}
    by_fault: Counter[str] = Counter()
    at_ms = {name: started_ms + (at - started) * 1000 for name, at in faults.items()}
    for r in sorted(done, key=lambda r: r.at_ms):
        if r.failed or r.value not in wanted:
            continue
        if r.value in first:
            after = [name for name, t in at_ms.items() if t <= r.at_ms]
            by_fault[after[-1] if after else "before any fault"] += 1
        first.setdefault(r.value, r.at_ms)
    duplicates = sum(by_fault.values())
    print(f"processed {len(wanted)} records at least once; duplicates {duplicates} ({duplicates / len(wanted):.2%})")
    for name in [*faults, "before any fault"]:
        print(f"  duplicates after {name}: {by_fault[name]}")
    assert by_fault["broker down + join"] == 0, "a broker fault with a rebalance duplicated records"
    peak = max(lag for _, lag in probe.samples)
    print(f"{len(probe.samples)} time-lag samples, the highest {peak} ms")
    assert len(probe.samples) > 40, "the time lag was hardly observed"
    for fault, at in faults.items():
        took = probe.recovered_after(at)
        print(f"time lag under 2 s {took:.1f} s after {fault}" if took is not None else f"no recovery after {fault}")
        assert took is not None, f"time lag did not fall under 2 s within 10 s after the {fault}"


def test_a_zstd_bomb_keeps_the_worker_under_its_memory_limit(stack: Stack) -> None:
    from confluent_kafka import Producer as KafkaProducer

    limit = 64 << 20
    w = worker(stack, "bomb", max_decompressed=8 << 20, max_buffered_bytes=limit)

    def rss_kib(field: str) -> int:
        status = Path(f"/proc/{w.popen.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field)))

    baseline_kib = rss_kib("VmRSS:")
    try:
        raw = KafkaProducer(
            {"bootstrap.servers": stack.bootstrap("a"), "compression.type": "zstd", "message.max.bytes": 200 << 20}
        )
        topic = f"sp.{STREAM}.realtime.g1"
        raw.produce(topic, b"id-before", partition=0)
        raw.produce(topic, b"\0" * (128 << 20), partition=0)  # 128 MiB of zeros: a few KB as zstd
        raw.produce(topic, b"id-after", partition=0)
        assert raw.flush(30) == 0
        del raw
        out = stack.tmp / "bomb.ids"
        wait_until(lambda: out.exists() and b"\nid-after " in b"\n" + out.read_bytes(), timeout=30)
        peak_kib = rss_kib("VmHWM:")
    finally:
        w.stop()
    print(
        f"\nworker RSS {baseline_kib >> 10} MiB at start, peak {peak_kib >> 10} MiB with a 128 MiB bomb "
        f"(buffer limit {limit >> 20} MiB)"
    )
    assert (peak_kib - baseline_kib) * 1024 < limit, "the worker held more than its buffer limit"
