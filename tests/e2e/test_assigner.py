"""The Assigner with real worker processes on the local stack: failover timing, leave, join, fencing."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane.client import CoordinatorClient
from streamplane.model import GroupDescription
from tests.helpers import Proc, cli, start_dev, wait_until

WORKER = str(Path(__file__).parents[1] / "assigner_worker.py")
PARTITIONS = 12
TTL_S = 3.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, address, _ = start_dev(tmp_path_factory.mktemp("assigner") / "dev", "--clusters", "1")
    created = cli("stream", "create", "work", "--partitions", str(PARTITIONS), coordinator=address)
    assert created.returncode == 0, created.stderr
    yield address
    proc.stop()


def describe(address: str, group: str) -> GroupDescription:
    with CoordinatorClient(address) as client:
        return client.describe_group(group)


def holders(address: str, group: str) -> dict[str, str]:
    return {x.lease_id: x.worker_id for x in describe(address, group).leases if x.state == "granted"}


def worker(address: str, group: str, name: str) -> Proc:
    return Proc([sys.executable, WORKER, address, group, name, "work"])


def events(proc: Proc, kind: str) -> list[dict]:
    """The worker's JSON lines of one kind seen so far (drains what has arrived)."""
    while not proc.lines.empty():
        proc.seen.append(proc.lines.get())
    return [e for e in map(json.loads, proc.seen) if e["event"] == kind]


def counts(address: str, group: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in holders(address, group).values():
        out[w] = out.get(w, 0) + 1
    return out


def test_kill9_regrant_graceful_leave_and_join(stack: str) -> None:
    group = "g-lifecycle"
    ws = {name: worker(stack, group, name) for name in ("w1", "w2", "w3")}
    try:
        wait_until(lambda: counts(stack, group) == {"w1": 4, "w2": 4, "w3": 4})

        # kill -9: the dead worker's leases go to the others within TTL + 0.5 s
        before = holders(stack, group)
        victim = [lease for lease, w in before.items() if w == "w2"]
        killed_at = time.time()  # before the kill: the coordinator may see the closed stream before wait() returns
        ws["w2"].kill9()
        wait_until(
            lambda: set(holders(stack, group)) == set(before) and "w2" not in holders(stack, group).values(), timeout=5
        )

        def regranted() -> dict[str, float]:
            """When each of the victim's leases was first granted again (a lease may move once more after)."""
            first: dict[str, float] = {}
            for w in ("w1", "w3"):
                for e in events(ws[w], "grant"):
                    if e["lease"] in victim and e["t"] >= killed_at:
                        first[e["lease"]] = min(e["t"], first.get(e["lease"], e["t"]))
            return first

        wait_until(lambda: set(regranted()) == set(victim))  # the workers' own reports of the grants
        slowest = max(regranted().values()) - killed_at
        assert slowest <= TTL_S + 0.5, f"re-grant took {slowest:.3f} s"
        assert counts(stack, group) == {"w1": 6, "w3": 6}

        # graceful leave: the leaver's leases reach the other worker within 100 ms
        leaving = [lease for lease, w in holders(stack, group).items() if w == "w3"]
        grants_before = len(events(ws["w1"], "grant"))
        sent_at = time.time()  # conservative: includes the leaver reading the command and closing
        ws["w3"].send("leave")
        wait_until(lambda: len(events(ws["w1"], "grant")) >= grants_before + len(leaving), timeout=5)
        took = max(e["t"] for e in events(ws["w1"], "grant")[grants_before:]) - sent_at
        assert took <= 0.1, f"graceful leave took {took * 1000:.0f} ms"
        assert counts(stack, group) == {"w1": 12}

        # join: the newcomer gets a fair share, moved only from the other worker
        w1_before = set(holders(stack, group))
        joined_at = time.time()
        ws["w4"] = worker(stack, group, "w4")
        wait_until(lambda: counts(stack, group) == {"w1": 6, "w4": 6} and len(events(ws["w4"], "grant")) >= 6)
        moved = [e["lease"] for e in events(ws["w4"], "grant")]
        assert len(moved) == 6 and set(moved) <= w1_before
        wait_until(lambda: len([e for e in events(ws["w1"], "revoke") if e["deadline"] and e["t"] >= joined_at]) >= 6)
        revoked = [e for e in events(ws["w1"], "revoke") if e["deadline"] and e["t"] >= joined_at]
        assert sorted(e["lease"] for e in revoked) == sorted(moved), "only the moved leases were revoked"
    finally:
        for proc in ws.values():
            proc.stop()


def test_a_worker_paused_past_its_ttl_is_fenced_on_its_old_epoch(stack: str) -> None:
    group = "g-fence"
    zombie, other = worker(stack, group, "zombie"), worker(stack, group, "other")
    try:
        wait_until(lambda: counts(stack, group) == {"zombie": 6, "other": 6})
        zombie.popen.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: counts(stack, group) == {"other": 12}, timeout=TTL_S + 3)
        finally:
            zombie.popen.send_signal(signal.SIGCONT)
        ended = zombie.wait_for(r'"event": "ended"', timeout=10)
        assert "no heartbeat" in ended.string or "has ended" in ended.string
        zombie.wait_for(r'"event": "exit"', timeout=10)
        fenced = events(zombie, "fenced")
        assert len(fenced) == 6, "every lease it held is refused on its old epoch"
        assert all("is stale" in e["reason"] for e in fenced)
        assert not events(zombie, "still_holds")
    finally:
        zombie.stop()
        other.stop()


def test_group_describe_cli(stack: str) -> None:
    group = "g-describe"
    w = worker(stack, group, "solo")
    try:
        wait_until(lambda: counts(stack, group) == {"solo": 12})
        out = cli("group", "describe", group, coordinator=stack)
        assert out.returncode == 0, out.stderr
        assert "solo" in out.stdout and "work/realtime/g1/p11" in out.stdout and "granted" in out.stdout
        as_json = json.loads(cli("--output", "json", "group", "describe", group, coordinator=stack).stdout)
        assert {x["worker_id"] for x in as_json["leases"]} == {"solo"}
        history = cli("group", "events", group, coordinator=stack).stdout
        assert f"member_joined {group}/solo" in history and f"lease_granted {group}/solo" in history
        assert "lease_granted" not in cli("events", coordinator=stack).stdout, "group churn is not topology"
        granted = cli("group", "events", group, "--kind", "lease_granted", coordinator=stack)
        lines = granted.stdout.splitlines()
        assert len(lines) == 12 and all("lease_granted" in line for line in lines), granted.stdout
        assert f"12 event(s) shown of {len(history.splitlines())} read" in granted.stderr
        work = cli("events", "--stream", "work", coordinator=stack)
        assert work.stdout and all(" work" in line for line in work.stdout.splitlines()), work.stdout
        nobody = cli("events", "--actor", "nobody-at-all", coordinator=stack)
        assert nobody.returncode == 0 and nobody.stdout == "" and "0 event(s) shown of" in nobody.stderr
    finally:
        w.stop()
