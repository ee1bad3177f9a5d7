"""The timing of group assignment and worker sessions: TTLs, heartbeats, revokes, the pace of passes, and
what they were measured against. One frozen value, built once per coordinator (`--session-ttl` and friends)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AssignerConfig:
    """Timing of the Assigner."""

    ttl_ms: int = 6000
    """A session silent this long loses its leases. A closed stream (a crashed worker) loses them at once;
    this only bounds a hung or cut-off one (Kafka's consumers take 45 s by default). Measured: at 1 s, a worker
    reading 1,024 busy partitions on a 2-core machine lost its session under load in one run of two; at 3 s,
    none did. Every worker heartbeats every third of it, and gRPC's Python server spends about 0.1 cores on
    1,000 messages a second whatever handles them (`benchmarks/assigner.py --fleet` measures it), so 6 s lets a
    replica serve 1,000 idle workers on 0.05 cores. The dev stack runs 3 s, for quick feedback."""
    heartbeat_interval_ms: int = 2000
    """How often workers are asked to heartbeat: a third of `ttl_ms`, as Kafka advises for its consumers (a
    crashed worker's closed stream ends its session at once; heartbeats only tell a hung worker from a live
    one, and each costs the replica serving it a message)."""
    revoke_ms: int = 1000
    """How long a holder has to hand back a lease that moves to another worker."""
    loop_ms: int = 50
    """The shortest pause between passes of the assignment loop. It sleeps until the next session expiry,
    revoke deadline or load check is due (or a group changes), not a fixed beat: an idle fleet costs nothing."""
    rebalance_ms: int = 500
    """How often the leader recomputes an unchanged group (new load figures, topology changes)."""
    threshold: float = 0.1
    """Imbalance tolerated before moving held leases (see assignment.py)."""
    cooldown_ms: int = 30_000
    """A partition moved to balance load is not moved back to the worker it left within this time."""
    heartbeat_flush_ms: int = 100
    """How long heartbeats wait to be written together (see sessions/writer.py); well under `ttl_ms`."""
    join_window_ms: int = 300
    """A group nobody holds a lease of yet is first assigned once no member joined for this long (at most
    `join_window_max_ms` after its first pass was due), like Kafka's group.initial.rebalance.delay.ms: a fleet
    starting together is assigned once, where assigning whoever joined first and then moving most leases to
    the rest (revoke, release, grant again) cost a 320-worker fleet 18,800 moves. 0 assigns at once."""
    join_window_max_ms: int = 10_000
    """The longest a new group's first assignment waits for joins."""
    split_lag_ms: int = 3_000
    """A partition whose holder is this far behind (its oldest unprocessed record's age), and stays so for
    `split_confirm_ms` without catching up, is split into key slices across the workers that keep up (see
    groups/slices.py). Below a few seconds, a burst a holder absorbs on its own would split partitions."""
    split_confirm_ms: int = 2_000
    """How long a partition's lag must stay past `split_lag_ms`, not shrinking, before it is split."""
    merge_after_ms: int = 30_000
    """How long the slices of an automatic split must stay caught up, carrying under half of what the whole
    partition carried when it was split, before they merge back (the gap between the two rules keeps a
    partition from splitting and merging in turn)."""

    @classmethod
    def with_ttl(cls, ttl_ms: int, **settings: Any) -> AssignerConfig:
        """The config for a session TTL, its heartbeat interval a third of it."""
        return cls(ttl_ms=ttl_ms, heartbeat_interval_ms=max(50, ttl_ms // 3), **settings)
