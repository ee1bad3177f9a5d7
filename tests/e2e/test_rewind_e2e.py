"""A live group rewound to a time (issue 38), end to end on both Kafka engines: records written after the time
on a generation that has since failed over and drained, and on the generation after it, are processed again
by the running worker (no restart), the ones before the time are not, and the reopened generation is closed
again once the group has processed it."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime

import pytest

from streamplane.client import CoordinatorClient, Producer
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.model import DRAINED, Commit, LeaseCommit
from tests.helpers import RunningConsumer, cli, issue_token, wait_until

N = 10_000
"""Records written before the time, and after it (the issue's figures)."""


def _produce(address: str, stream: str, values: list[bytes]) -> None:
    with Producer(address, token=issue_token("producer", "ingest"), **{"linger.ms": 20}) as producer:
        for v in values:
            producer.produce(stream, v, key=v)
        assert producer.flush(60) == 0


def test_a_live_group_rewound_to_a_time_processes_again_what_followed_it_on_each_generation(
    secured_engine: str,
) -> None:
    address = secured_engine
    admin = issue_token("admin", "ops")
    stream, group = f"rw-{uuid.uuid4().hex[:8]}", "billing"
    with CoordinatorClient(address, token=admin) as client:
        client.create_stream(stream, 2, cluster="east")
    split = random.Random().randrange(1, N)  # the failover comes at a random point after the time
    print(f"the failover comes after {split} of the {N} records written after the time")
    before = [b"before-%d" % i for i in range(N)]
    after = [b"after-%d" % i for i in range(split)]
    moved = [b"after-%d" % i for i in range(split, N)]
    _produce(address, stream, before)
    cut_ms = int(time.time() * 1000) + 1  # every record so far has a timestamp before it
    wait_until(lambda: time.time() * 1000 > cut_ms + 5, what=lambda: "the clock to pass the cut")
    _produce(address, stream, after)

    worker = RunningConsumer(address, group, stream, token=issue_token("consumer", "worker"))
    try:
        wait_until(
            lambda: len(worker.seen) == N + split, timeout=60, what=lambda: f"{N + split}, saw {len(worker.seen)}"
        )
        with CoordinatorClient(address, token=admin) as client:
            client.failover(stream, "realtime", "west", reason="drill")
        _produce(address, stream, moved)
        wait_until(lambda: len(worker.seen) == 2 * N, timeout=60, what=lambda: f"{2 * N}, saw {len(worker.seen)}")

        def g1_state() -> str:
            with CoordinatorClient(address, token=admin) as client:
                gen = client.describe_stream(stream).require_lane("realtime").generation(1)
                assert gen is not None
                return str(gen.state)

        wait_until(lambda: g1_state() == DRAINED, timeout=60, what=lambda: f"g1 drained, it is {g1_state()}")

        at = datetime.fromtimestamp(cut_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
        operator = {"STREAMPLANE_TOKEN": issue_token("operator", "oncall")}
        preview = cli("group", "rewind", group, stream, "--to-time", at, "--dry-run", coordinator=address, env=operator)
        assert preview.returncode == 0, preview.stderr
        assert f"would rewind group billing on {stream}: 4 partition(s), {N:,} record(s)" in preview.stdout
        assert max(worker.seen.values()) == 1, "a preview changes nothing"

        began = time.monotonic()
        done = cli("group", "rewind", group, stream, "--to-time", at, coordinator=address, env=operator)
        assert done.returncode == 0, done.stderr
        assert f"{N:,} record(s) to process again" in done.stdout
        wait_until(
            lambda: all(worker.seen[v] >= 2 for v in after + moved),
            timeout=60,
            what=lambda: f"{sum(worker.seen[v] >= 2 for v in after + moved)} of {N} processed again",
        )
        followed_s = time.monotonic() - began
        assert all(worker.seen[v] == 2 for v in after + moved), "each record after the time, once more"
        assert all(worker.seen[v] == 1 for v in before), "records before the time are not processed again"
        assert worker.raised is None, "the worker followed the rewind without a restart"
        print(f"the live worker processed the rewound range again within {followed_s:.2f} s")

        def finished() -> bool:
            lines = cli("group", "events", group, coordinator=address, env=operator).stdout
            return "rewind_finished" in lines

        wait_until(finished, timeout=30, what=lambda: "the reopened g1 to be closed again")
        events = cli("group", "events", group, coordinator=address, env=operator).stdout
        assert "group_rewound" in events and "oncall" in events, "the rewind is in the group's log with its actor"
        with CoordinatorClient(address, token=admin) as client:
            wait_until(lambda: client.lag(group, stream=stream).offset_lag == 0, timeout=30)
    finally:
        worker.stop()


def test_a_rewind_past_retention_is_refused_and_changes_nothing(
    secured_engine: str, request: pytest.FixtureRequest
) -> None:
    """Records the group processed are gone from the cluster (the mock keeps 5 MiB a partition; a real
    broker's log start is moved with DeleteRecords): rewinding to them is refused in one sentence, exit 5."""
    address = secured_engine
    admin = issue_token("admin", "ops")
    stream = f"rp-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address, token=admin) as client:
        client.create_stream(stream, 1, cluster="east")
        gen = client.describe_stream(stream).require_lane("realtime").active
        bootstrap = {c.name: c.bootstrap_servers for c in client.list_clusters()}["east"]
    big = request.node.callspec.params["secured_engine"] == "mock"
    values = [b"%05d" % i + (random.randbytes(100_000) if big else b"") for i in range(80)]  # not compressible
    _produce(address, stream, values)
    marks = Watermarks()
    try:
        if not big:
            from confluent_kafka import TopicPartition
            from confluent_kafka.admin import AdminClient

            kafka_admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it alive
            done = kafka_admin.delete_records([TopicPartition(gen.topic, 0, 30)])
            for future in done.values():
                future.result(timeout=30)
        earliest, end = marks.get(bootstrap, gen.topic, 0)
    finally:
        marks.close()
    assert 0 < earliest < end == 80
    lid = f"{stream}/realtime/g1/p0"
    with CoordinatorClient(address, token=admin) as client:
        client.commit("audit", LeaseCommit(lid, 0, Commit(acked=[(0, 80)], high_watermark=80)))

    operator = {"STREAMPLANE_TOKEN": issue_token("operator", "oncall")}
    offsets = json.dumps({"realtime/g1/p0": 0})
    refused = cli("group", "rewind", "audit", stream, "--to-offsets", offsets, coordinator=address, env=operator)
    assert refused.returncode == 5, refused.stderr
    assert f"retention removed offsets below {earliest} (asked from 0)" in refused.stderr
    assert "nothing was rewound; --force rewinds the rest" in refused.stderr
    with CoordinatorClient(address, token=admin) as client:
        assert client.progress("audit", lid).low_watermark == 80, "nothing changed"
        events = list(client.watch_group("audit", follow=False))
    assert not any(e.change == "group_rewound" for e in events)


def test_a_replay_window_on_a_side_group_processes_exactly_that_window_while_the_live_group_runs(
    secured_engine: str,
) -> None:
    address = secured_engine
    admin = issue_token("admin", "ops")
    stream = f"rpw-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address, token=admin) as client:
        client.create_stream(stream, 2, cluster="east")
    live = RunningConsumer(address, "live", stream, token=issue_token("consumer", "live"))
    side = None
    try:

        def cut() -> int:
            at = int(time.time() * 1000) + 1
            wait_until(lambda: time.time() * 1000 > at + 5, what=lambda: "the clock to pass the cut")
            return at

        before = [b"before-%d" % i for i in range(2_000)]
        window = [b"window-%d" % i for i in range(3_000)]
        after = [b"after-%d" % i for i in range(2_000)]
        _produce(address, stream, before)
        t1 = cut()
        _produce(address, stream, window[:1_500])
        with CoordinatorClient(address, token=admin) as client:  # the window spans a failover
            client.failover(stream, "realtime", "west", reason="drill")
        _produce(address, stream, window[1_500:])
        t2 = cut()
        _produce(address, stream, after)

        iso = [datetime.fromtimestamp(t / 1000, UTC).isoformat().replace("+00:00", "Z") for t in (t1, t2)]
        made = cli(
            "group",
            "create",
            "backfill",
            "--stream",
            stream,
            "--from",
            iso[0],
            "--until",
            iso[1],
            coordinator=address,
            env={"STREAMPLANE_TOKEN": issue_token("operator", "oncall")},
        )
        assert made.returncode == 0, made.stderr
        assert f"{len(window):,} record(s)" in made.stdout, made.stdout
        side = RunningConsumer(address, "backfill", stream, token=issue_token("consumer", "backfill"))
        side.thread.join(60)
        assert not side.thread.is_alive(), f"run() returns once the window is processed ({len(side.seen)} seen)"
        assert side.raised is None and side.consumer.finished
        assert set(side.seen) == set(window) and max(side.seen.values()) == 1, "exactly the window, once"
        wait_until(lambda: len(live.seen) == 7_000, timeout=60, what=lambda: f"the live group: {len(live.seen)}")
        assert max(live.seen.values()) == 1, "the live group ran beside it, untouched"
    finally:
        live.stop()
        if side is not None:
            side.stop()


def test_a_window_on_a_quiet_stream_ends_run_soon_after_it_is_processed(secured_engine: str) -> None:
    """No failover, no topology event after the window is made: the sealer is woken by the window itself, so
    run() returns about as soon as the window is processed, not at the sealer's next idle look (10 s)."""
    address = secured_engine
    admin = issue_token("admin", "ops")
    stream = f"qw-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address, token=admin) as client:
        client.create_stream(stream, 2, cluster="east")
    _produce(address, stream, [b"w-%d" % i for i in range(200)])
    with CoordinatorClient(address, token=admin) as client:
        made = client.create_window_group("quiet", stream, from_ms=1, until_ms=int(time.time() * 1000))
    assert made.records == 200
    began = time.monotonic()
    side = RunningConsumer(address, "quiet", stream, token=issue_token("consumer", "quiet"))
    try:
        side.thread.join(8)
        assert not side.thread.is_alive(), f"run() still running {time.monotonic() - began:.1f} s on"
        assert len(side.seen) == 200 and side.raised is None
    finally:
        side.stop()
