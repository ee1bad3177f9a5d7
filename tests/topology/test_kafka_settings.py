"""The Kafka settings a cluster names by reference (`config_ref`), given to the coordinator in a file
(`--kafka-settings`): refused in one sentence when they cannot make a connection, a registration naming
settings the coordinator lacks is refused and registers nothing, and a cluster whose settings this replica
lacks is reported unreachable by the health monitor (its loop goes on for the others)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from streamplane import model
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.coordinator.topology.probes import WireProbes
from streamplane.errors import InvalidArgumentError, UnavailableError
from tests.helpers import Domain, cli

SCRAM = {
    "security.protocol": "sasl_plaintext",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "streamplane",
    "sasl.password": "secret",
}


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kafka.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", r"the Kafka settings file .*kafka\.json is not JSON"),
        ("[1, 2]", r"must hold an object: \{reference: \{setting: value\}\}"),
        ('{"prod": "sasl"}', r"each reference names an object of librdkafka settings, not 'prod'"),
        ('{"prod": {"security.protocol": "tls"}}', r"Kafka settings 'prod' in .*: security\.protocol must be one of"),
        (
            '{"prod": {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN"}}',
            r"Kafka settings 'prod' in .*: sasl\.username is required with sasl\.mechanism=PLAIN",
        ),
        (
            '{"prod": {"security.protocol": "ssl", "ssl.ca.location": "/nowhere/ca.pem"}}',
            r"Kafka settings 'prod' in .*: ssl\.ca\.location '/nowhere/ca\.pem' cannot be loaded",
        ),
    ],
)
def test_settings_that_make_no_connection_are_refused_in_one_sentence(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        KafkaSettings.load(written(tmp_path, text))


def test_a_missing_or_bad_file_is_one_sentence_and_neither_the_coordinator_nor_doctor_starts(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"cannot read the Kafka settings file .*absent\.json"):
        KafkaSettings.load(tmp_path / "absent.json")
    bad = written(tmp_path, '{"prod": {"security.protocol": "tls"}}')
    result = cli("coordinator", "--port", "0", "--data-dir", str(tmp_path / "store"), "--kafka-settings", str(bad))
    assert result.returncode == 2, result.stderr
    assert "Kafka settings 'prod'" in result.stderr and "security.protocol must be one of" in result.stderr
    assert "Traceback" not in result.stderr
    doctor = cli("doctor", "logs", "--kafka-settings", str(bad), coordinator="127.0.0.1:1")  # refused before it calls
    assert doctor.returncode == 2 and "security.protocol must be one of" in doctor.stderr, doctor.stderr


def test_a_cluster_reaches_the_settings_it_names_and_one_naming_none_is_plaintext(tmp_path: Path) -> None:
    settings = KafkaSettings.load(written(tmp_path, json.dumps({"prod": SCRAM})))
    secured = model.Cluster("a", "h:9093", config_ref="prod")
    plain = model.Cluster("b", "h:9092")
    assert settings.librdkafka(secured) == SCRAM and settings.librdkafka(plain) == {}
    conn = settings.connection(secured, 2.5)
    assert (conn.sasl_mechanism, conn.sasl_username, conn.timeout_s) == ("SCRAM-SHA-512", "streamplane", 2.5)
    assert settings.connection(plain, 2.5).sasl_mechanism == "" and settings.connection(plain, 2.5).ssl_context is None
    with pytest.raises(UnavailableError, match="cluster c needs Kafka settings 'other', which this coordinator"):
        settings.connection(model.Cluster("c", "h:9093", config_ref="other"), 1.0)


def test_a_registration_naming_settings_the_coordinator_lacks_is_refused_and_registers_nothing() -> None:
    d = Domain()
    d.topology.kafka_settings = KafkaSettings({"prod": SCRAM})
    with pytest.raises(InvalidArgumentError, match=r"config_ref 'prd' names no Kafka settings of this coordinator"):
        d.topology.register_cluster(model.Cluster("east", "h:9093", config_ref="prd"))
    d.topology.kafka_settings = PLAINTEXT
    with pytest.raises(InvalidArgumentError, match="it was started without --kafka-settings"):
        d.topology.register_cluster(model.Cluster("east", "h:9093", config_ref="prod"))
    assert [c.name for c in d.topology.list_clusters()] == []
    d.topology.kafka_settings = KafkaSettings({"prod": SCRAM})
    d.topology.register_cluster(model.Cluster("east", "h:9093", config_ref="prod"))
    assert [c.config_ref for c in d.topology.list_clusters()] == ["prod"]


def test_a_cluster_whose_settings_this_replica_lacks_is_probed_as_unreachable_saying_why() -> None:
    probes = WireProbes(PLAINTEXT)
    try:
        looked = probes.probe(model.Cluster("east", "127.0.0.1:1", config_ref="prod"), timeout_s=1, now_ms=1)
    finally:
        probes.close()
    assert not looked.reachable
    assert "needs Kafka settings 'prod', which this coordinator replica was not given" in looked.error


def _probed_by_a_pilot(topology: Any, clock: Any) -> tuple[set[str], list[str]]:
    """The clusters an autopilot probes over 50 passes (every probe answers "refused"), and its waiting lines."""
    from streamplane.coordinator.topology.autopilot import Autopilot, AutopilotConfig
    from tests.helpers import wait_until

    probed: list[str] = []

    def probe(cluster: model.Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> model.Probe:
        probed.append(cluster.name)
        return model.Probe(cluster.name, now_ms, False, error="refused")

    pilot = Autopilot(topology, lambda: True, AutopilotConfig(probe_interval_ms=100), clock=clock, probe=probe)
    try:
        for _ in range(50):
            clock.advance(100)
            pilot.run_once()
            wait_until(lambda: all(f.done() for f in pilot._running.values()), timeout=5)
        return set(probed), pilot.waiting
    finally:
        pilot.stop()


def _topology(tmp_path: Path) -> tuple[Any, Any]:
    """A Topology given settings "prod", with clusters "secure" (naming them) and "plain", and its clock."""
    from streamplane.clock import ManualClock
    from streamplane.coordinator.store import StoreConfig, open_store
    from streamplane.coordinator.topology.topology import Topology
    from streamplane.testing.cluster_admin import MemoryClusterAdmin

    clock = ManualClock(1_700_000_000_000)
    topology = Topology(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path)),
        MemoryClusterAdmin(),
        clock,
        kafka_settings=KafkaSettings({"prod": SCRAM}),
    )
    topology.register_cluster(model.Cluster("secure", "s:9093", config_ref="prod"))
    topology.register_cluster(model.Cluster("plain", "p:9092"))
    topology.create_stream("logs", 1, "secure")
    return topology, clock


def test_a_replica_not_given_a_clusters_settings_does_not_probe_it_and_says_why_never_failing_it_over(
    tmp_path: Path,
) -> None:
    """A replica started without the Kafka settings a cluster names would find it unreachable on every probe,
    and fail its streams over for its own configuration: it does not probe that cluster, names it in what the
    autopilot waits for, and probes the others."""
    topology, clock = _topology(tmp_path)
    topology.kafka_settings = PLAINTEXT  # this replica was started without the file
    probed, waiting = _probed_by_a_pilot(topology, clock)
    assert probed == {"plain"}, "the cluster whose settings this replica lacks was probed"
    assert any("'secure' needs Kafka settings 'prod', which this replica was not given" in w for w in waiting)
    secure = next(c for c in topology.list_clusters() if c.name == "secure")
    assert secure.health == model.ClusterHealth.HEALTHY
    assert topology.describe_stream("logs").value.require_lane("realtime").active.cluster == "secure"


def test_a_stored_cluster_whose_settings_reference_is_not_text_stops_no_pass(tmp_path: Path) -> None:
    """Bad data in the store: a cluster record whose config_ref is a list (it decodes). The autopilot's passes
    go on, probing the others; that cluster is not probed and is named in what it waits for; a connection asked
    for it is UnavailableError, not a TypeError."""
    from streamplane.coordinator import keys

    topology, clock = _topology(tmp_path)
    raw = json.dumps({"name": "torn", "bootstrap_servers": "t:9092", "config_ref": ["prod"]}).encode()
    topology.db.transact(lambda tr: tr.set(keys.cluster_key("torn"), raw))
    probed, waiting = _probed_by_a_pilot(topology, clock)
    assert probed == {"plain", "secure"}
    assert any("'torn' needs Kafka settings ['prod']" in w for w in waiting), waiting
    torn = next(c for c in topology.list_clusters() if c.name == "torn")
    with pytest.raises(UnavailableError, match="cluster torn needs Kafka settings"):
        topology.kafka_settings.connection(torn, 1.0)


def test_cluster_list_shows_which_settings_each_cluster_is_reached_with(tmp_path: Path) -> None:
    from streamplane.coordinator.rpc import server
    from streamplane.coordinator.store import StoreConfig, open_store

    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        kafka_settings=KafkaSettings({"prod": SCRAM}),
    )
    try:
        address = running.address
        for args in (["east", "--bootstrap", "h1:9093", "--config-ref", "prod"], ["west", "--bootstrap", "h2:9092"]):
            assert cli("cluster", "register", *args, coordinator=address).returncode == 0
        done = cli("cluster", "list", coordinator=address)
        assert done.returncode == 0, done.stderr
        rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
        header = done.stdout.splitlines()[0].split()
        settings = header.index("SETTINGS")
        assert (rows["east"][settings], rows["west"][settings]) == ("prod", "-")
    finally:
        running.stop(0)


def test_a_reload_reaches_each_cluster_with_its_new_settings_and_keeps_what_did_not_change(local_cluster) -> None:
    """A reload (SIGHUP) in place: the probes' connection kept for a cluster whose settings changed is made again
    with the new ones (here TLS against a plaintext broker: it fails, and plaintext again reaches it), the one
    of a cluster whose settings did not change is kept, and a reference the new file lacks is no longer known."""
    from streamplane.coordinator.topology.cluster_admin import _Bounds

    bootstrap, _ = local_cluster
    settings = KafkaSettings({"rotated": {"client.id": "one"}, "steady": {"client.id": "same"}, "gone": {}})
    rotated = model.Cluster("rotated", bootstrap, config_ref="rotated")
    steady = model.Cluster("steady", bootstrap, config_ref="steady")
    probes, bounds = WireProbes(settings), _Bounds(5, settings)
    try:
        assert all(probes.probe(c, timeout_s=5, now_ms=1, topics=False).reachable for c in (rotated, steady))
        marks = bounds.of(rotated), bounds.of(steady)
        stamps = settings.stamp(rotated), settings.stamp(steady)

        tls = {"rotated": {"security.protocol": "ssl"}, "steady": {"client.id": "same"}}
        assert settings.take(KafkaSettings(tls)) == ["gone", "rotated"]
        assert settings.stamp(rotated) != stamps[0] and settings.stamp(steady) == stamps[1]
        assert not settings.knows("gone")
        assert not probes.probe(rotated, timeout_s=5, now_ms=2, topics=False).reachable, "its kept connection"
        assert probes.probe(steady, timeout_s=5, now_ms=2, topics=False).reachable
        assert bounds.of(rotated) is not marks[0] and bounds.of(steady) is marks[1]

        assert settings.take(KafkaSettings({"rotated": {}, "steady": {"client.id": "same"}})) == ["rotated"]
        assert probes.probe(rotated, timeout_s=5, now_ms=3, topics=False).reachable
    finally:
        probes.close()


def test_sighup_reads_the_settings_file_again_and_a_bad_one_is_refused_keeping_the_old(tmp_path: Path) -> None:
    """A replica given --kafka-settings reads the file again on SIGHUP: a reference added there can be
    registered at once; a file that does not load is refused in the log, the settings in use stay, and the
    replica serves on."""
    import signal

    from tests.helpers import Proc, wait_until

    def logged(event: str) -> list[dict[str, Any]]:  # the replica's log lines of that event so far (JSON)
        lines = [line for line in list(proc.stderr) if line.startswith("{") and f'"{event}"' in line]
        return [json.loads(line) for line in lines]

    path = written(tmp_path, json.dumps({"prod": SCRAM}))
    store = str(tmp_path / "store")
    proc = Proc([sys.executable, "-m", "streamplane.cli.main", "coordinator", "--port", "0", "--data-dir", store,
                 "--kafka-settings", str(path)])  # fmt: skip
    try:
        address = proc.wait_for(r"coordinator=(\S+)").group(1)
        refused = cli("cluster", "register", "east", "--bootstrap", "h:9093", "--config-ref", "eu", coordinator=address)
        assert refused.returncode != 0 and "config_ref 'eu' names no Kafka settings" in refused.stderr

        path.write_text(json.dumps({"prod": SCRAM, "eu": {**SCRAM, "sasl.password": "rotated"}}))
        proc.popen.send_signal(signal.SIGHUP)
        wait_until(lambda: logged("kafka_settings.reloaded"), timeout=30, what=lambda: str(proc.stderr[-5:]))
        assert logged("kafka_settings.reloaded")[0]["changed"] == ["eu"]
        done = cli("cluster", "register", "east", "--bootstrap", "h:9093", "--config-ref", "eu", coordinator=address)
        assert done.returncode == 0, done.stderr

        path.write_text("{")
        proc.popen.send_signal(signal.SIGHUP)
        wait_until(lambda: logged("kafka_settings.reload_refused"), timeout=30, what=lambda: str(proc.stderr[-5:]))
        refusal = logged("kafka_settings.reload_refused")[0]
        assert "is not JSON" in refusal["error"] and refusal["kept"] == ["eu", "prod"]
        done = cli("cluster", "register", "west", "--bootstrap", "h:9094", "--config-ref", "eu", coordinator=address)
        assert done.returncode == 0, done.stderr
    finally:
        assert proc.stop() == 0, proc.stderr
