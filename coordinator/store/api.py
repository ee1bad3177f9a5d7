"""The store interface every coordinator module is written against, with FoundationDB's semantics.

Both drivers (embedded, FoundationDB) provide `Database` and `Transaction`. Transactions are serializable;
keys and values are bytes, ordered bytewise. Transactional functions take `tr` first and are decorated with
`@transactional`: given a database they run in a fresh transaction with the driver's retry loop, given a
transaction they join it, so they compose. A body may run more than once, so it must have no side effects
outside `tr`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, runtime_checkable

from streamplane.errors import LimitExceededError, UnavailableError

# FoundationDB's limits, enforced by the embedded driver too so that code tested locally fits on FoundationDB.
MAX_KEY_BYTES = 10_000
MAX_VALUE_BYTES = 100_000
MAX_TRANSACTION_BYTES = 10_000_000


class StoreLimitError(LimitExceededError):
    """A key, value or transaction exceeded FoundationDB's size limits; nothing of the transaction was written."""


class StoreUnavailableError(UnavailableError):
    """The store cannot be opened or reached (missing client library, bad cluster file, closed database)."""


class Watch(Protocol):
    """Fires once, after commit, when the watched key's value may have changed."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the watch fires or `timeout` seconds pass; True if it fired."""
        ...

    def cancel(self) -> None:
        """Stop watching; a later `wait` returns False once its timeout passes."""
        ...

    def on_fire(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the watch fires (at once if it has): from whichever thread fires it, so it
        must be quick and thread-safe (an event loop's call_soon_threadsafe). Not called once cancelled."""
        ...


class Versionstamp(Protocol):
    """The 10-byte commit versionstamp of a transaction, available once it has committed."""

    def wait(self) -> bytes:
        """The transaction's versionstamp; raises if the transaction did not commit."""
        ...


@runtime_checkable
class Transaction(Protocol):
    """One serializable transaction: reads see its own writes; nothing is visible to others until commit."""

    def get(self, key: bytes) -> bytes | None:
        """The value of `key`, or None."""
        ...

    def get_range(
        self, begin: bytes, end: bytes, *, limit: int = 0, reverse: bool = False, snapshot: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """Key-value pairs with begin <= key < end in key order (descending if reverse); limit 0 is no limit.

        A snapshot read adds no read conflict (FoundationDB), for reads that must not abort the transaction.
        """
        ...

    def run_alone(self) -> None:
        """A hint, given before the transaction's first read: it writes what many transactions like it write at
        the same time (the commit log's batches). A store whose conflict detection is coarser than our keys may
        run it alone rather than let it race and retry; stores that run transactions one at a time, or detect
        conflicts per key, ignore it."""
        ...

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """A hint: these keys and these whole ranges are about to be read. A store may read them now, together
        (one round trip instead of one per read); later reads answer the same either way."""
        ...

    def set(self, key: bytes, value: bytes) -> None:
        """Write `value` at `key`."""
        ...

    def clear(self, key: bytes) -> None:
        """Remove `key`."""
        ...

    def clear_range(self, begin: bytes, end: bytes) -> None:
        """Remove every key with begin <= key < end."""
        ...

    def add(self, key: bytes, delta: int) -> None:
        """Atomically add `delta` to a 64-bit little-endian signed counter (missing = 0), without a read conflict."""
        ...

    def max(self, key: bytes, value: int) -> None:
        """Atomically keep the larger of the stored and given 64-bit little-endian unsigned values."""
        ...

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        """Write `value` at `key` with its incomplete versionstamp filled in at commit.

        `key` comes from `fdb.tuple.pack` of a tuple holding an incomplete `fdb.tuple.Versionstamp`
        (its last 4 bytes give the stamp's position), as FoundationDB's API version >= 520 expects.
        """
        ...

    def watch(self, key: bytes) -> Watch:
        """A watch on `key`, active once this transaction commits."""
        ...

    def get_versionstamp(self) -> Versionstamp:
        """This transaction's commit versionstamp, to read after commit."""
        ...


@runtime_checkable
class Database(Protocol):
    """A handle on the store."""

    @property
    def driver(self) -> str:
        """'embedded' or 'fdb'."""
        ...

    def transact(self, fn: Callable[[Transaction], T]) -> T:
        """Run `fn` in a new transaction, retrying on retryable errors, and commit; return fn's result."""
        ...

    def close(self) -> None:
        """Release the database's resources; later calls fail with StoreUnavailableError."""
        ...


T = TypeVar("T")
P = ParamSpec("P")


def transactional(fn: Callable[Concatenate[Transaction, P], T]) -> Callable[Concatenate[Any, P], T]:
    """Let `fn(tr, ...)` be called with a Database (new transaction, retried) or a Transaction (joined)."""

    @functools.wraps(fn)
    def wrapper(db_or_tr: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        if hasattr(db_or_tr, "transact"):
            return cast(T, db_or_tr.transact(lambda tr: fn(tr, *args, **kwargs)))
        return fn(db_or_tr, *args, **kwargs)

    return cast(Callable[Concatenate[Any, P], T], wrapper)


def read_counter(tr: Transaction, key: bytes) -> int:
    """A counter kept with `Transaction.add` (little-endian, as FoundationDB's atomic add): 0 when absent."""
    return int.from_bytes(tr.get(key) or b"\0" * 8, "little")


def check_key(key: bytes) -> None:
    """Raise StoreLimitError if `key` is longer than FoundationDB allows."""
    if len(key) > MAX_KEY_BYTES:
        raise StoreLimitError(f"key of {len(key)} bytes exceeds the store's limit of {MAX_KEY_BYTES} bytes")


def check_value(key: bytes, value: bytes) -> None:
    """Raise StoreLimitError if `value` is longer than FoundationDB allows."""
    if len(value) > MAX_VALUE_BYTES:
        raise StoreLimitError(
            f"value of {len(value)} bytes at key {key[:40]!r} exceeds the store's limit of {MAX_VALUE_BYTES} bytes"
        )
