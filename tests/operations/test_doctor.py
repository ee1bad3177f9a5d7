"""`streamplane doctor` names the right cause: the pure diagnosis on built observations, and the real CLI on
four staged scenarios against a real coordinator and local Kafka cluster (backlog, a poison record in
retries, a dead cluster with an undrained generation, too few workers)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.doctor import (
    BACKLOG,
    DEAD,
    DRAIN_WAITS,
    PAUSED,
    SHORT,
    STUCK,
    Observation,
    PartitionLook,
    SealedWait,
    diagnose,
    sealed_waits,
)
from tests.helpers import cli, free_port, register_local_clusters, wait_until

# -- the pure diagnosis ------------------------------------------------------------------------------------------


def look(**kw: Any) -> PartitionLook:
    base: dict[str, Any] = dict(
        lane="realtime",
        generation=1,
        partition=0,
        cluster="a",
        state=model.ACTIVE,
        end_before=100,
        end_after=100,
        low_before=100,
        low_after=100,
        holder="w1",
        holder_records_per_s=50.0,
    )
    return PartitionLook(**{**base, **kw})


CLUSTERS = {"a": model.Cluster("a", "x:1"), "b": model.Cluster("b", "y:1")}
MEMBER = model.MemberInfo("w1", "s1", capacity=1.0)


def causes(*parts: PartitionLook, members: tuple[model.MemberInfo, ...] = (MEMBER,), **kw: Any) -> list[str]:
    obs = Observation("s", "g", parts, kw.pop("clusters", CLUSTERS), members, interval_s=1.0, **kw)
    return [f.cause for f in diagnose(obs).findings]


def test_on_time_lanes_have_no_finding() -> None:
    assert causes(look(), look(partition=1, end_before=50, end_after=60, low_before=50, low_after=60)) == []


def test_each_cause_is_named_from_its_evidence() -> None:
    sick = {**CLUSTERS, "a": model.Cluster("a", "x:1", health="unhealthy", health_reasons=["no broker answers"])}
    draining = look(state=model.DRAINING, end_before=None, end_after=None, low_before=40, low_after=40)
    assert causes(draining, look(cluster="b", generation=2), clusters=sick) == [DEAD]
    stuck = look(end_after=200, low_before=40, low_after=40, retrying=(40,), done_above_low=150, time_lag_ms=9000)
    assert causes(stuck) == [STUCK]
    assert causes(look(end_after=300, low_before=10, low_after=10, holder=""), members=()) == [SHORT]
    paused = look(end_after=300, low_before=10, low_after=10, holder_records_per_s=0.0, time_lag_ms=20_000)
    assert causes(paused) == [PAUSED]
    behind = look(end_before=1000, end_after=2000, low_before=100, low_after=600, time_lag_ms=3000)
    assert causes(behind) == [BACKLOG]


def test_a_lane_catching_up_within_its_target_is_not_a_backlog() -> None:
    catching_up = look(end_before=1000, end_after=1100, low_before=100, low_after=600, time_lag_ms=1000)
    assert causes(catching_up) == []
    assert causes(catching_up, target_ms=500) == [BACKLOG]


def test_a_settled_partition_of_a_sick_cluster_is_not_reported() -> None:
    sick = {**CLUSTERS, "a": model.Cluster("a", "x:1", health="unhealthy")}
    done = look(state=model.SEALED, end_before=40, end_after=40, low_before=40, low_after=40)
    assert causes(done, clusters=sick) == []


def test_an_empty_sealed_generation_waits_for_nobody_and_one_with_records_no_group_read_is_named() -> None:
    """The sealer drains an empty sealed generation by itself: it is no wait, so `cluster drain` keeps waiting
    for it instead of giving up on "0 record(s) no group has read" (it did, once, on a loaded machine)."""

    def sealed(number: int, ends: list[int]) -> tuple[str, model.Generation]:
        gen = model.Generation(number, "a", f"t{number}", len(ends), state=model.SEALED, end_offsets=ends)
        return ("dlq", gen)

    assert sealed_waits([sealed(1, [0, 0])], []) == ()
    assert sealed_waits([sealed(1, [0, 0]), sealed(2, [0, 3])], []) == (SealedWait("dlq", 2, "a", 3, ()),)
    read = model.PartitionLag("g", "s/dlq/g2/p1", 2, 3, 1, 0)
    assert sealed_waits([sealed(2, [0, 3])], [read]) == (SealedWait("dlq", 2, "a", 3, ("g",)),)


def test_a_sealed_generation_names_the_other_groups_its_drain_waits_for() -> None:
    waits = (SealedWait("realtime", 1, "a", 150, ("old", "new")),)
    found = diagnose(Observation("s", "new", (look(),), CLUSTERS, (MEMBER,), sealed=waits)).findings
    (finding,) = found
    assert finding.cause == DRAIN_WAITS and "waits for group(s) old to read it to its end" in finding.summary
    assert "streamplane doctor s --group old" in finding.next_steps
    assert any("streamplane group delete GROUP" in step for step in finding.next_steps)
    alone = (SealedWait("realtime", 1, "a", 150, ("new",)),)
    assert diagnose(Observation("s", "new", (look(),), CLUSTERS, (MEMBER,), sealed=alone)).healthy, "its own lag"
    unread = (SealedWait("realtime", 1, "a", 150, ()),)
    (finding,) = diagnose(Observation("s", "new", (look(),), CLUSTERS, (MEMBER,), sealed=unread)).findings
    assert (
        "holds records no group has read" in finding.summary
        and "generation abandon s realtime 1" in (finding.next_steps[0])
    )
    sick = {"a": model.Cluster("a", "x:1", health=model.ClusterHealth.UNHEALTHY)}
    assert not [
        f
        for f in diagnose(Observation("s", "new", (), sick, (MEMBER,), sealed=waits)).findings
        if f.cause == DRAIN_WAITS
    ], "a generation on a sick cluster is dead_cluster's to tell"


# -- the CLI on staged scenarios ------------------------------------------------------------------------------------


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east", "west"))
    return coordinator.address


def doctor(address: str, stream: str, group: str) -> list[dict[str, Any]]:
    done = cli("-o", "json", "doctor", stream, "--group", group, "--interval", "1", coordinator=address)
    assert done.returncode == 0, done.stderr
    assert "looking at" in done.stderr  # it says what it is doing while it samples
    (found,) = json.loads(done.stdout)
    return found["findings"]


def produce(address: str, stream: str, values: list[bytes]) -> None:
    with Producer(address, **{"linger.ms": 5}) as producer:
        for v in values:
            producer.produce(stream, v, key=v)
        assert producer.flush() == 0


def consume_in_background(consumer: Consumer, handle: Any) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
    runner.start()
    return runner, stop


def test_doctor_names_a_backlog(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("d-backlog", 2, cluster="east")
    produce(address, "d-backlog", [b"b%d" % i for i in range(3000)])
    seen = []

    def slow(msg: Message) -> None:
        time.sleep(0.004)  # ~250 records/s: below the input below
        seen.append(msg.offset)

    producing = threading.Event()

    def keep_producing() -> None:
        with Producer(address, **{"linger.ms": 5}) as producer:
            i = 0
            while not producing.is_set():
                for _ in range(100):
                    producer.produce("d-backlog", b"more%d" % i)
                    i += 1
                time.sleep(0.05)  # ~2,000 records/s

    with Consumer(address, group="d-g-backlog", stream="d-backlog", concurrency=1) as consumer:
        runner, stop = consume_in_background(consumer, slow)
        writer = threading.Thread(target=keep_producing, daemon=True)
        writer.start()
        try:
            wait_until(lambda: len(seen) > 200, timeout=20)
            findings = doctor(address, "d-backlog", "d-g-backlog")
        finally:
            producing.set()
            stop.set()
            writer.join()
            runner.join()
    assert [f["cause"] for f in findings] == [BACKLOG], findings
    assert "falling behind" in findings[0]["summary"]
    assert any("input" in e and "processed" in e for e in findings[0]["evidence"])


def test_doctor_names_a_poison_record_in_retries(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("d-poison", 1, cluster="east")
        client.configure_group("d-g-poison", "realtime", 1000)
    produce(address, "d-poison", [b"poison" if i == 10 else b"ok%d" % i for i in range(200)])
    done = set()

    def handle(msg: Message) -> None:
        if msg.value == b"poison":
            raise RuntimeError("cannot parse this record")
        done.add(msg.offset)

    with Consumer(address, group="d-g-poison", stream="d-poison", retry_backoff_s=0.3) as consumer:
        runner, stop = consume_in_background(consumer, handle)
        try:
            wait_until(lambda: len(done) == 199, timeout=20)
            wait_until(lambda: lag_low(address, "d-g-poison") == 10, timeout=10)
            findings = doctor(address, "d-poison", "d-g-poison")
        finally:
            stop.set()
            runner.join()
    assert [f["cause"] for f in findings] == [STUCK], findings
    assert "offset 10 of d-poison/realtime/g1/p0" in findings[0]["summary"]
    assert any("--max-attempts" in step for step in findings[0]["next_steps"])


def lag_low(address: str, group: str) -> int:
    with CoordinatorClient(address) as client:
        parts = client.lag(group).partitions
    return parts[0].low_watermark if parts else -1


def test_doctor_names_a_dead_cluster_holding_an_undrained_generation(address: str, local_cluster) -> None:
    _, control = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("d-dead", 2, cluster="east")
        produce(address, "d-dead", [b"d%d" % i for i in range(100)])
        client.failover("d-dead", "realtime", "west", reason="rehearsal")
        # east goes away: its registration now points where no broker listens
        dead = model.Cluster(
            "east", f"127.0.0.1:{free_port()}", admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint
        )
        client.register_cluster(dead, update_existing=True)
    findings = doctor(address, "d-dead", "d-g-dead")
    assert {f["cause"] for f in findings} == {DEAD}, findings
    stranded, still_written = sorted(findings, key=lambda f: f["lane"] != "realtime")
    assert "g1 of d-dead/realtime is stranded on sick cluster east" in stranded["summary"]
    assert any("generation abandon d-dead realtime 1" in step for step in stranded["next_steps"])
    # the dlq lane was never failed over: it is still written on the dead cluster, and doctor says to move it
    assert still_written["lane"] == "dlq" and "still written to g1 on sick cluster east" in still_written["summary"]
    assert "streamplane failover d-dead --lane dlq" in still_written["next_steps"]


def test_doctor_names_the_retired_group_a_sealed_generation_waits_for(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("d-ret", 2, cluster="east")
        produce(address, "d-ret", [b"r%d" % i for i in range(100)])
        seen: list[int] = []
        with Consumer(address, group="d-g-old", stream="d-ret") as old:  # reads, then retires for good
            runner, stop = consume_in_background(old, lambda msg: seen.append(msg.offset))
            wait_until(lambda: len(seen) == 100, timeout=20)
            stop.set()
            runner.join()
        produce(address, "d-ret", [b"late%d" % i for i in range(50)])
        client.failover("d-ret", "realtime", "west", reason="rehearsal")
        sealed = lambda: client.describe_stream("d-ret").require_lane("realtime").generations[0].state  # noqa: E731
        wait_until(lambda: sealed() == model.SEALED, timeout=20)
        read: list[int] = []
        with Consumer(address, group="d-g-new", stream="d-ret") as new:
            runner, stop = consume_in_background(new, lambda msg: read.append(msg.offset))
            wait_until(lambda: len(read) == 150, timeout=30)
            findings = doctor(address, "d-ret", "d-g-new")
            stop.set()
            runner.join()
    (waits,) = [f for f in findings if f["cause"] == DRAIN_WAITS]
    assert "g1 of d-ret/realtime (sealed on east, 150 records) waits for group(s) d-g-old" in waits["summary"]
    assert "streamplane doctor d-ret --group d-g-old" in waits["next_steps"]
    assert not [f for f in doctor(address, "d-ret", "d-g-old") if f["cause"] == DRAIN_WAITS], "its own lag is told"


def test_doctor_names_too_few_workers(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("d-short", 2, cluster="east")
    produce(address, "d-short", [b"s%d" % i for i in range(100)])
    seen = []
    with Consumer(address, group="d-g-short", stream="d-short") as consumer:
        runner, stop = consume_in_background(consumer, lambda msg: seen.append(msg.offset))
        wait_until(lambda: len(seen) == 100, timeout=20)
        stop.set()
        runner.join()
    produce(address, "d-short", [b"late%d" % i for i in range(500)])  # the group's only worker is gone
    findings = doctor(address, "d-short", "d-g-short")
    assert [f["cause"] for f in findings] == [SHORT], findings
    assert "2 partition(s) of d-short/realtime have no holder" in findings[0]["summary"]
    assert "group d-g-short has no live worker" in findings[0]["evidence"][0]


def test_doctor_refuses_bad_input_in_one_sentence(address: str) -> None:
    done = cli("doctor", "nope", coordinator=address)
    assert done.returncode == 3 and "does not exist" in done.stderr, done.stderr
    with CoordinatorClient(address) as client:
        client.create_stream("d-unread", 1, cluster="east")
    done = cli("doctor", "d-unread", "--interval", "0", coordinator=address)
    assert done.returncode == 2 and "--interval" in done.stderr, done.stderr
    # a group named that never read the stream (a typo) was diagnosed "on time" without a word
    typo = cli("doctor", "d-unread", "--group", "bililng", "--interval", "0.2", coordinator=address)
    assert typo.returncode == 0, typo.stderr
    assert "warning: group 'bililng' has committed nothing on stream d-unread: is the name right?" in typo.stderr
    # and a drain of a cluster that is not registered (a typo) said it was drained
    drain = cli("cluster", "drain", "eats", coordinator=address)
    assert drain.returncode == 3 and "cluster 'eats' is not a registered cluster" in drain.stderr, drain.stderr
    assert "drained" not in drain.stdout


def test_doctor_on_a_stream_no_group_reads_still_says_what_is_written_and_where(address: str) -> None:
    """It used to exit 3 with "no group has committed progress"; a person asking why a stream is late wants the
    rest of the diagnosis anyway."""
    with CoordinatorClient(address) as client:
        client.create_stream("d-noreader", 2, cluster="east")
    produce(address, "d-noreader", [b"u-%d" % i for i in range(300)])
    done = cli("-o", "json", "doctor", "d-noreader", "--interval", "1", coordinator=address)
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)
    assert found["group"] == "" and [f["cause"] for f in found["findings"]] == ["no_reader"]
    (finding,) = found["findings"]
    assert "no group reads stream d-noreader: 300 records wait" in finding["summary"]
    assert "no group has committed progress on it" in finding["evidence"]
    shown = cli("doctor", "d-noreader", "--interval", "0.2", coordinator=address)
    assert shown.returncode == 0 and "doctor: stream d-noreader, no group" in shown.stdout, shown.stderr


def test_doctor_and_lag_show_a_groups_rejects_as_pending_redriven_and_purged(address: str) -> None:
    """Rejects are not a cause of lateness: doctor and lag show them (issue 38), and say what to run."""
    with CoordinatorClient(address) as client:
        client.create_stream("d-dlq", 1, cluster="east")
        rejects = [model.Reject(o, f"bad {o}") for o in range(5)]
        client.commit("d-g-dlq", model.LeaseCommit("d-dlq/realtime/g1/p0", 0, model.Commit(rejects=rejects)))
        cut = int(time.time() * 1000) + 1  # later than the rejects' time, even within the same millisecond
        wait_until(lambda: time.time() * 1000 > cut, what=lambda: "the clock to pass the rejects' time")
        assert list(client.purge_rejects("d-dlq", before_ms=cut, group="d-g-dlq")) == [5]
        late = model.Commit(rejects=[model.Reject(7, "x")], high_watermark=8)
        client.commit("d-g-dlq", model.LeaseCommit("d-dlq/realtime/g1/p0", 0, late))
    shown = cli("doctor", "d-dlq", "--group", "d-g-dlq", "--interval", "0.2", coordinator=address)
    assert shown.returncode == 0, shown.stderr
    assert "dlq: 1 rejected records pending, 0 redriven, 5 purged" in shown.stdout
    assert "streamplane dlq redrive d-dlq --group d-g-dlq" in shown.stdout
    found = cli("-o", "json", "doctor", "d-dlq", "--group", "d-g-dlq", "--interval", "0.2", coordinator=address)
    assert json.loads(found.stdout)[0]["dlq"] == {"pending": 1, "redriven": 0, "purged": 5}
    lag = cli("lag", "d-g-dlq", "--stream", "d-dlq", coordinator=address)
    assert lag.stdout.splitlines()[1].split()[:3] == ["STREAM", "LANE", "OFFSET"]
    assert lag.stdout.splitlines()[2].split()[-4:] == ["1", "0", "5", "0"], "pending, redriven, purged, filtered"
