"""The PostgreSQL store driver: FoundationDB's transaction semantics on one `bytea` key-value table, shared by
any number of coordinator replicas.

- **Transactions** run SERIALIZABLE. A transaction's writes wait in memory (reads see them) and reach the
  table in one flush at commit. A serialization failure (40001) or a deadlock (40P01) is retried with the
  same loop as FoundationDB's `not_committed` (`store.retry`); a connection lost during COMMIT is an unknown
  result, resolved through the same idempotency tokens, so a retry never applies a change twice.
- **Reads**: every read conflicts (PostgreSQL has no snapshot read inside SERIALIZABLE); `snapshot=True` is
  accepted and means the same as a plain read, so code written for FoundationDB stays correct, only with a
  few more retries.
- **Counters**: `add` and `max` are read-modify-writes inside the transaction (serializable, so atomic).
- **Versionstamps** come from a sequence, drawn by the first versionstamped write of a transaction (or its
  flush) under the writers' lock and a transaction-scoped advisory lock, both held until it commits: the next
  stamp is drawn only after this one is committed (or rolled back, leaving a gap), so stamps are strictly
  increasing in commit order across every replica.
- **The writers' lock** is a table lock (`streamplane_writers`, a table nothing reads or writes), always taken
  inside a transaction: a transaction that runs alone takes it as its first statement, before its snapshot
  (PostgreSQL takes none for LOCK). So every hold of it ends with its transaction, and a replica stopped while
  it holds it (or while it was queued for it) is ended by the server after IDLE_IN_TRANSACTION_MS.
- **Watches** fire after commit across processes: each commit that wrote notifies (`pg_notify`, delivered
  on commit) the keys and ranges it changed; one listening connection per process fires the matching
  watches. A change too large to name fires every watch (spurious fires are allowed, missed ones are not).
- **Limits** are FoundationDB's, with the same errors. Connections come from a pool; the schema is created on
  first start with a version row, and a store written by a newer version is refused in one sentence.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import structlog

from streamplane.coordinator.store import retry
from streamplane.coordinator.store.api import StoreLimitError, StoreUnavailableError, Transaction
from streamplane.coordinator.store.buffered import BufferedTransaction, BufferedWatch, StampAfterCommit, WatchRegistry
from streamplane.coordinator.store.ranges import RangeSet

log = structlog.get_logger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 1
CHANNEL = "streamplane_watch"
NOTIFY_BYTES = 7000
"""A notification's payload limit (PostgreSQL's is 8000 bytes): past it, every watch fires."""
STAMP_LOCK = 0x5354414D50
"""The advisory lock that orders versionstamps by commit (taken by every version of this driver, so replicas
of mixed versions still draw stamps in commit order during an upgrade)."""
WRITERS_LOCK = "LOCK TABLE streamplane_writers IN EXCLUSIVE MODE"
"""The writers' lock: what a transaction that runs alone takes first, and every flush before it writes."""
SCHEMA_LOCK = 0x534348454D41
RETRY_BUDGET_S = 30.0
"""How long a transaction keeps trying while the database cannot be reached (a restart, a failover)."""
IDLE_IN_TRANSACTION_MS = 10_000
"""A session that sits this long inside a transaction between statements is ended by the server, and its locks
go with it: a replica stopped (SIGSTOP, a stalled VM) while it holds the versionstamps' lock would otherwise
hold every other replica's event-appending transaction until it woke. Twice FoundationDB's 5 s limit on a
whole transaction: no transaction of ours waits that long between two statements. The stopped replica's
transaction fails when it wakes, and is retried as a lost connection is."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS streamplane_kv (key bytea PRIMARY KEY, value bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS streamplane_meta (name text PRIMARY KEY, value bigint NOT NULL)",
    "CREATE SEQUENCE IF NOT EXISTS streamplane_versionstamp",
    "CREATE TABLE IF NOT EXISTS streamplane_writers (unused int)",
    f"INSERT INTO streamplane_meta VALUES ('schema_version', {SCHEMA_VERSION}) ON CONFLICT (name) DO NOTHING",
)


def _where(url: str) -> str:
    """The database's address for messages, without its password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:
        return "the PostgreSQL store"
    host, port, name = info.get("host", "localhost"), info.get("port", "5432"), info.get("dbname", "")
    return f"PostgreSQL at {host}:{port}/{name}"


class _Rows:
    """Committed rows, read through the transaction's connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def get(self, key: bytes) -> bytes | None:
        row = self._conn.execute("SELECT value FROM streamplane_kv WHERE key = %s", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def many(
        self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]]
    ) -> tuple[dict[bytes, bytes], list[list[tuple[bytes, bytes]]]]:
        """Two statements at most, whatever the number of keys and ranges."""
        found: dict[bytes, bytes] = {}
        if keys:
            rows = self._conn.execute("SELECT key, value FROM streamplane_kv WHERE key = ANY(%s)", (list(keys),))
            found = {bytes(k): bytes(v) for k, v in rows}
        spans: list[list[tuple[bytes, bytes]]] = [[] for _ in ranges]
        if ranges:
            rows = self._conn.execute(
                "SELECT r.i, kv.key, kv.value FROM unnest(%s::bytea[], %s::bytea[]) WITH ORDINALITY AS r(b, e, i) "
                "JOIN streamplane_kv kv ON kv.key >= r.b AND kv.key < r.e ORDER BY r.i, kv.key",
                ([b for b, _ in ranges], [e for _, e in ranges]),
            )
            for i, k, v in rows:
                spans[i - 1].append((bytes(k), bytes(v)))
        return found, spans

    def range(self, begin: bytes, end: bytes, limit: int, reverse: bool) -> list[tuple[bytes, bytes]]:
        order = "DESC" if reverse else "ASC"
        sql = f"SELECT key, value FROM streamplane_kv WHERE key >= %s AND key < %s ORDER BY key {order}"
        if limit > 0:
            sql += f" LIMIT {int(limit)}"
        return [(bytes(k), bytes(v)) for k, v in self._conn.execute(sql, (begin, end))]


class PostgresTransaction(BufferedTransaction):
    """A buffered transaction whose versionstamp is taken from the counter row by its first stamped write."""

    def __init__(self, conn: Any) -> None:
        self._rows_reader = _Rows(conn)
        super().__init__(self._rows_reader, 0)
        self._conn = conn
        self._stamped = False
        self.alone = False
        """Whether it took the writers' lock before its snapshot (held until it commits or rolls back)."""
        self.seen: dict[bytes, bytes | None] = {}
        """The value each watched key had in this transaction (see PostgresDatabase._check_unchanged)."""

    def watch(self, key: bytes) -> BufferedWatch:
        watch = super().watch(key)
        self.seen[key] = self.get(key)
        return watch

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Read these keys and whole ranges in two statements (a read is a round trip here); later reads of them
        are answered from what was read, this transaction's snapshot."""
        wanted, spans = self._unread(keys, ranges)
        if wanted or spans:
            found, rows = self._rows_reader.many(wanted, spans)
            self._keep(wanted, found, spans, rows)

    def run_alone(self) -> None:
        """Take the writers' lock as the transaction's first statement, before its snapshot, if nothing was read
        yet: no write can commit while it runs, so it does not race them (at the cost of running beside no other
        writer). The lock is the transaction's: it goes with its commit, its rollback, or its session."""
        import psycopg

        if self.alone or self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return  # already alone, or its snapshot is taken: too late to help
        self._conn.execute(WRITERS_LOCK)
        self.alone = True

    def _draw_stamp(self) -> None:
        """This transaction's versionstamp, under the writers' lock and the stamps' lock, both held until it
        commits: the next one is drawn only once this one has committed (or rolled back), so stamps follow commit
        order. (The stamp is drawn in the same statement as the stamps' lock, after it.)"""
        if not self._stamped:
            if not self.alone:  # one that runs alone holds it already
                self._conn.execute(WRITERS_LOCK)
            query = "SELECT nextval('streamplane_versionstamp') FROM (SELECT pg_advisory_xact_lock(%s)) AS locked"
            (counter,) = self._conn.execute(query, (STAMP_LOCK,)).fetchone()
            self._stamp = struct.pack(">QH", counter, 0)
            self._versionstamp = StampAfterCommit(self._stamp)
            self._stamped = True

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._draw_stamp()
        super().set_versionstamped_key(key, value)

    def flush(self) -> None:
        """Write what the transaction changed, in a few statements, and queue the notification of it. Every
        committed write has a versionstamp, drawn here if no versionstamped key drew it earlier (the lock is
        then held only for the flush and the commit)."""
        self._draw_stamp()
        cur = self._conn.cursor()
        for begin, end in self.cleared_ranges:
            cur.execute("DELETE FROM streamplane_kv WHERE key >= %s AND key < %s", (begin, end))
        upserts = [(k, v) for k, v in self.values.items() if v is not None]
        deletes = [(k,) for k, v in self.values.items() if v is None]
        if upserts:  # one statement each, whatever the number of rows
            cur.execute(
                "INSERT INTO streamplane_kv (key, value) SELECT * FROM unnest(%s::bytea[], %s::bytea[]) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                ([k for k, _ in upserts], [v for _, v in upserts]),
            )
        if deletes:
            cur.execute("DELETE FROM streamplane_kv WHERE key = ANY(%s)", ([k for (k,) in deletes],))
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, _payload(self.written, self.cleared_ranges)))


def _payload(keys: set[bytes], ranges: RangeSet) -> str:
    """The keys and ranges a commit changed, as one notification; "*" when they do not fit."""
    text = json.dumps({"k": sorted(k.hex() for k in keys), "r": [[b.hex(), e.hex()] for b, e in ranges]})
    return text if len(text) <= NOTIFY_BYTES else "*"


class PostgresDatabase:
    """A handle on the PostgreSQL store: a connection pool, and one listening connection for watches.

    Args:
        url: a libpq connection URL or string (`postgresql://user@host:port/db?sslmode=require`); the password
            may come from PGPASSWORD or a PGPASSFILE, as libpq reads them.
        pool_size: connections this process may hold at once.
    """

    driver = "postgres"

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout_s: float = 10.0) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self._where = _where(url)
        self._watches = WatchRegistry()
        self._tokens = retry.Tokens()
        self._closed = threading.Event()
        try:
            self._check_schema(psycopg.connect(url, autocommit=True, connect_timeout=int(connect_timeout_s)))
        except psycopg.OperationalError as err:
            raise StoreUnavailableError(f"cannot reach {self._where}: {_first_line(err)}") from err
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": False},
            configure=_serializable,
            timeout=connect_timeout_s,
            open=True,
            name="streamplane-store",
        )
        self._listener = threading.Thread(target=self._listen, name="store-watches", daemon=True)
        self._listening = threading.Event()
        self._listener.start()
        self._listening.wait(connect_timeout_s)

    def _check_schema(self, conn: Any) -> None:
        """Create the schema on first start; refuse a store written by a newer version."""
        import psycopg

        with conn:
            for _ in range(5):  # replicas starting together may race to create it
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                        for statement in _SCHEMA:
                            conn.execute(statement)
                    break
                except psycopg.errors.UniqueViolation:
                    continue
            (found,) = conn.execute("SELECT value FROM streamplane_meta WHERE name = 'schema_version'").fetchone()
        if found > SCHEMA_VERSION:
            raise StoreUnavailableError(
                f"{self._where} was written by a newer streamplane (store schema {found}; this one knows up to "
                f"{SCHEMA_VERSION}): upgrade this coordinator"
            )

    # -- transactions
    def transact(self, fn: Callable[[Transaction], T]) -> T:
        if self._closed.is_set():
            raise StoreUnavailableError(f"{self._where} is closed")
        started = time.monotonic()
        delay = [0.01]
        conflicts = [0]

        def attempt(body: Callable[[Transaction], Any]) -> Any:
            try:
                return self._attempt(body, exclusive=conflicts[0] > 0)
            except retry.CommitFailed as failed:
                if not failed.unknown:
                    conflicts[0] += 1  # the next attempt waits for the writers instead of racing them
                time.sleep(delay[0])  # a conflict: back off a little, as FoundationDB's retry loop does
                delay[0] = min(1.0, delay[0] * 2)
                raise
            except _UnreachableError as err:
                if time.monotonic() - started > RETRY_BUDGET_S or self._closed.is_set():
                    raise StoreUnavailableError(f"cannot reach {self._where}: {err}") from err
                time.sleep(delay[0])
                delay[0] = min(1.0, delay[0] * 2)
                raise retry.CommitFailed(unknown=False) from err

        return retry.run(attempt, fn, self._tokens, max_attempts=None)

    def _attempt(self, body: Callable[[Transaction], Any], *, exclusive: bool = False) -> Any:
        """One try. `exclusive` (after a serialization failure): run alone (the writers' lock before the
        snapshot), so no write can commit while this transaction runs, and it no longer races them. Writes only
        happen at the flush, under that lock; SERIALIZABLE's predicate locks are coarser than the keys read
        (pages, relations), so disjoint writers can conflict, and an optimistic retry could lose every time.
        PostgreSQL's checks are conservative and may still, rarely, cancel a transaction that ran alone beside
        others that had read (seen once in CI, among thousands of such retries): the next try is alone again."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                return self._run(conn, PostgresTransaction(conn), body, alone=exclusive)
        except PoolTimeout as err:
            raise _UnreachableError(str(err)) from err
        except psycopg.OperationalError as err:  # the pool's connection broke before the body ran
            raise _UnreachableError(_first_line(err)) from err

    def _run(self, conn: Any, tr: PostgresTransaction, body: Callable[[Transaction], Any], *, alone: bool) -> Any:
        import psycopg

        conflicted = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
        lost = (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)
        tr.registry = self._watches
        try:
            if alone:
                tr.run_alone()
            result = body(tr)
            if tr._dirty:
                tr.flush()
        except conflicted as err:
            conn.rollback()
            raise retry.CommitFailed(unknown=False) from err
        except psycopg.errors.ProgramLimitExceeded as err:
            conn.rollback()
            raise StoreLimitError(f"{self._where} refused the transaction: {_first_line(err)}") from err
        except lost as err:
            raise _UnreachableError(_first_line(err)) from err  # nothing committed
        except BaseException:
            conn.rollback()
            raise
        try:
            self._commit(conn)
        except conflicted as err:
            raise retry.CommitFailed(unknown=False, result=result) from err
        except lost as err:
            # lost during COMMIT, or ended by the server while this replica was stopped: it may have happened
            raise retry.CommitFailed(unknown=True, result=result) from err
        if tr._dirty:
            tr.get_versionstamp().committed = True
        for watch in tr.new_watches:
            self._watches.add(watch)
            self._check_unchanged(watch, tr)
        return result

    def _commit(self, conn: Any) -> None:
        """COMMIT (a seam the tests use to lose a connection at exactly this moment)."""
        conn.commit()

    def _check_unchanged(self, watch: BufferedWatch, tr: PostgresTransaction) -> None:
        """A change committed between the transaction's read and the watch's registration has notified no one
        yet: compare the key with what the transaction saw, and fire at once if it differs."""
        seen = tr.values[watch.key] if watch.key in tr.values else tr.seen.get(watch.key)
        try:
            with self._pool.connection() as conn:
                now = _Rows(conn).get(watch.key)
                conn.rollback()
        except Exception:
            watch.fire()  # cannot tell: a spurious fire is allowed
            return
        if now != seen:
            watch.fire()

    # -- watches
    def _listen(self) -> None:
        """One connection LISTENs for every commit's notification and fires the watches it names; reconnects
        (firing every watch, as a notification may have been missed meanwhile) when the connection drops."""
        import psycopg

        while not self._closed.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    self._watches.fire_all()  # whatever changed while nobody listened
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5, stop_after=256):
                            self._fire(note.payload)
            except psycopg.Error as err:
                if self._closed.is_set():
                    return
                log.warning("store.listen_failed", store=self._where, error=_first_line(err))
                self._closed.wait(0.5)

    def _fire(self, payload: str) -> None:
        if payload == "*":
            self._watches.fire_all()
            return
        try:
            changed = json.loads(payload)
            keys = {bytes.fromhex(k) for k in changed["k"]}
            ranges = RangeSet((bytes.fromhex(b), bytes.fromhex(e)) for b, e in changed["r"])
        except (ValueError, KeyError, TypeError):
            self._watches.fire_all()
            return
        self._watches.fire(keys, ranges)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._pool.close()
            self._listener.join(timeout=2)


class _UnreachableError(Exception):
    """The database could not be reached for this attempt (nothing committed)."""


def _serializable(conn: Any) -> None:
    """Each pooled connection: SERIALIZABLE, index scans only, and ended by the server when idle inside a
    transaction for IDLE_IN_TRANSACTION_MS. Every query of ours reads keys or key ranges; a sequential scan (the
    planner's choice on a small table) would take SERIALIZABLE's predicate lock on the whole table, and every
    concurrent writer would then fail to serialize."""
    import psycopg

    conn.execute("SET enable_seqscan = off")
    conn.execute(f"SET idle_in_transaction_session_timeout = {int(IDLE_IN_TRANSACTION_MS)}")
    conn.commit()
    conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
