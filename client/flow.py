"""The consumer's limits on what it holds: decoded bytes (a hard cap) and records in flight.

Readers reserve the most a fetch can decode before fetching, and keep the decoded size and record count of
a batch while any of its records is pending: both go back when its last record ends. So the decoded data
held never exceeds the cap, and fetching pauses while the records held reach their limit.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any


class Held:
    """The memory account of one decoded batch: released when its last record ends."""

    __slots__ = ("_budget", "_lock", "_total", "bytes", "records")

    def __init__(self, budget: Budget, nbytes: int, records: int) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self.bytes = nbytes
        self.records = records
        self._total = records

    def release(self, n: int = 1) -> None:
        """`n` of its records ended; the last one gives the batch's records and bytes back to the budget."""
        with self._lock:
            self.records -= n
            last = self.records == 0
        if last:
            self._budget.release(self._total, self.bytes)


class Budget:
    """Records in flight and bytes held, shared by every reader of a consumer."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.records = 0
        self.bytes = 0
        self.peak_bytes = 0
        self._cond = threading.Condition()
        self._on_room: Callable[[], None] | None = None

    def reserve(self, nbytes: int, timeout_s: float) -> bool:
        """Reserve `nbytes` for a fetch when the records in flight are under their limit; False on timeout."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self.records < self.max_records and self.bytes + nbytes <= self.max_bytes, timeout_s
            )
            if ok:
                self.bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.bytes)
            return ok

    def has_room(self, nbytes: int) -> bool:
        """Whether a fetch that may decode `nbytes` could start now."""
        return self.records < self.max_records and self.bytes + nbytes <= self.max_bytes

    def settle(self, reserved: int, used: int, records: int) -> None:
        """Turn a fetch's reservation into what its batch really holds (`used` <= `reserved`)."""
        with self._cond:
            self.bytes += used - reserved
            self.records += records
            self._cond.notify_all()

    def release(self, records: int, nbytes: int) -> None:
        with self._cond:
            self.records -= records
            self.bytes -= nbytes
            self._cond.notify_all()
            on_room, self._on_room = self._on_room, None
        if on_room is not None:
            on_room()

    def call_on_release(self, fn: Callable[[], None]) -> None:
        """Call `fn` once, at the next release (a paused fetch loop's wake-up)."""
        with self._cond:
            self._on_room = fn


class ByPriority(queue.Queue[Any]):
    """Work waiting for the handlers, higher-priority lanes first: a backlog on a lower lane never queues ahead
    of the top lane's records. Within a priority the owners of queued work (leases) take turns, each's items in
    arrival order: a lease with a long backlog never holds one granted after it behind all of that backlog (a
    rewind, a failover or a rebalance hands a worker hundreds of partitions, each with records to catch up on,
    at once: each starts within a turn of every other, not after all those before it in the response).

    Args:
        key_of: an item's priority and owner.
    """

    PRUNE_AT = 64
    """Owners remembered, beyond twice those kept by the last pruning, at which the owners whose turn has come
    (nothing of theirs is queued) are forgotten: amortized O(1) a new owner."""

    def __init__(self, key_of: Callable[[Any], tuple[int, object]]) -> None:
        self._key_of = key_of
        super().__init__()

    def _init(self, maxsize: int) -> None:
        self.queue: list[tuple[int, int, int, Any]] = []
        self._arrivals = itertools.count()
        self._turns: dict[int, int] = {}
        """{priority: the latest turn of its items taken}: new work of that priority takes its turn from there (a
        priority of its own each, so a higher lane's turns never put a lower lane's new owners behind its
        backlog)."""
        self._next_turn: dict[object, tuple[int, int]] = {}
        """{owner: (its priority, the turn of its next item)}, for owners with items queued (and some whose turn
        came)."""
        self._prune_at = self.PRUNE_AT

    def _qsize(self) -> int:
        return len(self.queue)

    def _put(self, item: Any) -> None:
        priority, owner = self._key_of(item)
        _, next_turn = self._next_turn.get(owner, (priority, 0))
        turn = max(self._turns.get(priority, 0), next_turn)
        self._next_turn[owner] = (priority, turn + 1)
        heapq.heappush(self.queue, (-priority, turn, next(self._arrivals), item))

    def _get(self) -> Any:
        negative, turn, _, item = heapq.heappop(self.queue)
        turns = self._turns
        turns[-negative] = max(turns.get(-negative, 0), turn)
        if len(self._next_turn) > self._prune_at:  # O(owners), once per as many new ones
            self._next_turn = {o: (p, t) for o, (p, t) in self._next_turn.items() if t > turns.get(p, 0)}
            self._prune_at = 2 * len(self._next_turn) + self.PRUNE_AT
        return item
