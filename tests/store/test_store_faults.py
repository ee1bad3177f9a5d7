"""Every transactional change is correct when FoundationDB retries it: after a conflict, a transaction too old,
and a commit whose result is unknown although it happened (the body then runs again).

A script of domain changes (topology, group membership and leases, commits, producer sessions, sealing and
draining) runs once on the embedded store and then, for many seeds, on `ChaosDatabase` around it. Each
change must return what it returned without faults, and the store must end up the same, event logs
included (no event twice). The same script without idempotency tokens must be caught.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology import sealing
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import StreamplaneError
from streamplane.model import Cluster, Commit, Heartbeat, Retry, Subscription
from streamplane.testing.chaos_store import ChaosDatabase, Faults
from streamplane.testing.cluster_admin import MemoryClusterAdmin

T0 = 1_800_000_000_000
WORST = Faults(conflict=0.15, too_old=0.1, unknown_committed=0.2, unknown_lost=0.1)


def script(db: Database) -> list[Any]:
    """The changes, in order; what each returned (or the error it raised, by kind and message)."""
    admin, clock = MemoryClusterAdmin(), ManualClock(T0)
    topology = Topology(db, admin)
    sealer = Sealer(db, admin, lambda: True, SealingConfig(producer_ttl_ms=5000), clock=clock)
    steps: list[Callable[[], Any]] = [
        lambda: topology.register_cluster(Cluster("east", "east:9092")).value,
        lambda: topology.register_cluster(Cluster("west", "west:9092")).value,
        lambda: topology.create_stream("logs", 2, "east").value,
        lambda: topology.add_lane("logs", "bulk", 5).value,
        lambda: admin.append("east", "sp.logs.realtime.g1", 0, 10),
        lambda: leases.join(
            db, "g", "w1", "s1", [Subscription("logs")], capacity=1, max_load=0, now_ms=T0, ttl_ms=3000
        ),
        lambda: leases.join(
            db, "g", "w2", "s2", [Subscription("logs")], capacity=1, max_load=0, now_ms=T0, ttl_ms=3000
        ),
        lambda: group_state.apply_assignment(db, "g", now_ms=T0, revoke_ms=1000),
        lambda: leases.heartbeat(
            db, "g", "w1", "s1", Heartbeat(cpu=0.5, records_per_s=10), now_ms=T0 + 100, ttl_ms=3000
        ),
        lambda: sealing.producer_heartbeat(db, "p1", "", [], now_ms=T0, ttl_ms=5000) and None,
        lambda: _commit(db, "logs/realtime/g1/p0", [(0, 4)], retries=[Retry(5, 1, "boom")]),
        lambda: _commit(db, "logs/realtime/g1/p0", [(4, 5), (6, 10)]),
        lambda: topology.failover("logs", "realtime", "west", reason="drill").value,
        lambda: sealer.run_once(),
        lambda: sealing.close_producer(db, "p1"),
        lambda: sealer.run_once(),
        lambda: _commit(db, "logs/realtime/g1/p0", [(5, 6)]),
        lambda: _commit(db, "logs/realtime/g1/p1", []),
        lambda: sealer.run_once(),
        lambda: leases.leave(db, "g", "w2", "s2", "test", now_ms=T0 + 300),
        lambda: leases.expire(db, "g", T0 + 10_000),
        lambda: topology.create_stream("logs", 2, "east").value,  # refused: exists
    ]
    out: list[Any] = []
    for step in steps:
        try:
            out.append(step())
        except StreamplaneError as err:
            out.append((type(err).__name__, err.message))
    return out


def _commit(db: Database, lid: str, acked: list[tuple[int, int]], retries: list[Retry] | None = None) -> Any:
    holder = next(x for x in leases.read_leases(db, "g").values() if x.lease_id == lid)
    body = Commit(acked=acked, retries=retries or [], high_watermark=10)
    return commitlog.commit(db, "g", lid, holder.epoch, body, now_ms=T0 + 200)


def state(db: Database) -> tuple[dict[bytes, bytes], list[Any]]:
    """Every key but the idempotency tokens; event logs as their payloads in order (versions and wall-clock
    times differ from run to run)."""
    rows = db.transact(lambda tr: tr.get_range(keys.ROOT.range().start, keys.ROOT.range().stop))
    plain, logged = {}, []
    for key, value in rows:
        space = keys.ROOT.unpack(key)[0]
        if space == "txn":
            continue
        if space in ("event", "group_event"):
            body = json.loads(value)
            logged.append((space, body["type"], body["data"]))
        elif key not in (keys.EVENT_HEAD,) and space != "group_event_head":
            plain[key] = value
    return plain, logged


def run(
    tmp_path: Path, name: str, wrap: Callable[[Database], Database] | None = None, *, inner: Database | None = None
) -> tuple[list[Any], Any]:
    inner = inner or open_store(StoreConfig(driver="embedded", data_dir=tmp_path / name))
    db = wrap(inner) if wrap else inner
    try:
        return script(db), state(inner)
    finally:
        inner.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Any]:
    return run(tmp_path_factory.mktemp("reference"), "plain")


@pytest.mark.parametrize("seed", range(25))
def test_changes_are_the_same_under_foundationdbs_worst(tmp_path: Path, reference, seed: int) -> None:
    chaos: list[ChaosDatabase] = []

    def wrap(db: Database) -> Database:
        chaos.append(ChaosDatabase(db, seed=seed, faults=WORST))
        return chaos[0]

    results, final = run(tmp_path, f"seed{seed}", wrap)
    assert sum(chaos[0].injected.values()) > 0, "no fault was injected: the test shows nothing"
    assert results == reference[0]
    assert final == reference[1]


def test_without_idempotency_tokens_a_retry_after_an_unknown_commit_is_caught(tmp_path: Path, reference) -> None:
    """The planted bug: a store that runs the body again after an unknown result that did commit."""
    caught = 0
    for seed in range(10):

        def wrap(db: Database, seed: int = seed) -> Database:
            return ChaosDatabase(db, seed=seed, faults=Faults(unknown_committed=0.3), idempotent=False)

        if run(tmp_path, f"planted{seed}", wrap) != reference:
            caught += 1
    assert caught >= 8, f"only {caught} of 10 seeds told a store that applies changes twice apart"


def test_a_change_whose_commit_was_unknown_still_answers_with_its_event_version(tmp_path: Path) -> None:
    """After an unknown result that did commit, the versionstamp is not known (as on FoundationDB): the
    answer's version is then the log's head, which is the change's own event when nothing came after."""
    from streamplane.coordinator.topology import events
    from streamplane.model import StreamCreated

    unknown = 0
    for seed in range(8):
        inner = open_store(StoreConfig(driver="embedded", data_dir=tmp_path / f"v{seed}"))
        db = ChaosDatabase(inner, seed=seed, faults=Faults(unknown_committed=0.5))
        try:
            topology = Topology(db, MemoryClusterAdmin())
            topology.register_cluster(Cluster("east", "east:9092"))
            before = db.injected["unknown_committed"]
            done = topology.create_stream("logs", 1, "east")
            unknown += db.injected["unknown_committed"] - before
            (created,) = [e for e in events.read_events(inner, None) if isinstance(e, StreamCreated)]
            assert done.version == created.version
        finally:
            inner.close()
    assert unknown > 0, "no create_stream met an unknown result: the test shows nothing"


@pytest.mark.parametrize("seed", range(3))
def test_the_postgresql_driver_under_foundationdbs_worst_changes_the_same(
    tmp_path: Path, reference, postgres, seed: int
) -> None:
    """A bounded run of the fault-injecting store around the PostgreSQL driver, on a real server."""
    from streamplane.coordinator.store.postgres import PostgresDatabase

    chaos: list[ChaosDatabase] = []

    def wrap(db: Database) -> Database:
        chaos.append(ChaosDatabase(db, seed=seed, faults=WORST))
        return chaos[0]

    results, final = run(tmp_path, "pg", wrap, inner=PostgresDatabase(postgres.create_database()))
    assert sum(chaos[0].injected.values()) > 0
    assert results == reference[0]
    assert final == reference[1]
