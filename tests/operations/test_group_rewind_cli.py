"""`streamplane group rewind` (issue 38) through the real CLI and a real coordinator whose Kafka clusters are
held in memory (so a cluster can stop answering): a preview per generation and partition, one transaction
to apply, a refusal in one sentence (exit 5) when a generation cannot be reprocessed unless --force, and a
sentence for every bad input."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from streamplane.client import CoordinatorClient
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.model import Cluster, Commit, LeaseCommit
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import cli

HOUR = 3_600_000


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, MemoryClusterAdmin, int]]:
    """A coordinator over in-memory clusters east and west; logs/realtime (2 partitions) has 20 records per
    partition on east written an hour apart in two halves, then failed over to west with 10 more; group
    billing processed all of it. Yields (address, the clusters, the time of the second half)."""
    admin = MemoryClusterAdmin()
    running = server.start(open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")), admin=admin)
    now = int(time.time() * 1000)
    second_half = now - 2 * HOUR
    with CoordinatorClient(running.address) as client:
        for name in ("east", "west"):
            client.register_cluster(Cluster(name, f"{name}:9092"))
        client.create_stream("logs", 2, cluster="east")
        for p in range(2):
            admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=second_half - HOUR)
            admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=second_half)
        client.failover("logs", "realtime", "west", reason="drill")
        for p in range(2):
            admin.append("west", "sp.logs.realtime.g2", p, 10, ts_ms=now - HOUR)
            for gen, end in ((1, 20), (2, 10)):
                lid = f"logs/realtime/g{gen}/p{p}"
                client.commit("billing", LeaseCommit(lid, 0, Commit(acked=[(0, end)], high_watermark=end)))
    yield running.address, admin, second_half
    running.stop(0)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _lows(address: str) -> list[int]:
    with CoordinatorClient(address) as client:
        return [
            client.progress("billing", f"logs/realtime/g{gen}/p{p}").low_watermark for gen in (1, 2) for p in range(2)
        ]


def test_a_dry_run_shows_each_generation_and_partition_and_changes_nothing(fleet) -> None:
    address, _, second_half = fleet
    shown = cli("group", "rewind", "billing", "logs", "--to-time", _iso(second_half), "--dry-run", coordinator=address)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["LANE", "GEN", "STATE", "PARTITION", "FROM", "OFFSET", "AGAIN"]
    rows = [line.split() for line in lines[1:5]]
    assert [r[:2] + r[3:] for r in rows] == [
        ["realtime", "1", "0", "10", "10"],  # the second half of g1, on east
        ["realtime", "1", "1", "10", "10"],
        ["realtime", "2", "0", "0", "10"],  # all of g2, on west
        ["realtime", "2", "1", "0", "10"],
    ]
    assert {r[2] for r in rows[:2]} <= {"draining", "sealed", "drained"} and {r[2] for r in rows[2:]} == {"active"}
    assert lines[-1] == "would rewind group billing on logs: 4 partition(s), 40 record(s) to process again"
    assert _lows(address) == [20, 20, 10, 10]


def test_applying_a_rewind_moves_the_group_back_and_is_in_its_log(fleet) -> None:
    address, _, second_half = fleet
    done = cli(
        "--output", "json", "group", "rewind", "billing", "logs", "--to-time", _iso(second_half), coordinator=address
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["applied"] is True and len(plan["positions"]) == 4 and plan["lost"] == []
    assert _lows(address) == [10, 10, 0, 0]
    events = cli("group", "events", "billing", coordinator=address)
    assert "group_rewound" in events.stdout and "4 partition(s), 40 record(s) again" in events.stdout

    offsets = json.dumps({"realtime/g2/p1": 4, "logs/realtime/g1/p0": 15})
    again = cli("group", "rewind", "billing", "logs", "--to-offsets", offsets, coordinator=address)
    assert again.returncode == 0, again.stderr
    assert _lows(address) == [10, 10, 0, 0], "behind those offsets already: nothing to forget"


def test_a_generation_that_cannot_be_reprocessed_refuses_the_rewind_unless_forced(fleet) -> None:
    address, admin, second_half = fleet
    admin.down.add("east")
    refused = cli("group", "rewind", "billing", "logs", "--to-time", _iso(second_half), coordinator=address)
    assert refused.returncode == 5, refused.stderr
    assert "1 generation(s) of logs cannot be reprocessed (realtime g1 on cluster east cannot be read:" in (
        refused.stderr
    )
    assert "nothing was rewound; --force rewinds the rest" in refused.stderr
    assert _lows(address) == [20, 20, 10, 10]

    preview = cli("group", "rewind", "billing", "logs", "--to-earliest", "--dry-run", coordinator=address)
    assert preview.returncode == 0 and "cannot be reprocessed: realtime g1 on cluster east" in preview.stdout

    forced = cli("group", "rewind", "billing", "logs", "--to-earliest", "--force", coordinator=address)
    assert forced.returncode == 0, forced.stderr
    assert _lows(address) == [20, 20, 0, 0]
    assert "rewound group billing on logs: 2 partition(s), 20 record(s) to process again" in forced.stdout


@pytest.mark.parametrize(
    ("args", "code", "sentence"),
    [
        (["--to-offsets", "{realtime"], 2, "--to-offsets is not JSON"),
        (["--to-offsets", '{"realtime/g2/p0": "x"}'], 2, "--to-offsets must map partitions to offsets"),
        (["--to-offsets", '{"realtime/g2/p9": 1}'], 2, "has 2 partitions; there is no partition 9"),
        (["--to-offsets", '{"realtime/g2": 1}'], 2, "is not of the form stream/lane/g<generation>/p<partition>"),
        (["--to-time", "2999-01-01T00:00:00Z"], 2, "in the future"),
        (["--to-time", "yesterday"], 2, "must be a time like"),
        (["--to-earliest", "--lane", "nope"], 3, "lane"),
        (["--to-earliest", "--to-time", "1h"], 2, "not allowed with argument"),
    ],
)
def test_bad_rewinds_get_a_sentence_and_change_nothing(fleet, args: list[str], code: int, sentence: str) -> None:
    address, _, _ = fleet
    got = cli("group", "rewind", "billing", "logs", *args, coordinator=address)
    assert got.returncode == code, got.stderr
    assert sentence in got.stderr
    assert "Traceback" not in got.stderr
    assert _lows(address) == [20, 20, 10, 10]


def test_a_group_that_never_read_the_stream_is_not_created_by_a_rewind(fleet) -> None:
    address, _, _ = fleet
    got = cli("group", "rewind", "bililng", "logs", "--to-earliest", coordinator=address)
    assert got.returncode == 3 and "group 'bililng' has never read stream logs" in got.stderr
