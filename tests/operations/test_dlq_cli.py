"""`streamplane dlq list` (issue 38): a stream's rejected records through the real CLI and a real coordinator,
a table for people and JSON for programs, page after page; bad input gets one sentence and exit 2."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

from streamplane.client import CoordinatorClient
from streamplane.model import Commit, DlqLocation, LeaseCommit, Reject, Retry
from tests.helpers import cli, register_local_clusters, wait_until


def test_dlq_list_shows_each_reject_with_its_origin_attempts_reason_and_copy(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    address = coordinator.address
    register_local_clusters(address, bootstrap, control.endpoint, ("east",))
    stream = f"dl-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 2, cluster="east")
        lid = f"{stream}/realtime/g1/p1"
        client.commit("billing", LeaseCommit(lid, 0, Commit(retries=[Retry(4, 1, "timeout")], high_watermark=5)))
        copy = DlqLocation(stream, "dlq", 1, 0, 12)
        rejects = [Reject(4, "schema: no field amount", copy)] + [Reject(o, f"bad {o}") for o in range(100, 130)]
        client.commit("billing", LeaseCommit(lid, 0, Commit(rejects=rejects, high_watermark=131)))
        client.commit("audit", LeaseCommit(lid, 0, Commit(rejects=[Reject(7, "audit says no")], high_watermark=8)))

    table = cli("dlq", "list", stream, "--group", "billing", "--limit", "3", coordinator=address)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:6] == ["GROUP", "LANE", "GEN", "PARTITION", "OFFSET", "ATTEMPTS"]
    assert lines[1].split()[:6] == ["billing", "realtime", "1", "1", "4", "2"]
    assert "g1/p0@12" in lines[1] and lines[1].endswith("schema: no field amount")
    assert len(lines) == 4 and "3 rejected record(s) shown" in table.stderr

    every = cli("--output", "json", "dlq", "list", stream, "--page-size", "7", coordinator=address)
    assert every.returncode == 0, every.stderr
    found = json.loads(every.stdout)
    assert [(r["group"], r["offset"]) for r in found] == [("audit", 7), ("billing", 4)] + [
        ("billing", o) for o in range(100, 130)
    ], "every group's, in order, across pages of 7"
    assert found[1]["partition"] == {"stream": stream, "lane": "realtime", "generation": 1, "partition": 1}
    assert found[1]["attempts"] == 2 and found[1]["rejected_ms"] > 0 and found[1]["dlq"]["offset"] == 12

    later = cli("--output", "json", "dlq", "list", stream, "--since", "1h", coordinator=address)
    assert len(json.loads(later.stdout)) == 32, "rejected within the hour: all of them"
    none = cli("dlq", "list", stream, "--since", "2999-01-01T00:00:00Z", coordinator=address)
    assert none.returncode == 0 and "(none)" in none.stdout


def test_dlq_purge_stops_listing_what_was_rejected_before_a_time(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    address = coordinator.address
    register_local_clusters(address, bootstrap, control.endpoint, ("east",))
    stream = f"dp-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 1, cluster="east")
        rejects = [Reject(o, f"bad {o}") for o in range(40)]
        client.commit("g", LeaseCommit(f"{stream}/realtime/g1/p0", 0, Commit(rejects=rejects, high_watermark=41)))
    future = cli("dlq", "purge", stream, "--before", "2999-01-01T00:00:00Z", coordinator=address)
    assert future.returncode != 0 and "future" in future.stderr and "Traceback" not in future.stderr
    dry = cli("dlq", "purge", stream, "--before", "2999-01-01T00:00:00Z", "--dry-run", coordinator=address)
    assert dry.returncode != 0, "a time in the future is refused, dry run or not"
    soon = cli("dlq", "purge", stream, "--before", "0s", coordinator=address)
    assert soon.returncode == 2 and "must be a time like" in soon.stderr
    dry = cli("dlq", "purge", stream, "--before", "2026-01-01T00:00:00Z", "--dry-run", coordinator=address)
    assert dry.returncode == 0 and "would purge 0 reject(s)" in dry.stdout, "none was rejected before 2026"
    committed_ms = int(time.time() * 1000)
    wait_until(lambda: int(time.time() * 1000) > committed_ms)  # a time strictly after the rejects' (in ms)
    now = datetime.now(UTC).isoformat()
    done = cli("dlq", "purge", stream, "--group", "g", "--before", now, coordinator=address)
    assert done.returncode == 0 and done.stdout.startswith("purged 40 reject(s)"), done.stdout + done.stderr
    assert "dlq purge: purged 40 so far" in done.stderr, "its progress"
    assert "(none)" in cli("dlq", "list", stream, coordinator=address).stdout
    every = cli("dlq", "list", stream, "--all", coordinator=address)
    assert every.stdout.count(" purged ") == 40, every.stdout


def test_dlq_list_refuses_bad_input_with_one_sentence(coordinator) -> None:
    for args, says in (
        (["--since", "yesterday"], "must be a time like"),
        (["--since", "2026-11-27T14:00:00"], "no time zone"),
        (["--page-size", "0"], "positive"),
    ):
        done = cli("dlq", "list", "s", *args, coordinator=coordinator.address)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    unknown = cli("dlq", "list", "no-such-stream", coordinator=coordinator.address)
    assert unknown.returncode != 0 and "stream 'no-such-stream' does not exist" in unknown.stderr, unknown.stderr
    bad = cli("dlq", "list", "Not A Stream", coordinator=coordinator.address)
    assert bad.returncode != 0 and "stream" in bad.stderr and "Traceback" not in bad.stderr


def test_a_mistyped_group_or_stream_is_told_so_not_shown_an_empty_dlq_or_no_lag(coordinator, local_cluster) -> None:
    """`dlq list/purge/redrive --group` and `lag` on a group that never read the stream (a typo) used to answer
    "0 records" and "offset lag 0": a script or a person took the typo for a healthy group."""
    bootstrap, control = local_cluster
    address = coordinator.address
    register_local_clusters(address, bootstrap, control.endpoint, ("east",))
    stream = f"dt-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 1, cluster="east")
        rejects = [Reject(o, f"bad {o}") for o in range(5)]
        client.commit("billing", LeaseCommit(f"{stream}/realtime/g1/p0", 0, Commit(rejects=rejects, high_watermark=5)))
    for args in (
        ["dlq", "list", stream, "--group", "bililng"],
        ["dlq", "purge", stream, "--before", "1m", "--group", "bililng"],
        ["dlq", "redrive", stream, "--group", "bililng"],
    ):
        done = cli(*args, coordinator=address)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert f"group 'bililng' has never read stream {stream}: it has no rejects" in done.stderr, done.stderr
    lane = cli("dlq", "list", stream, "--lane", "realtme", coordinator=address)
    assert lane.returncode == 3 and f"lane 'realtme' does not exist in stream '{stream}'" in lane.stderr, lane.stderr
    typo = cli("lag", "bililng", coordinator=address)
    assert typo.returncode == 3 and "group 'bililng' has committed nothing on any stream" in typo.stderr, typo.stderr
    assert typo.stdout == "", "nothing that looks like a lag of 0"
    nowhere = cli("lag", "billing", "--stream", "no-such-stream", coordinator=address)
    assert nowhere.returncode == 3 and "stream 'no-such-stream' does not exist" in nowhere.stderr
    assert nowhere.stdout == ""
    real = cli("--output", "json", "lag", "billing", "--stream", stream, coordinator=address)
    assert real.returncode == 0, real.stderr
    assert [x["dlq_pending"] for x in json.loads(real.stdout)["lanes"]] == [5], "the refusals changed nothing"
