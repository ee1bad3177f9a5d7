"""The FoundationDB store driver: the official `fdb` bindings behind the store interface.

Selected by STREAMPLANE_STORE=fdb; the cluster file comes from FDB_CLUSTER_FILE (or fdb's default). The API
version is pinned. The bindings' `on_error` decides what is retried and how long to back off; our retry loop
(`store.retry`) adds idempotency tokens, so a body is never applied twice after `commit_unknown_result`
(tests/store/test_store_faults.py runs every change through that loop under injected faults).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from streamplane.coordinator.store import retry
from streamplane.coordinator.store.api import StoreLimitError, StoreUnavailableError, Transaction

API_VERSION = 730
T = TypeVar("T")

# fdb error codes for FoundationDB's size limits (https://apple.github.io/foundationdb/api-error-codes.html).
_LIMIT_ERRORS = {2101: "transaction_too_large", 2102: "key_too_large", 2103: "value_too_large"}
COMMIT_UNKNOWN_RESULT = 1021
_NOTHING = object()

_api_lock = threading.Lock()


def load_fdb() -> Any:
    """Import the bindings and select the pinned API version once per process; explain failures plainly."""
    with _api_lock:
        import fdb

        if not fdb.is_api_version_selected():
            try:
                fdb.api_version(API_VERSION)
            except Exception as err:
                raise StoreUnavailableError(
                    f"the FoundationDB client library (libfdb_c) could not be loaded for API version "
                    f"{API_VERSION}: {err}. Install the foundationdb-clients package, or use the embedded store."
                ) from err
        return fdb


class _FdbWatch:
    def __init__(self, future: Any) -> None:
        self._future = future
        self._ready = threading.Event()
        self._cancelled = False
        future.on_ready(lambda _f: self._ready.set())

    def wait(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def cancel(self) -> None:
        self._cancelled = True
        self._future.cancel()

    def on_fire(self, callback: Callable[[], None]) -> None:
        # on_ready calls at once when ready, else from the network thread; a cancelled watch is ready too
        self._future.on_ready(lambda _f: None if self._cancelled else callback())


class _FdbVersionstamp:
    def __init__(self, future: Any) -> None:
        self._future = future

    def wait(self) -> bytes:
        try:
            return bytes(self._future.wait())
        except Exception as err:  # fdb.FDBError: no versionstamp (not committed, or commit result unknown)
            raise StoreUnavailableError(f"the transaction's versionstamp is not known: {err}") from err


class FdbTransaction:
    """The store interface over one `fdb.Transaction`."""

    def __init__(self, tr: Any) -> None:
        self._tr = tr
        self._stamp: Any = None

    def get(self, key: bytes) -> bytes | None:
        value = self._tr.get(key).wait()
        return bytes(value) if value.present() else None

    def get_range(
        self, begin: bytes, end: bytes, *, limit: int = 0, reverse: bool = False, snapshot: bool = False
    ) -> list[tuple[bytes, bytes]]:
        source = self._tr.snapshot if snapshot else self._tr
        return [(bytes(kv.key), bytes(kv.value)) for kv in source.get_range(begin, end, limit=limit, reverse=reverse)]

    def run_alone(self) -> None:
        """FoundationDB detects conflicts per key range: racing costs nothing when the keys differ."""

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """FoundationDB's reads are futures the client pipelines: nothing to gather here."""

    def set(self, key: bytes, value: bytes) -> None:
        self._tr.set(key, value)

    def clear(self, key: bytes) -> None:
        self._tr.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._tr.clear_range(begin, end)

    def add(self, key: bytes, delta: int) -> None:
        self._tr.add(key, struct.pack("<q", delta))

    def max(self, key: bytes, value: int) -> None:
        self._tr.max(key, struct.pack("<Q", value))

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self._tr.set_versionstamped_key(key, value)
        if self._stamp is None:  # asked for before commit, as FoundationDB requires; read after it
            self._stamp = self._tr.get_versionstamp()

    def watch(self, key: bytes) -> _FdbWatch:
        return _FdbWatch(self._tr.watch(key))

    def get_versionstamp(self) -> _FdbVersionstamp:
        if self._stamp is None:
            self._stamp = self._tr.get_versionstamp()
        return _FdbVersionstamp(self._stamp)


class FoundationDBDatabase:
    """A FoundationDB cluster, opened from a cluster file."""

    driver = "fdb"

    def __init__(self, cluster_file: str | None = None) -> None:
        fdb = load_fdb()
        self._fdb = fdb
        try:
            self._db = fdb.open(cluster_file) if cluster_file else fdb.open()
        except fdb.FDBError as err:
            raise StoreUnavailableError(f"cannot open FoundationDB with cluster file {cluster_file!r}: {err}") from err
        self.cluster_file = cluster_file
        self._tokens = retry.Tokens()

    def transact(self, fn: Callable[[Transaction], T]) -> T:
        tr = self._db.create_transaction()

        def attempt(body: Callable[[Transaction], Any]) -> Any:
            result: Any = _NOTHING
            try:
                result = body(FdbTransaction(tr))
                tr.commit().wait()
                return result
            except self._fdb.FDBError as err:
                if err.code in _LIMIT_ERRORS:
                    raise StoreLimitError(f"FoundationDB refused the transaction: {_LIMIT_ERRORS[err.code]}") from err
                try:
                    tr.on_error(err).wait()  # waits out a retryable error (and resets tr), re-raises any other
                except self._fdb.FDBError as final:
                    raise StoreUnavailableError(f"FoundationDB transaction failed: {final}") from final
                unknown = err.code == COMMIT_UNKNOWN_RESULT and result is not _NOTHING
                raise retry.CommitFailed(unknown=unknown, result=result) from None

        return retry.run(attempt, fn, self._tokens, max_attempts=None)

    def close(self) -> None:
        """The bindings keep one network thread per process; there is nothing to release per database."""
