"""The embedded store driver: FoundationDB's transaction semantics in one local SQLite file, for one process.

Transactions run one at a time under a process-wide lock, which makes them trivially serializable; each
commit is one SQLite transaction in WAL mode, so a committed transaction survives a crash of the process
(kill -9) and a half-done one never appears. With `sync="full"` every commit is also fsynced, which covers
power loss at the cost of throughput. The commit version is stored with the data, so versionstamps stay
monotonic across restarts.

Without a folder, the same transactions run on a sorted map in memory (nothing survives the process): the
simulator's store, where a seed's world commits about 1,200 transactions and SQLite's calls were a
fifth of its time.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import structlog

from streamplane.coordinator.store.api import StoreUnavailableError, Transaction
from streamplane.coordinator.store.buffered import BufferedTransaction, WatchRegistry

log = structlog.get_logger(__name__)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (name, value) VALUES ('commit_version', 0);
"""


class _FairLock:
    """A reentrant lock handed over in arrival order. With a plain lock, a thread writing transactions back to
    back (a large assignment pass, written in chunks) takes it again before the threads waiting for it wake,
    and starves them (heartbeats, then sessions, expire); FoundationDB has no such lock to queue on."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._queue: collections.deque[threading.Lock] = collections.deque()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return
            turn = threading.Lock()
            turn.acquire()
            self._queue.append(turn)
        turn.acquire()  # released by the holder handing the lock over
        self._owner, self._depth = me, 1

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            self._depth -= 1
            if self._depth:
                return
            if self._queue:
                self._owner = -1  # handed over: taken by the next in line, not by whoever comes first
                self._queue.popleft().release()
            else:
                self._owner = None


class _SqliteRows:
    """The committed keys in a SQLite file: read inside, and written at the end of, the SQLite transaction
    `EmbeddedDatabase.transact` opens for each of ours."""

    def __init__(self, conn: sqlite3.Connection, *, read_only: bool, lock: int | None = None) -> None:
        self._conn = conn
        self._read_only = read_only
        self._lock_fd = lock

    def commit_version(self) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE name = 'commit_version'").fetchone()
        return int(row[0]) if row else 0

    def begin(self) -> None:
        self._conn.execute("BEGIN" if self._read_only else "BEGIN IMMEDIATE")

    def get(self, key: bytes) -> bytes | None:
        row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def range(self, begin: bytes, end: bytes, limit: int, reverse: bool) -> list[tuple[bytes, bytes]]:
        """Keys in [begin, end) in order (descending if reverse), the first `limit` (0: all)."""
        order = "DESC" if reverse else "ASC"
        rows = self._conn.execute(
            f"SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key {order} LIMIT ?",
            (begin, end, limit if limit > 0 else -1),
        ).fetchall()
        return [(bytes(k), bytes(v)) for k, v in rows]

    def write(self, tr: BufferedTransaction, version: int) -> None:
        """What `tr` wrote (its cleared ranges first: every write after a clear of its range is in its values),
        and the commit version with it."""
        for b, e in tr.cleared_ranges:
            self._conn.execute("DELETE FROM kv WHERE key >= ? AND key < ?", (b, e))
        sets = [(k, v) for k, v in tr.values.items() if v is not None]
        clears = [(k,) for k, v in tr.values.items() if v is None]
        if sets:
            self._conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", sets)
        if clears:
            self._conn.executemany("DELETE FROM kv WHERE key = ?", clears)
        self._conn.execute("UPDATE meta SET value = ? WHERE name = 'commit_version'", (version,))

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the data dir's lock
            self._lock_fd = None


class _MemoryRows:
    """The committed keys in memory: a dict and its keys in order. Our transaction keeps its writes apart
    until `write`, which cannot fail, so there is nothing to begin or roll back."""

    def __init__(self) -> None:
        self._values: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []

    def commit_version(self) -> int:
        return 0

    def begin(self) -> None:
        pass

    def get(self, key: bytes) -> bytes | None:
        return self._values.get(key)

    def range(self, begin: bytes, end: bytes, limit: int, reverse: bool) -> list[tuple[bytes, bytes]]:
        lo, hi = bisect.bisect_left(self._keys, begin), bisect.bisect_left(self._keys, end)
        if limit > 0:
            lo, hi = (max(lo, hi - limit), hi) if reverse else (lo, min(hi, lo + limit))
        found = self._keys[lo:hi]
        if reverse:
            found.reverse()
        return [(k, self._values[k]) for k in found]

    def write(self, tr: BufferedTransaction, version: int) -> None:
        for b, e in tr.cleared_ranges:
            lo, hi = bisect.bisect_left(self._keys, b), bisect.bisect_left(self._keys, e)
            for k in self._keys[lo:hi]:
                del self._values[k]
            del self._keys[lo:hi]
        for k, v in tr.values.items():
            if v is not None:
                if k not in self._values:
                    bisect.insort(self._keys, k)
                self._values[k] = v
            elif self._values.pop(k, None) is not None:
                del self._keys[bisect.bisect_left(self._keys, k)]

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        self._values, self._keys = {}, []


_Rows = _SqliteRows | _MemoryRows


class EmbeddedDatabase:
    """The embedded store: one SQLite file in `data_dir`, one process at a time for writing; or, without a
    folder, the same in memory for this process only (the simulator's).

    Args:
        data_dir: folder of the database file `store.sqlite3`; created if missing. None: in memory.
        sync: "normal" survives a process crash (kill -9); "full" also fsyncs each commit for power loss.
        read_only: open for reading only (for `streamplane inspect` beside a running coordinator).
    """

    driver = "embedded"

    def __init__(self, data_dir: str | Path | None, *, sync: str = "normal", read_only: bool = False) -> None:
        if sync not in ("normal", "full"):
            raise ValueError(f"sync must be 'normal' or 'full', not {sync!r}")
        if data_dir is None and read_only:
            raise ValueError("a store in memory has nothing to read but what its own process writes")
        self.path = None if data_dir is None else Path(data_dir) / "store.sqlite3"
        self._where = "the in-memory store" if self.path is None else f"the embedded store at {self.path}"
        self._rows: _Rows = _MemoryRows() if self.path is None else _open_sqlite(self.path, sync, read_only)
        self._read_only = read_only
        self._lock = _FairLock()
        self._watches = WatchRegistry()
        self._closed = False
        self._commit_version = self._rows.commit_version()
        self.largest_write = 0
        """The most bytes (keys and values) one committed transaction wrote since the store was opened."""

    @property
    def commit_version(self) -> int:
        """The version of the last committed write transaction."""
        return self._commit_version

    def transact(self, fn: Callable[[Transaction], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"{self._where} is closed")
            if self._read_only:
                self._commit_version = self._rows.commit_version()
            tr = BufferedTransaction(self._rows, self._commit_version + 1, read_only=self._read_only)
            tr.registry = self._watches
            try:
                self._rows.begin()
                try:
                    result = fn(tr)
                    if tr._dirty:
                        self._rows.write(tr, self._commit_version + 1)
                    self._rows.commit()
                except BaseException:
                    self._rows.rollback()
                    raise
            except sqlite3.Error as err:
                raise StoreUnavailableError(f"{self._where} failed: {err}") from err
            if tr._dirty:
                self._commit_version += 1
                self.largest_write = max(self.largest_write, tr._bytes)
                tr.get_versionstamp().committed = True
                self._watches.fire(tr.written, tr.cleared_ranges)
            # Registered under the lock, after this commit's own writes fired: no later commit can slip between.
            for watch in tr.new_watches:
                self._watches.add(watch)
        return result

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._rows.close()


LOCK_WAIT_S = 5.0
"""How long an opener waits for the data dir's lock before it is refused (a process exiting lets go of it)."""


def _lock_data_dir(path: Path) -> int:
    """Take the data dir's exclusive lock (a `store.lock` beside the database, holding our pid), for as long as
    the store is open: the embedded store serves one coordinator process, whose watches and caches do not cross
    processes. A second opener is refused in one sentence naming the process that holds it; readers
    (`streamplane inspect`) take no lock."""
    lock_path = path.with_name("store.lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:  # a holder that is exiting (a restart right after a kill) lets go
                time.sleep(0.1)
                continue
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StoreUnavailableError(
            f"the embedded store at {path} is in use by process {holder}: it serves one coordinator at a time; "
            "stop that one, or give this one another --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _open_sqlite(path: Path, sync: str, read_only: bool) -> _SqliteRows:
    lock = None
    try:
        if read_only:
            if not path.exists():
                raise StoreUnavailableError(f"no embedded store at {path}")
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = _lock_data_dir(path)
            conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={sync.upper()}")
            conn.executescript(_SCHEMA)
        conn.execute("PRAGMA busy_timeout=5000")
    except sqlite3.Error as err:
        if lock is not None:
            os.close(lock)
        raise StoreUnavailableError(f"cannot open the embedded store at {path}: {err}") from err
    return _SqliteRows(conn, read_only=read_only, lock=lock)
