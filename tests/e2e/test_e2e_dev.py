"""End to end: `streamplane dev` in a subprocess, driven by the real CLI, killed with -9 and restarted."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streamplane.client import Consumer, Producer
from streamplane.devstack.fault_control import DevControl
from tests.helpers import cli, real_kafka_jars, scoped_token, start_dev, wait_until


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def _check_state(address: str, data_dir: Path) -> None:
    """describe, inspect and events all show g2 active on local-b and g1 left behind on local-a: sealed within
    moments (no producer session holds it), and, as nobody wrote to it, drained at once after that."""
    settled = re.compile(r"g1\s+drained\s+local-a\s+sp\.logs\.realtime\.g1")
    wait_until(lambda: settled.search(cli("stream", "describe", "logs", coordinator=address).stdout))
    described = cli("stream", "describe", "logs", coordinator=address)
    assert described.returncode == 0, described.stderr
    assert re.search(r"g2\s+active\s+local-b\s+sp\.logs\.realtime\.g2", described.stdout)

    as_json = json.loads(cli("--output", "json", "stream", "describe", "logs", coordinator=address).stdout)
    realtime = next(lane for lane in as_json["lanes"] if lane["name"] == "realtime")
    assert [(g["number"], g["state"]) for g in realtime["generations"]] == [
        (1, "drained"),
        (2, "active"),
    ]

    inspected = cli("inspect", "gen/logs/realtime", env={"STREAMPLANE_DATA_DIR": str(data_dir)})
    assert inspected.returncode == 0, inspected.stderr
    lines = inspected.stdout.splitlines()
    assert len(lines) == 2
    assert "('streamplane', 'gen', 'logs', 'realtime', 1)" in lines[0] and '"state": "drained"' in lines[0]
    assert "('streamplane', 'gen', 'logs', 'realtime', 2)" in lines[1] and '"state": "active"' in lines[1]

    events = cli("events", coordinator=address)
    assert events.returncode == 0, events.stderr
    assert "stream_created logs" in events.stdout
    assert "failed_over logs/realtime g1@local-a (draining) -> g2@local-b reason='drill'" in events.stdout
    assert "generation_sealed logs/realtime g1 end_offsets=[0,0,0,0] (no live producer session)" in events.stdout
    assert "generation_drained logs/realtime g1" in events.stdout


def test_dev_stack_cli_failover_kill9_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    proc, address, clusters = start_dev(data_dir)
    try:
        assert set(clusters) == {"local-a", "local-b"}
        created = cli("stream", "create", "logs", "--partitions", "4", "--cluster", "local-a", coordinator=address)
        assert created.returncode == 0, created.stderr
        failover = cli(
            "failover", "logs", "--lane", "realtime", "--to", "local-b", "--reason", "drill", coordinator=address
        )
        assert failover.returncode == 0, failover.stderr
        assert "g2 on local-b" in failover.stdout
        assert "sp.logs.realtime.g2" in _topics(clusters["local-b"])
        _check_state(address, data_dir)
        events_before = cli("events", coordinator=address).stdout.splitlines()
    finally:
        proc.kill9()

    proc, address, clusters = start_dev(data_dir)
    try:
        _check_state(address, data_dir)
        # the local clusters are new processes: the restart re-created the topic of every generation not drained
        assert "sp.logs.dlq.g1" in _topics(clusters["local-a"])
        assert "sp.logs.realtime.g1" not in _topics(clusters["local-a"]), "drained: nothing to read there"
        assert "sp.logs.realtime.g2" in _topics(clusters["local-b"])
        events_after = cli("events", coordinator=address).stdout.splitlines()
        assert events_after[: len(events_before)] == events_before
        # a restart adds only the clusters' new addresses; the failed-over generation may also have sealed or
        # drained since (the first stack was killed a moment after the failover, maybe before its sealer's pass),
        # and on a loaded machine the autopilot may find a just-started cluster slow to answer for a moment: its
        # health may change (a failover would not be listed here)
        lifecycle = ("generation_sealed", "generation_drained", "cluster_health_changed")
        after = events_after[len(events_before) :]
        assert all("cluster_updated" in line or any(k in line for k in lifecycle) for line in after), after
        assert sum("cluster_updated" in line for line in after) == 2, after
    finally:
        assert proc.stop() == 0


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_dev_children_exit_when_dev_is_killed(tmp_path: Path) -> None:
    proc, _, _ = start_dev(tmp_path / "dev")
    kids = _children(proc.popen.pid)
    assert len(kids) == 3, "one process per local cluster, and the coordinator"
    proc.kill9()
    wait_until(lambda: not any(_alive(k) for k in kids), what=lambda: "children outlived a killed `streamplane dev`")


@pytest.mark.parametrize("engine", ["mock", "kafka"])
def test_faults_on_a_dev_stack_while_a_producer_and_a_consumer_keep_going(tmp_path: Path, engine: str) -> None:
    """`streamplane fault`, the same on both engines: the coordinator killed with SIGKILL comes back on its port
    while the clusters stay up; a broker goes down and up (on real Kafka, the cluster's only broker: SIGKILL of
    its JVM and a restart); a producer and a consumer group member run through it all and lose nothing."""
    if engine == "kafka":
        real_kafka_jars()
    data_dir = tmp_path / "dev"
    proc, address, clusters = start_dev(data_dir, "--clusters", "1", "--engine", engine)
    broker, ids = (["broker", "local-a", "2"], "2") if engine == "mock" else (["cluster", "local-a"], "1")
    where = ("--data-dir", str(data_dir))
    try:
        assert cli("stream", "create", "f", "--partitions", "4", coordinator=address).returncode == 0
        total, seen, stop = 4000, set(), threading.Event()
        worker_token = scoped_token(address, "consumer", "f", "fg")  # least privilege, as in production
        with Consumer(address, group="fg", stream="f", token=worker_token) as consumer:
            reader = threading.Thread(
                target=consumer.run, args=(lambda m: seen.add(m.value),), kwargs={"stop": stop}, daemon=True
            )
            reader.start()
            with Producer(address, token=scoped_token(address, "producer", "f"), **{"linger.ms": 5}) as producer:

                def produce(lo: int, hi: int) -> None:
                    for i in range(lo, hi):
                        producer.produce("f", b"%d" % i, key=b"%d" % (i % 64))
                        if i % 200 == 0:
                            time.sleep(0.05)  # paces the producer, so faults land while records flow

                produce(0, 1000)
                killed = cli("--output", "json", "fault", "coordinator", "--kill", *where)
                assert killed.returncode == 0, killed.stderr
                got = json.loads(killed.stdout)
                assert got["address"] == address and got["pid"] != got["killed_pid"]
                produce(1000, 2000)
                down = cli("fault", *broker, "--down", *where)
                assert (down.returncode, down.stdout.strip()) == (
                    0,
                    f"cluster local-a: broker(s) {ids} down",
                )
                produce(2000, 3000)
                assert cli("fault", *broker, "--up", *where, timeout=90).returncode == 0
                produce(3000, total)
                assert producer.flush(60) == 0
            wait_until(lambda: len(seen) == total, timeout=60, what=lambda: f"{len(seen)} of {total} processed")
            stop.set()
            reader.join(10)
        assert seen == {b"%d" % i for i in range(total)}
        state = DevControl.find(data_dir).call("/state")
        assert state["clusters"]["local-a"]["bootstrap_servers"] == clusters["local-a"], "the cluster stayed up"
        assert state["coordinator"]["restarts"] == 1
        bad = cli("fault", "broker", "local-a", "7", "--down", *where)
        assert bad.returncode == 2 and "there is no broker 7" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        assert proc.stop() == 0
    gone = cli("fault", "coordinator", "--kill", *where)
    assert gone.returncode == 6 and "start `streamplane dev` first" in gone.stderr


def test_cli_errors_are_one_sentence_with_an_exit_code(tmp_path: Path) -> None:
    proc, address, _ = start_dev(tmp_path / "dev", "--clusters", "1")
    try:
        cases = [
            (["stream", "create", "BAD", "--partitions", "1"], 2, "not a valid name"),
            (["stream", "describe", "missing"], 3, "does not exist"),
            (["group", "describe", "typo"], 3, "group 'typo' does not exist: no worker has joined it"),
            (["failover", "missing", "--to", "local-a"], 3, "does not exist"),
            (["events", "--since", "nope"], 2, "from_version"),
            (
                [
                    "stream",
                    "create",
                    "t",
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "2",
                    "--min-insync-replicas",
                    "3",
                ],
                2,
                "min_insync_replicas (3) cannot exceed replication_factor (2)",
            ),
            (["stream", "create", "t", "--partitions", "1", "--segment-bytes", "4096"], 2, "at least 1048576"),
        ]
        made = cli("stream", "create", "dup", "--partitions", "1", "--retention-ms", "-1", coordinator=address)
        assert made.returncode == 0 and "topic settings: retention.ms=-1" in made.stdout, made
        cases += [
            (["stream", "create", "dup", "--partitions", "1"], 4, "already exists"),
            (["failover", "dup", "--to", "local-a"], 5, "already active"),
        ]
        for args, code, text in cases:
            result = cli(*args, coordinator=address)
            assert (result.returncode, result.stdout) == (code, ""), (args, result)
            assert text in result.stderr and "Traceback" not in result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
    finally:
        proc.stop()
