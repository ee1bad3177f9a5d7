"""A store that behaves like FoundationDB at its worst, around a real one, reproducibly from a seed.

FoundationDB may answer a commit with `not_committed` (a conflict), `transaction_too_old` (the body ran past
5 s of reads) or `commit_unknown_result` (the commit may or may not have happened); its retry loop then runs
the transaction body again. Our embedded store never does any of that, so `ChaosDatabase` does it on
purpose: every body must be correct when run again, including after an attempt that did commit. Faults are
drawn from `random.Random(seed)`, so a failing run replays exactly.

The retry loop is the FoundationDB driver's (`store.retry.run`): idempotency tokens let a retry after an
unknown result find out that the earlier attempt committed, and return its result instead of applying the
change twice.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from streamplane.coordinator.store import retry
from streamplane.coordinator.store.api import Database, StoreUnavailableError, Transaction

T = TypeVar("T")


@dataclass(frozen=True)
class Faults:
    """Probabilities, per attempt, of each way FoundationDB may refuse or lose track of a commit."""

    conflict: float = 0.0
    """not_committed: the body ran, nothing was written."""
    too_old: float = 0.0
    """transaction_too_old: a read fails part way through the body; nothing was written."""
    unknown_committed: float = 0.0
    """commit_unknown_result, and the commit did happen."""
    unknown_lost: float = 0.0
    """commit_unknown_result, and the commit did not happen."""


class ChaosDatabase:
    """A Database that injects FoundationDB's commit failures around `inner` (usually the embedded store)."""

    driver = "chaos"

    def __init__(self, inner: Database, *, seed: int, faults: Faults, idempotent: bool = True) -> None:
        self.inner = inner
        self.faults = faults
        self.idempotent = idempotent
        """False plants a bug: a retry after an unknown result runs the body again even if it committed."""
        self.injected: Counter[str] = Counter()
        self.down = False
        """True: every transaction fails with StoreUnavailableError, as while the database restarts."""
        self._rng = random.Random(seed)
        self._tokens = retry.Tokens(self._rng)

    def _draw(self) -> str:
        f, x = self.faults, self._rng.random()
        for name, p in (
            ("conflict", f.conflict),
            ("too_old", f.too_old),
            ("unknown_committed", f.unknown_committed),
            ("unknown_lost", f.unknown_lost),
        ):
            if x < p:
                return name
            x -= p
        return ""

    def transact(self, fn: Callable[[Transaction], T]) -> T:
        if self.down:
            raise StoreUnavailableError("the store is down (a database restart)")
        return retry.run(self._attempt, fn, self._tokens if self.idempotent else None)

    def _attempt(self, body: Callable[[Transaction], Any]) -> Any:
        """One attempt: run `body` in a transaction of `inner` and commit, or fail the way FoundationDB can."""
        fault = self._draw()
        if fault:
            self.injected[fault] += 1
        trs: list[Transaction] = []

        def attempt(tr: Transaction) -> Any:
            trs.append(tr)
            cut_at = self._rng.randrange(1, 8) if fault == "too_old" else 0
            result = body(_Cut(tr, cut_at) if cut_at else tr)
            if fault in ("conflict", "too_old", "unknown_lost"):
                raise _Abort(fault)  # roll back what the body wrote
            return result

        try:
            result = self.inner.transact(attempt)
        except _Abort as abort:
            raise retry.CommitFailed(unknown=abort.fault == "unknown_lost") from None
        if fault == "unknown_committed":
            stamp = trs[-1].get_versionstamp()
            if hasattr(stamp, "committed"):  # as on FoundationDB: an unknown commit has no known versionstamp
                stamp.committed = False
            raise retry.CommitFailed(unknown=True, result=result)
        return result

    def close(self) -> None:
        self.inner.close()


class _Abort(BaseException):
    def __init__(self, fault: str) -> None:
        super().__init__(fault)
        self.fault = fault


class _Cut(retry.Tracked):
    """A transaction whose `cut_at`-th read fails as transaction_too_old would (it is then rolled back)."""

    def __init__(self, tr: Transaction, cut_at: int) -> None:
        super().__init__(tr)
        self._left = cut_at

    def _read(self) -> None:
        self._left -= 1
        if self._left == 0:
            raise _Abort("too_old")
