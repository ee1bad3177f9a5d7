"""Bearer tokens taken back before they expire: recorded in the store, refused by every replica within a second.

Two kinds of functions: `revoke` and `read_revoked` are transactional (they take `tr` first and compose);
`RevocationList` is a replica's cache of the revoked ids, read again from the store at most every REFRESH_S,
which the guard asks on every call (a set lookup, and one range read a second at most).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.rpc.auth import MAX_TTL_S
from streamplane.coordinator.store.api import Database, Transaction, transactional
from streamplane.errors import InvalidArgumentError, StreamplaneError, quoted

REFRESH_S = 0.5
"""How stale a replica's list may be: a revocation reaches every replica within about this (plus a read)."""


def _check_id(token_id: str) -> str:
    if not token_id or len(token_id) > 64 or not token_id.isalnum():
        raise InvalidArgumentError(f"token id {quoted(token_id)} is not a token id (streamplane whoami shows one)")
    return token_id


@transactional
def revoke(tr: Transaction, token_id: str, *, by: str, reason: str, now_ms: int) -> bool:
    """Take a token back; False if it already was (idempotent)."""
    key = keys.revoked_key(_check_id(token_id))
    if tr.get(key) is not None:
        return False
    tr.set(key, json.dumps({"revoked_ms": now_ms, "by": by, "reason": reason[:500]}).encode())
    return True


@transactional
def read_revoked(tr: Transaction, now_ms: int) -> set[str]:
    """Ids revoked recently enough that a token of theirs may still be valid (older entries are cleared)."""
    r = keys.REVOKED.range()
    out = set()
    for key, raw in tr.get_range(r.start, r.stop, snapshot=True):
        (token_id,) = keys.REVOKED.unpack(key)
        if now_ms - int(json.loads(raw).get("revoked_ms", now_ms)) > MAX_TTL_S * 1000:
            tr.clear(key)  # every token issued before it has expired
            continue
        out.add(token_id)
    return out


class RevocationList:
    """A replica's view of the revoked token ids, at most REFRESH_S old."""

    def __init__(self, db: Database, *, clock: Clock = SYSTEM, on_error: Callable[[str], None] = lambda _: None):
        self.db = db
        self._clock = clock
        self._on_error = on_error
        self._ids: set[str] = set()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def revoked(self, token_id: str) -> bool:
        if self._clock.monotonic() - self._read_at >= REFRESH_S:
            with self._lock:
                if self._clock.monotonic() - self._read_at >= REFRESH_S:
                    try:
                        self._ids = read_revoked(self.db, self._clock.now_ms())
                    except StreamplaneError as err:  # the store is away: the last list stands meanwhile
                        self._on_error(err.message)
                    self._read_at = self._clock.monotonic()
        return token_id in self._ids
