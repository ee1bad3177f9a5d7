"""Our Kafka client and consumer against a real Apache Kafka broker (Maven Central's, KRaft mode): version
negotiation, incremental fetch sessions, SASL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) over TLS with bad
credentials as one clear error, and the Consumer's whole data path through a coordinator."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Producer
from streamplane.client.consumer.fetch_loop import FetchLoop
from streamplane.client.flow import Budget
from streamplane.client.kafka import ConnectionConfig, KafkaAuthenticationError, KafkaConnection, fetch
from streamplane.devstack.kafka import USERS
from tests.client.test_fetch_loop import Collect
from tests.helpers import real_kafka_jars, wait_until


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its futures resolve
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(timeout=30)


def fill(bootstrap: str, topic: str, partitions: int, n: int, **settings: str) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": "zstd", **settings})
    for i in range(n):
        producer.produce(topic, b"r%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def sasl(broker, mechanism: str, password: str | None = None) -> dict[str, str]:
    user = USERS[0]
    return {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": mechanism,
        "sasl.username": user.name,
        "sasl.password": password or user.password,
        "ssl.ca.location": str(broker.ca_file),
    }


def test_a_real_broker_negotiates_our_newest_versions_and_keeps_a_fetch_session(real_kafka) -> None:
    create_topic(real_kafka.bootstrap_servers, "rk-session", 3)
    fill(real_kafka.bootstrap_servers, "rk-session", 3, 900)
    with KafkaConnection.connect_any(real_kafka.bootstrap_servers) as conn:
        assert conn.versions[18][1] >= 3, "ApiVersions v3 is spoken, no fallback"
        assert conn.version(fetch.KEY, fetch.VERSIONS) == fetch.VERSIONS[1]
    loop = FetchLoop(budget=Budget(100_000, 1 << 30), max_decompressed=4 << 20, max_wait_ms=100)
    loop.start()
    try:
        got = [Collect(loop) for _ in range(3)]
        for p, r in enumerate(got):
            loop.add(f"rk/{p}", real_kafka.bootstrap_servers, "rk-session", p, -1, r)
        wait_until(lambda: sum(len(r.values) for r in got) == 900, timeout=30)
        link = next(iter(loop._links.values()))
        wait_until(lambda: link.session.incremental and link.session.epoch > 2)
        assert loop.connections == 1
        assert sorted(v for r in got for v in r.values) == sorted(b"r%d" % i for i in range(900))
    finally:
        loop.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_over_tls_reads_from_a_broker_that_requires_it(real_kafka, mechanism: str) -> None:
    topic = f"rk-sasl-{mechanism.lower()}"
    create_topic(real_kafka.bootstrap_servers, topic, 2)
    fill(real_kafka.sasl_bootstrap_servers, topic, 2, 200, **sasl(real_kafka, mechanism))  # librdkafka too
    config = ConnectionConfig.from_settings(sasl(real_kafka, mechanism))
    loop = FetchLoop(budget=Budget(100_000, 1 << 30), max_decompressed=4 << 20, default_config=config)
    loop.start()
    try:
        got = [Collect(loop) for _ in range(2)]
        for p, r in enumerate(got):
            loop.add(f"{topic}/{p}", real_kafka.sasl_bootstrap_servers, topic, p, -1, r)
        wait_until(lambda: sum(len(r.values) for r in got) == 200, timeout=30)
    finally:
        loop.close()


def test_a_cluster_that_requires_sasl_is_administered_probed_read_and_redriven_with_its_settings(
    real_kafka, tmp_path
) -> None:
    """A cluster registered by its SASL_SSL listener alone, naming the coordinator's settings for it: the
    coordinator creates its topics, probes it and runs its canary with them, and `doctor` reads its end offsets
    with them; a producer, a consumer (and its dlq copies) and a dlq redrive reach it with their own."""
    from streamplane.cli import doctor
    from streamplane.client.redrive import Redrive
    from streamplane.coordinator.rpc import server
    from streamplane.coordinator.store import StoreConfig, open_store
    from streamplane.coordinator.topology.autopilot import AutopilotConfig
    from streamplane.coordinator.topology.kafka_settings import KafkaSettings
    from tests.helpers import RunningConsumer

    settings = sasl(real_kafka, "SCRAM-SHA-512")
    ours = {"alice": settings}
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        kafka_settings=KafkaSettings(ours),
        autopilot_config=AutopilotConfig(probe_interval_ms=300, canary_every=1, topics_every=1),
    )
    try:
        address, stream = running.address, "rk-secure"
        with CoordinatorClient(address) as client:
            secure = model.Cluster("secure", real_kafka.sasl_bootstrap_servers, config_ref="alice")
            client.register_cluster(secure)
            client.create_stream(stream, 2, cluster="secure")
        with Producer(address, **{"linger.ms": 5, **settings}) as producer:
            for i in range(40):
                producer.produce(stream, b"bad-%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        buggy = RunningConsumer(address, "billing", stream, reject=b"bad-", kafka_config=settings)
        try:
            with CoordinatorClient(address) as client:
                wait_until(
                    lambda: sum(x.dlq_pending for x in client.lag("billing", stream, partitions=False).lanes) == 40,
                    timeout=60,
                )
        finally:
            buggy.stop()
        assert buggy.raised is None and len(buggy.seen) == 40
        with CoordinatorClient(address) as client:
            report = Redrive(client, stream, "billing", **settings).run()
            assert (report.produced, report.unreadable) == (40, 0), "the dlq copies are read over SASL_SSL too"

            def canary_passed() -> bool:
                _, probes = client.cluster_health("secure")
                return any(p.reachable and p.canary_ms > 0 and not p.canary_error for p in probes)

            wait_until(canary_passed, timeout=30, what=lambda: client.cluster_health("secure")[1][-1:])
            assert client.list_clusters()[0].health == model.ClusterHealth.HEALTHY
            # doctor reads the end offsets with the same settings; without them it reports the cluster unread
            looked = doctor.observe(client, stream, "billing", interval_s=0.2, kafka_settings=KafkaSettings(ours))
            ends = [x.end_after for x in looked.partitions if x.lane == "realtime"]
            assert None not in ends and sum(e or 0 for e in ends) == 80, ends
            unread = doctor.observe(client, stream, "billing", interval_s=0.2)
            assert {x.end_after for x in unread.partitions} == {None}
    finally:
        running.stop(0)


def test_bad_credentials_are_one_clear_error_never_a_retry_loop(real_kafka) -> None:
    config = ConnectionConfig.from_settings(sasl(real_kafka, "SCRAM-SHA-512", password="wrong"))
    with pytest.raises(KafkaAuthenticationError, match=r"authentication as 'alice' failed on localhost:\d+"):
        KafkaConnection.connect_any(real_kafka.sasl_bootstrap_servers, config)
    create_topic(real_kafka.bootstrap_servers, "rk-denied", 1)
    loop = FetchLoop(budget=Budget(100, 1 << 30), max_decompressed=4 << 20, default_config=config)
    loop.start()
    try:
        r = Collect(loop)
        loop.add("denied/0", real_kafka.sasl_bootstrap_servers, "rk-denied", 0, -1, r)
        wait_until(lambda: r.errors, timeout=20)
        assert isinstance(r.errors[0], KafkaAuthenticationError)
        threading.Event().wait(1.0)  # given time to retry, it does not: the error stands alone
        assert len(r.errors) == 1
    finally:
        loop.close()


def test_the_consumer_reads_a_stream_on_a_real_cluster(real_kafka, coordinator) -> None:
    with CoordinatorClient(coordinator.address) as client:
        client.register_cluster(
            model.Cluster(name="real", bootstrap_servers=real_kafka.bootstrap_servers, admin=model.ADMIN_KAFKA)
        )
        client.create_stream("rk-orders", 4, cluster="real")
    values = [b"o%d" % i for i in range(5000)]
    with Producer(coordinator.address, **{"linger.ms": 5}) as producer:
        for v in values:
            producer.produce("rk-orders", v, key=v)
        assert producer.flush() == 0
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def handle(batch) -> None:
        with lock:
            seen.update(batch.column("value").to_pylist())

    stop = threading.Event()
    with Consumer(coordinator.address, group="rk-g", stream="rk-orders") as consumer:
        runner = threading.Thread(target=consumer.run_batches, args=(handle,), kwargs={"stop": stop})
        runner.start()
        wait_until(lambda: len(seen) == len(values), timeout=30)

        def lag() -> int:
            with CoordinatorClient(coordinator.address) as client:
                return client.lag("rk-g").offset_lag

        wait_until(lambda: lag() == 0, timeout=20)
        stop.set()
        runner.join()
    assert set(seen) == set(values) and max(seen.values()) == 1


def test_read_committed_leaves_out_an_aborted_transaction(real_kafka) -> None:
    create_topic(real_kafka.bootstrap_servers, "rk-txn", 1)
    producer = KafkaProducer({"bootstrap.servers": real_kafka.bootstrap_servers, "transactional.id": "rk-txn-1"})
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2", b"a3"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce("rk-txn", v, partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    everything = [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3"]
    for read_committed, expected in ((True, [b"c1", b"c2", b"c3"]), (False, everything)):
        loop = FetchLoop(budget=Budget(1000, 1 << 30), max_decompressed=4 << 20, read_committed=read_committed)
        loop.start()
        try:
            r = Collect(loop)
            loop.add("txn/0", real_kafka.bootstrap_servers, "rk-txn", 0, -1, r)
            wait_until(lambda r=r, expected=expected: len(r.values) >= len(expected), timeout=20)
            threading.Event().wait(0.3)  # nothing more arrives after the last committed record
            assert r.values == expected
        finally:
            loop.close()


def test_streamplane_dev_on_real_brokers_keeps_records_across_a_restart(tmp_path) -> None:
    from tests.helpers import cli, start_dev

    real_kafka_jars()
    data = tmp_path / "dev"
    proc, address, clusters = start_dev(data, "--engine", "kafka", "--clusters", "1")
    try:
        assert list(clusters) == ["local-a"]
        created = cli("stream", "create", "kept", "--partitions", "2", coordinator=address)
        assert created.returncode == 0, created.stderr
        with Producer(address) as producer:
            for i in range(20):
                producer.produce("kept", b"v%d" % i, key=b"%d" % i)
            assert producer.flush() == 0
    finally:
        proc.stop()
    proc, address, again = start_dev(data, "--engine", "kafka", "--clusters", "1")
    try:
        assert again["local-a"] != clusters["local-a"], "a new port each start, registered again"
        seen: list[bytes] = []
        with Consumer(address, group="kept-g", stream="kept") as consumer:
            for msg in consumer:
                seen.append(msg.value)
                msg.ack()
                if len(seen) == 20:
                    break
        assert sorted(seen) == sorted(b"v%d" % i for i in range(20)), "the broker's log outlived the restart"
    finally:
        proc.stop()


def test_a_real_broker_reports_where_an_epoch_ends_and_a_truncated_log_is_read_from_there(real_kafka) -> None:
    from tests.client.test_fetch_loop import truncation_under_our_position

    create_topic(real_kafka.bootstrap_servers, "rk-trunc", 1)
    truncation_under_our_position(real_kafka.bootstrap_servers, "rk-trunc")


def test_streamplane_dev_with_sasl_ssl_prints_a_listener_that_takes_its_users(tmp_path) -> None:
    import re

    from tests.helpers import start_dev

    real_kafka_jars()
    proc, _, _ = start_dev(tmp_path / "dev", "--engine", "kafka", "--kafka-security", "sasl_ssl", "--clusters", "1")
    try:
        line = next(x for x in proc.seen if x.startswith("kafka.local-a.sasl_ssl="))
        found = re.match(r"kafka\.local-a\.sasl_ssl=(\S+) ssl\.ca\.location=(\S+) users=(\S+)", line)
        assert found, line
        bootstrap, ca, users = found.groups()
        name, password = users.split(",")[0].split(":")
        settings = {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": name,
            "sasl.password": password,
            "ssl.ca.location": ca,
        }
        with KafkaConnection.connect_any(bootstrap, ConnectionConfig.from_settings(settings)) as conn:
            assert conn.metadata([]).brokers
        settings["sasl.password"] = "wrong"
        with pytest.raises(KafkaAuthenticationError):
            KafkaConnection.connect_any(bootstrap, ConnectionConfig.from_settings(settings)).close()
    finally:
        proc.stop()


def test_sasl_ssl_on_the_mock_engine_is_refused_in_one_sentence(tmp_path) -> None:
    from tests.helpers import cli

    result = cli("dev", "--data-dir", str(tmp_path), "--port", "0", "--kafka-security", "sasl_ssl", timeout=60)
    assert result.returncode == 2
    assert "--kafka-security sasl_ssl needs --engine kafka" in result.stderr


def test_topic_settings_are_applied_on_real_kafka_shown_and_kept_by_failovers(real_kafka, coordinator) -> None:
    from confluent_kafka.admin import ConfigResource

    from streamplane.errors import FailedPreconditionError, NotFoundError

    with CoordinatorClient(coordinator.address) as client:
        for name in ("real", "real-2"):  # one broker under two names: a failover between them
            client.register_cluster(
                model.Cluster(name=name, bootstrap_servers=real_kafka.bootstrap_servers, admin=model.ADMIN_KAFKA)
            )
        settings = model.TopicSettings(
            replication_factor=1, min_insync_replicas=1, retention_ms=3_600_000, segment_bytes=2 << 20
        )
        created = client.create_stream("rk-tuned", 2, cluster="real", topic=settings)
        assert created.stream.topic == settings
        client.failover("rk-tuned", "realtime", "real-2", partitions=3)
        assert client.describe_stream("rk-tuned").topic == settings

        too_many = model.TopicSettings(replication_factor=3)
        with pytest.raises(FailedPreconditionError, match=r"refuses topic sp\.rk-wide\.realtime\.g1.*replication"):
            client.create_stream("rk-wide", 2, cluster="real", topic=too_many)
        with pytest.raises(NotFoundError):
            client.describe_stream("rk-wide")  # nothing half-written

    admin = AdminClient({"bootstrap.servers": real_kafka.bootstrap_servers})
    for topic in ("sp.rk-tuned.realtime.g1", "sp.rk-tuned.dlq.g1", "sp.rk-tuned.realtime.g2"):
        (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        got = {k: v.value for k, v in future.result(timeout=30).items()}
        assert (got["retention.ms"], got["segment.bytes"], got["min.insync.replicas"]) == (
            "3600000",
            str(2 << 20),
            "1",
        ), topic


def test_a_broker_killed_under_its_leaders_mid_stream_loses_no_acknowledged_record(tmp_path) -> None:
    """`streamplane dev --engine kafka --brokers 3`: a stream replicated 3 ways with min.insync.replicas 2; the
    broker leading partition 0 is killed while a producer (acks=all) and a consumer run. Leadership moves to an
    in-sync replica, and every record the producer had acknowledged is processed."""
    from tests.helpers import cli, start_dev

    real_kafka_jars()
    data = tmp_path / "dev"
    proc, address, clusters = start_dev(data, "--engine", "kafka", "--clusters", "1", "--brokers", "3")
    where = ("--data-dir", str(data))
    try:
        bootstrap = clusters["local-a"]
        assert len(bootstrap.split(",")) == 3
        made = cli(
            "stream", "create", "rk-ha", "--partitions", "3", "--replication-factor", "3",
            "--min-insync-replicas", "2", coordinator=address,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def leader(p: int) -> int:
            return (
                admin.list_topics("sp.rk-ha.realtime.g1", timeout=10)
                .topics["sp.rk-ha.realtime.g1"]
                .partitions[p]
                .leader
            )

        acked: set[bytes] = set()
        failed: list[object] = []
        seen: set[bytes] = set()
        lock, stop = threading.Lock(), threading.Event()

        def delivered(err, msg) -> None:
            with lock:
                (failed.append(err) if err is not None else acked.add(msg.value()))

        with Consumer(address, group="rk-ha-g", stream="rk-ha") as consumer:
            reader = threading.Thread(
                target=consumer.run, args=(lambda m: seen.add(m.value),), kwargs={"stop": stop}, daemon=True
            )
            reader.start()
            with Producer(address, **{"linger.ms": 5, "acks": "all"}) as producer:
                for i in range(6000):
                    producer.produce("rk-ha", b"%d" % i, key=b"%d" % i, on_delivery=delivered)
                    if i % 500 == 499:
                        time.sleep(0.1)  # paces the producer, so the broker's kill lands mid-stream
                    if i == 2000:
                        victim = leader(0)
                        down = cli("fault", "broker", "local-a", str(victim), "--down", *where)
                        assert down.returncode == 0, down.stderr
                producer.flush(60)
            wait_until(lambda: leader(0) not in (victim, -1), timeout=30, what=lambda: f"leader {leader(0)}")
            wait_until(
                lambda: acked <= seen, timeout=60, what=lambda: f"{len(acked - seen)} acknowledged not processed"
            )
            stop.set()
            reader.join(15)
        print(f"\n{len(acked)} acknowledged, {len(failed)} failed deliveries, broker {victim} killed mid-stream")
        assert len(acked) == 6000 and not failed, failed[:3]
        up = cli("fault", "broker", "local-a", str(victim), "--up", *where, timeout=90)
        assert up.returncode == 0, up.stderr
    finally:
        proc.stop()
