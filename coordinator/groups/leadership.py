"""Which coordinator replica does what: one leader (the holder of the leader key) runs the sealer and the
autopilot; each group's assignment is run by the replica owning the group's key, and groups spread over the
live replicas, each claiming its fair share. Keys are renewed every third of a TTL.

A replica that cannot renew before its lease expires loses it, and every changing transaction checks the
key, so a replica that lost it changes nothing: it stops within one TTL, and only its groups move.
"""

from __future__ import annotations

import json
import math

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology.records import UNDECODABLE
from streamplane.errors import FailedPreconditionError


class NotLeaderError(FailedPreconditionError):
    """This replica does not hold the leader key."""


def _hold(raw: bytes | None) -> tuple[str, int] | None:
    """(replica, until when in ms) of a holder key (the leader's, a group owner's, a replica's registration);
    None when there is none. A torn one (never written so by this code) is a hold that has expired: any replica
    takes it over, so no loop stops on it."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return str(data.get("replica", "")), int(data["expires_ms"])
    except UNDECODABLE:
        return "", 0


@transactional
def acquire(tr: Transaction, replica: str, now_ms: int, ttl_ms: int) -> tuple[bool, int]:
    """Take or renew the leader key if it is free, expired or ours. Returns whether we hold it now, and until
    when the key holds as it stands (ours, or another replica's: the earliest a standby could take it)."""
    current = _hold(tr.get(keys.LEADER))
    if current and current[0] != replica and current[1] > now_ms:
        return False, current[1]
    tr.set(keys.LEADER, json.dumps({"replica": replica, "expires_ms": now_ms + ttl_ms}).encode())
    return True, now_ms + ttl_ms


@transactional
def ensure(tr: Transaction, replica: str, now_ms: int) -> None:
    """Raise NotLeaderError unless `replica` holds an unexpired leader key (call inside the changing transaction)."""
    current = _hold(tr.get(keys.LEADER))
    if not current or current[0] != replica or current[1] <= now_ms:
        raise NotLeaderError(f"replica {replica} is not the leader")


@transactional
def leader(tr: Transaction) -> str:
    current = _hold(tr.get(keys.LEADER))
    return current[0] if current else ""


@transactional
def claim_groups(tr: Transaction, replica: str, groups: list[str], now_ms: int, ttl_ms: int) -> tuple[set[str], int]:
    """Renew this replica's liveness and its groups, and claim free ones (unowned, or whose owner let its key
    expire) up to its fair share of the groups among the live replicas; past its share (a replica joined) it
    lets the extra ones go. Returns the groups it owns now, and the earliest another replica's hold on a group
    expires (0: none), which is when one could next be claimed unless an owner lets one go first."""
    tr.set(keys.replica_key(replica), json.dumps({"expires_ms": now_ms + ttl_ms}).encode())
    r = keys.REPLICAS.range()
    live = 0
    for key, raw in tr.get_range(r.start, r.stop):
        expires = (_hold(raw) or ("", 0))[1]
        if expires > now_ms:
            live += 1
        elif expires < now_ms - 10 * ttl_ms:
            tr.clear(key)  # long gone
    share = math.ceil(len(groups) / max(1, live))
    mine, free = [], []
    others_expire = 0
    for group in sorted(groups):
        owner = _hold(tr.get(keys.group_owner_key(group)))
        if owner is None or owner[1] <= now_ms:
            free.append(group)
        elif owner[0] == replica:
            mine.append(group)
        else:
            others_expire = min(others_expire or owner[1], owner[1])
    keep, release = mine[:share], mine[share:]
    claim = free[: max(0, share - len(keep))]
    lease = json.dumps({"replica": replica, "expires_ms": now_ms + ttl_ms}).encode()
    for group in keep + claim:
        tr.set(keys.group_owner_key(group), lease)
    for group in release:
        tr.clear(keys.group_owner_key(group))
    if release:  # every replica's loop wakes: one without its share claims them now, not at its next renewal
        tr.add(keys.ASSIGNER_WAKE, 1)
    return set(keep + claim), int(others_expire)


def replica_expiries(tr: Transaction) -> dict[str, int]:
    """{replica: until when its registration holds (ms)}, read without conflicts: every replica renews its own
    every third of a TTL, and a reader of members must not conflict with that."""
    r = keys.REPLICAS.range()
    return {
        keys.REPLICAS.unpack(k)[0]: (_hold(v) or ("", 0))[1] for k, v in tr.get_range(r.start, r.stop, snapshot=True)
    }


def replica_expires(tr: Transaction, replica: str) -> int:
    """Until when one replica's registration holds (0: none), read with a conflict: a decision that a replica is
    gone is redone if it renews meanwhile."""
    current = _hold(tr.get(keys.replica_key(replica)))
    return current[1] if current else 0


@transactional
def ensure_group(tr: Transaction, group: str, replica: str, now_ms: int) -> None:
    """Raise NotLeaderError unless `replica` owns `group` (call inside the changing transaction)."""
    owner = _hold(tr.get(keys.group_owner_key(group)))
    if not owner or owner[0] != replica or owner[1] <= now_ms:
        raise NotLeaderError(f"replica {replica} does not run group {group!r}")


@transactional
def group_owner(tr: Transaction, group: str) -> str:
    owner = _hold(tr.get(keys.group_owner_key(group)))
    return owner[0] if owner else ""
