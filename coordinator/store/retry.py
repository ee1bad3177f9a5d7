"""The retry loop of a store whose commits can fail or end unknown (FoundationDB, and its simulation).

A body may run many times; each run must leave nothing behind but its transaction. The hard case is
`commit_unknown_result`: the commit may have happened, and running the body again would apply the change
twice (a second event, "already exists" for what this very call created). So every attempt that writes also
writes an idempotency token, in a ring of slots per process; after an unknown result the next attempt first
reads the slot, and if the token is there, the earlier attempt committed: its result is returned and the
body is not run again. (FoundationDB 7.3's automatic idempotency does the same inside the client.)
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from streamplane.coordinator import keys
from streamplane.coordinator.store.api import Transaction, Versionstamp, Watch
from streamplane.errors import UnavailableError

T = TypeVar("T")

SLOTS = 1 << 16
"""Token slots per process: a slot is reused only after this many more writing transactions of the process,
far more than can run between an unknown result and its retry."""


class CommitFailed(Exception):  # noqa: N818 - a signal between a driver's attempt and `run`
    """An attempt did not commit, or may not have (`unknown`); `result` is what its body returned."""

    def __init__(self, *, unknown: bool, result: Any = None) -> None:
        super().__init__("commit unknown" if unknown else "not committed")
        self.unknown, self.result = unknown, result


class Tokens:
    """Idempotency tokens of one process: a random process id, a slot counter, random tokens."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random(os.urandom(16))
        self._process = self._rng.randbytes(8).hex()
        self._slots = itertools.count()

    def new(self) -> tuple[bytes, bytes]:
        """(slot key, token) for one attempt."""
        return keys.txn_token_key(self._process, next(self._slots) % SLOTS), self._rng.randbytes(16)


def run(
    attempt: Callable[[Callable[[Transaction], Any]], Any],
    fn: Callable[[Transaction], T],
    tokens: Tokens | None,
    *,
    max_attempts: int | None = 1000,
) -> T:
    """Run `fn` through `attempt` (one transaction: run the body, commit, or raise CommitFailed) until it
    commits. With `tokens`, a retry after an unknown result returns the earlier attempt's result when that
    attempt committed; without, the body runs again (what a store without idempotency does)."""
    pending: _Pending | None = None
    for _ in itertools.count() if max_attempts is None else range(max_attempts):
        body = _Body(fn, tokens, pending)
        try:
            result = attempt(body)
        except CommitFailed as failed:
            if not body.found:
                if failed.unknown and body.key:
                    pending = _Pending(body.key, body.token, failed.result)
                continue
        if body.found:
            assert pending is not None
            return pending.result  # type: ignore[no-any-return]
        return result  # type: ignore[no-any-return]
    raise UnavailableError(f"the store refused the transaction {max_attempts} times in a row")


@dataclass(frozen=True)
class _Pending:
    """An attempt whose commit is unknown: its token slot, its token, what its body returned."""

    key: bytes
    token: bytes
    result: Any


class _Body:
    """One attempt's body: first, after an unknown commit, look for its token (found: it committed, do not
    apply the change again); else run `fn` and, if it wrote, write this attempt's token with it."""

    def __init__(self, fn: Callable[[Transaction], Any], tokens: Tokens | None, pending: _Pending | None) -> None:
        self.fn, self.pending, self.found, self.tokens = fn, pending, False, tokens
        self.key, self.token = b"", b""
        """This attempt's token slot and token: taken only by a body that wrote (most passes only read)."""

    def __call__(self, tr: Transaction) -> Any:
        if self.pending is not None and tr.get(self.pending.key) == self.pending.token:
            self.found = True  # a committed read, whatever becomes of this attempt
            return None
        tracked = Tracked(tr)
        result = self.fn(tracked)
        if self.tokens is not None and tracked.wrote:
            self.key, self.token = self.tokens.new()
            tr.set(self.key, self.token)
        return result


class Tracked:
    """A transaction that notes whether its body wrote anything (a read-only body needs no token)."""

    def __init__(self, tr: Transaction) -> None:
        self._tr = tr
        self.wrote = False

    def _read(self) -> None:
        """Called before every read (a subclass may fail it)."""

    def get(self, key: bytes) -> bytes | None:
        self._read()
        return self._tr.get(key)

    def get_range(
        self, begin: bytes, end: bytes, *, limit: int = 0, reverse: bool = False, snapshot: bool = False
    ) -> list[tuple[bytes, bytes]]:
        self._read()
        return self._tr.get_range(begin, end, limit=limit, reverse=reverse, snapshot=snapshot)

    def run_alone(self) -> None:
        self._tr.run_alone()

    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self._read()
        self._tr.prefetch(keys, ranges)

    def set(self, key: bytes, value: bytes) -> None:
        self.wrote = True
        self._tr.set(key, value)

    def clear(self, key: bytes) -> None:
        self.wrote = True
        self._tr.clear(key)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self.wrote = True
        self._tr.clear_range(begin, end)

    def add(self, key: bytes, delta: int) -> None:
        self.wrote = True
        self._tr.add(key, delta)

    def max(self, key: bytes, value: int) -> None:
        self.wrote = True
        self._tr.max(key, value)

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        self.wrote = True
        self._tr.set_versionstamped_key(key, value)

    def watch(self, key: bytes) -> Watch:
        return self._tr.watch(key)

    def get_versionstamp(self) -> Versionstamp:
        return self._tr.get_versionstamp()
