"""The PostgreSQL driver beyond the store contract (tests/store/test_store_conformance.py runs that on it too): a
connection lost at COMMIT never applies a transaction twice, the store is chosen by URL from the CLI, and an
unreachable or newer store is refused in one sentence. A real server, from Debian's binaries."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from streamplane.coordinator import keys
from streamplane.coordinator.store import StoreConfig, StoreUnavailableError, open_store
from streamplane.coordinator.store.api import read_counter
from streamplane.coordinator.store.postgres import PostgresDatabase
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import Cluster, StreamCreated
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import Proc, cli


def _topology(db: PostgresDatabase) -> Topology:
    topology = Topology(db, MemoryClusterAdmin())
    topology.register_cluster(Cluster("east", "east:9092"))
    return topology


def test_a_backend_killed_at_commit_is_retried_and_applied_once(postgres) -> None:
    """pg_terminate_backend of the transaction's own backend just before its COMMIT: the commit fails, the
    retry finds that it did not happen (no idempotency token), and applies the change once."""
    db = PostgresDatabase(postgres.create_database())
    killed = []

    def commit_after_a_kill(conn: Any) -> None:
        if not killed:
            killed.append(conn.info.backend_pid)
            with psycopg.connect(db.url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        conn.commit()

    db._commit = commit_after_a_kill  # type: ignore[method-assign]
    try:
        _topology(db).create_stream("killed", 1, "east")
        assert killed
        created = [e for e in events.read_events(db, None) if isinstance(e, StreamCreated)]
        assert [e.stream.name for e in created] == ["killed"]
        assert db.transact(lambda tr: read_counter(tr, keys.EVENT_HEAD)) == 2  # registered, created: once each
    finally:
        db.close()


def test_a_commit_that_happened_but_whose_answer_was_lost_is_not_applied_twice(postgres) -> None:
    """The other unknown result: COMMIT reached the server, the answer did not come back. The retry finds the
    attempt's idempotency token and returns its result instead of running the body again."""
    db = PostgresDatabase(postgres.create_database())
    lost = []

    def commit_then_lose_the_answer(conn: Any) -> None:
        conn.commit()
        if not lost:
            lost.append(True)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    db._commit = commit_then_lose_the_answer  # type: ignore[method-assign]
    try:
        topology = _topology(db)
        assert lost, "the registration's commit answer was lost"
        done = topology.create_stream("once", 1, "east")
        created = [e for e in events.read_events(db, None) if isinstance(e, StreamCreated)]
        assert [e.stream.name for e in created] == ["once"] and done.version == created[0].version
        registered = [e for e in events.read_events(db, None) if getattr(e, "cluster", None)]
        assert len(registered) == 1
    finally:
        db.close()


def test_an_unreachable_store_is_one_sentence_and_exit_6_naming_it(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match=r"cannot reach PostgreSQL at 127\.0\.0\.1:1/nowhere"):
        open_store(StoreConfig.from_env(store="postgresql://u@127.0.0.1:1/nowhere"))
    done = cli("coordinator", "--port", "0", "--store", "postgresql://u:secret@127.0.0.1:1/nowhere", timeout=60)
    assert done.returncode == 6, done.stderr
    assert "cannot reach PostgreSQL at 127.0.0.1:1/nowhere" in done.stderr and "secret" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_store_written_by_a_newer_version_is_refused(postgres) -> None:
    url = postgres.create_database()
    PostgresDatabase(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE streamplane_meta SET value = 99 WHERE name = 'schema_version'")
    with pytest.raises(StoreUnavailableError, match="written by a newer streamplane"):
        PostgresDatabase(url)


def test_the_coordinator_serves_from_postgresql_and_inspect_reads_it(postgres, tmp_path: Path) -> None:
    url = postgres.create_database()
    proc = Proc([sys.executable, "-m", "streamplane.cli.main", "coordinator", "--port", "0", "--store", url])
    try:
        address = proc.wait_for(r"coordinator=(\S+) store=postgres").group(1)
        registered = cli("cluster", "register", "pg-east", "--bootstrap", "east:9092", coordinator=address)
        assert registered.returncode == 0, registered.stderr
    finally:
        assert proc.stop() == 0
    shown = cli("inspect", "cluster", "--store", url)
    assert shown.returncode == 0 and "pg-east" in shown.stdout, shown.stderr


def test_writers_that_conflict_finish_and_a_retry_never_loses_twice(postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """SERIALIZABLE's predicate locks are coarser than our keys, so writers of disjoint keys that read each
    other's ranges fail to serialize. A failed transaction's retry waits for the writers and then runs alone:
    every transaction finishes, every retry after a conflict runs alone, none loses twice alone, and every
    write lands once. (PostgreSQL's checks are conservative: beside writers that had read, an alone retry was
    cancelled once in CI; it then runs alone again. Other failures, a connection the loaded machine lost, are
    retried too and counted apart.)"""
    import threading

    tries: dict[int, list[tuple[bool, str | None]]] = {}  # per thread: (run alone, why it failed or None)
    attempt = PostgresDatabase._attempt

    def noted(self: PostgresDatabase, body: Any, *, exclusive: bool = False) -> Any:
        mine = tries.setdefault(threading.get_ident(), [])
        try:
            result = attempt(self, body, exclusive=exclusive)
        except Exception as err:
            cause = err.__cause__ or err
            detail = getattr(getattr(cause, "diag", None), "message_detail", None)
            mine.append((exclusive, f"{type(cause).__name__}: {detail}"))
            raise
        mine.append((exclusive, None))
        return result

    monkeypatch.setattr(PostgresDatabase, "_attempt", noted)
    db = PostgresDatabase(postgres.create_database())
    try:
        _racing_writers(db, alone=False)
        transactions = [t for thread in tries.values() for t in _split_at_commits(thread)]
        assert len(transactions) == 100  # each writer's 25
        conflicted = [t for t in transactions if any(_conflict(why) for _, why in t)]
        assert conflicted, "no writer conflicted: the test tests nothing"
        for t in conflicted:
            after = t[[_conflict(why) for _, why in t].index(True) + 1 :]
            assert all(alone for alone, _ in after), f"a retry after a conflict raced the writers: {t}"
            assert sum(alone and _conflict(why) for alone, why in t) <= 1, f"a retry lost twice alone: {t}"
            lost = sum(why is not None and not _conflict(why) for _, why in t)
            assert len(t) <= 3 + lost, t
        assert db.transact(lambda tr: [read_counter(tr, b"w/%d" % me) for me in range(4)]) == [25] * 4
        # writers that say they write what others write at once (the commit log's batches) queue instead
        tries.clear()
        queued = _racing_writers(db, alone=True)
        failed = [why for thread in tries.values() for _, why in thread if why is not None]
        assert not any(_conflict(why) for why in failed), failed
        assert max(queued) <= 1 + len(failed), failed
        assert db.transact(lambda tr: [read_counter(tr, b"w/%d" % me) for me in range(4)]) == [50] * 4
    finally:
        db.close()


def _conflict(why: str | None) -> bool:
    return why is not None and why.startswith("SerializationFailure")


def _split_at_commits(attempts: list[tuple[bool, str | None]]) -> list[list[tuple[bool, str | None]]]:
    """One thread's attempts, in order, cut into transactions: each ends with the attempt that committed."""
    transactions: list[list[tuple[bool, str | None]]] = [[]]
    for one in attempts:
        transactions[-1].append(one)
        if one[1] is None:
            transactions.append([])
    return [t for t in transactions if t]


def _racing_writers(db: PostgresDatabase, *, alone: bool) -> list[int]:
    """4 threads, 25 transactions each, each reading every writer's keys and adding to its own: how many
    attempts each transaction took."""
    import threading

    attempts: list[int] = []
    lock = threading.Lock()

    def writer(me: int) -> None:
        for _ in range(25):
            tries = [0]

            def body(tr: Any, tries: list[int] = tries) -> None:
                tries[0] += 1
                if alone:
                    tr.run_alone()
                tr.get_range(b"w/", b"w0")  # every writer reads every writer's keys
                tr.add(b"w/%d" % me, 1)

            db.transact(body)
            with lock:
                attempts.append(tries[0])

    threads = [threading.Thread(target=writer, args=(me,)) for me in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(attempts) == 100
    return attempts


def test_a_replica_stopped_while_it_holds_the_writers_lock_to_run_alone_holds_the_others_only_briefly(
    postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A's transaction asks to run alone (as every commit-log batch does, and every retry after a
    conflict), and A stops (SIGSTOP, a stalled VM) once it holds the writers' lock: queued for it when it
    stopped, the lock came while it slept. B's writes go on once the server ends A's session (the same 10 s
    bound as a stop inside any transaction; 1 s here), not when A wakes; A's change, retried when it wakes,
    is applied once."""
    import threading
    import time

    from streamplane.coordinator.store import postgres as driver

    monkeypatch.setattr(driver, "IDLE_IN_TRANSACTION_MS", 1000)
    url = postgres.create_database()
    a, b = PostgresDatabase(url), PostgresDatabase(url)
    stopped, wake = threading.Event(), threading.Event()

    def stops_once_alone(tr: Any) -> None:
        tr.run_alone()
        if not stopped.is_set():
            stopped.set()
            wake.wait(30)  # stopped, holding the writers' lock, until the test wakes it
        tr.add(b"a", 1)

    try:
        first = threading.Thread(target=lambda: a.transact(stops_once_alone))
        first.start()
        assert stopped.wait(10)
        began = time.monotonic()
        b.transact(lambda tr: tr.add(b"b", 1))
        took = time.monotonic() - began
        assert took < 8, f"B waited {took:.1f} s for the stopped replica's lock"
        wake.set()
        first.join(30)
        assert not first.is_alive()
        assert b.transact(lambda tr: [read_counter(tr, b"a"), read_counter(tr, b"b")]) == [1, 1]
    finally:
        wake.set()
        a.close()
        b.close()


def test_a_replica_stopped_before_its_commit_holds_the_others_only_until_the_server_ends_its_session(
    postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A stops (as under SIGSTOP) after its flush took the versionstamps' lock, before its COMMIT: B's
    event-appending transaction goes on once the server ends A's idle session, not when A wakes; A's change,
    retried when it wakes, is applied once."""
    import threading
    import time

    from streamplane.coordinator.store import postgres as driver

    monkeypatch.setattr(driver, "IDLE_IN_TRANSACTION_MS", 1000)
    url = postgres.create_database()
    a, b = PostgresDatabase(url), PostgresDatabase(url)
    armed, stopped, wake = threading.Event(), threading.Event(), threading.Event()

    def holds_the_lock(conn: Any) -> bool:
        query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        return bool(conn.execute(query).fetchone()[0])

    def commit_after_a_stop(conn: Any) -> None:
        if armed.is_set() and not stopped.is_set() and holds_the_lock(conn):  # an event's transaction, flushed
            stopped.set()
            wake.wait(30)  # stopped, holding the lock, until the test wakes it
        conn.commit()

    a._commit = commit_after_a_stop  # type: ignore[method-assign]
    try:
        _topology(a)  # registers "east"
        armed.set()
        first = threading.Thread(target=lambda: Topology(a, MemoryClusterAdmin()).create_stream("a", 1, "east"))
        first.start()
        assert stopped.wait(10)
        began = time.monotonic()
        Topology(b, MemoryClusterAdmin()).create_stream("b", 1, "east")
        took = time.monotonic() - began
        assert took < 8, f"B waited {took:.1f} s for the stopped replica's lock"
        wake.set()
        first.join(30)
        created = [e.stream.name for e in events.read_events(b, None) if isinstance(e, StreamCreated)]
        assert sorted(created) == ["a", "b"], created
    finally:
        wake.set()
        a.close()
        b.close()
