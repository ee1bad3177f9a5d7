"""Which coordinator replica runs the assignment loop: the holder of the leader key, renewed every loop.

A replica that cannot renew before its lease expires loses leadership, and every assignment transaction
checks the key, so a replica that lost it changes nothing: it stops assigning within one TTL.
"""

from __future__ import annotations

import json

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.errors import FailedPreconditionError


class NotLeaderError(FailedPreconditionError):
    """This replica does not hold the leader key."""


@transactional
def acquire(tr: Transaction, replica: str, now_ms: int, ttl_ms: int) -> bool:
    """Take or renew the leader key if it is free, expired or ours; True if we hold it now."""
    raw = tr.get(keys.LEADER)
    current = json.loads(raw) if raw else None
    if current and current["replica"] != replica and current["expires_ms"] > now_ms:
        return False
    tr.set(keys.LEADER, json.dumps({"replica": replica, "expires_ms": now_ms + ttl_ms}).encode())
    return True


@transactional
def ensure(tr: Transaction, replica: str, now_ms: int) -> None:
    """Raise NotLeaderError unless `replica` holds an unexpired leader key (call inside the changing transaction)."""
    raw = tr.get(keys.LEADER)
    current = json.loads(raw) if raw else None
    if not current or current["replica"] != replica or current["expires_ms"] <= now_ms:
        raise NotLeaderError(f"replica {replica} is not the leader")


@transactional
def leader(tr: Transaction) -> str:
    raw = tr.get(keys.LEADER)
    return json.loads(raw)["replica"] if raw else ""
