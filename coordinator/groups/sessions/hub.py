"""Worker sessions served on the replica's event loop: no thread, timer or poll per session.

A session's stream sleeps on one asyncio event until something concerns it: its member's watch fires (a lease
of it changed), the topology log moves (a seal changes an end offset, not a lease), its session ends on this
replica's side (bad input, or the store says it ended), or its worker fell silent past the TTL. Then it looks
at the store (through the replica's session reader, batched with the other sessions' looks) and tells its
worker what changed. The last two causes are found by one task per replica (`SessionHub`), every TICK_S, for
all its sessions at once. What blocks on the store (opening and closing a session) runs on the loop's executor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import structlog

from streamplane.coordinator.groups.sessions.host import Session, SessionHost
from streamplane.coordinator.rpc.auth import ANONYMOUS, Principal
from streamplane.coordinator.rpc.event_loop import setter
from streamplane.coordinator.rpc.limits import CREDENTIAL_GRACE_S
from streamplane.coordinator.store.api import Watch
from streamplane.errors import InvalidArgumentError, StreamplaneError, UnauthenticatedError
from streamplane.model import Expect, Heartbeat, Hello, Release, Renew, SessionEvent, WorkerMessage

log = structlog.get_logger(__name__)

TICK_S = 0.25
"""How often the hub checks every session's TTL and the topology log's head."""
EXPECT_MS = 2_000
"""How long a worker told that grants are on their way (`SessionHub.expect`) keeps its long polls short at most,
unless told again: a rewind's plan and apply take well under it."""
EXPECT_AFTER_MS = 250
"""How long it keeps them short once the rewind is applied: its grants reach the workers in tens of ms."""


Renewer = Callable[[Principal, str], Principal]
"""Checks a Renew's token against the session's principal and returns the renewed principal (the servicer's:
it verifies tokens); raises UnauthenticatedError or PermissionDeniedError for a token that may not renew it."""


class SessionStream:
    """One worker's session as its stream sees it."""

    def __init__(
        self,
        hub: SessionHub,
        session: Session,
        principal: Principal = ANONYMOUS,
        renew: Renewer | None = None,
        revoked: Callable[[Principal], bool] | None = None,
    ) -> None:
        self.hub = hub
        self.session = session
        self.principal = principal
        self._renew = renew
        self._revoked = revoked
        self.wake = asyncio.Event()
        self.expired = False
        self.credential_lapsed = ""
        self.takes_hints = False
        """Its worker reads `Expect` (its hello said so)."""
        self.expecting: int | None = None
        """Grants are on their way: an `Expect` of this many milliseconds is told first (None: none to tell)."""
        session.on_change = setter(hub.loop, self.wake)

    def take(self, message: WorkerMessage | None) -> None:
        """A message from the worker after its hello (O(1): written later with the replica's others); bad input
        raises InvalidArgumentError, a Renew whose token may not renew the session UnauthenticatedError or
        PermissionDeniedError (the session then ends)."""
        match message:
            case Heartbeat() as beat:
                self.session.heartbeat(beat)
            case Release(lease_id=lid, epoch=epoch):
                self.session.release(lid, epoch)
            case Renew(token=token):
                if self._renew is not None:  # else this coordinator checks no credentials: nothing to renew
                    self.principal = self._renew(self.principal, token)
            case other:
                what = type(other).__name__.lower() if other else "an empty message"
                raise InvalidArgumentError(f"a session takes one hello, then heartbeats and releases, not {what}")

    def lapsed(self, now_ms: int) -> str:
        """Why the session's credential no longer holds: its token expired more than CREDENTIAL_GRACE_S ago
        without a Renew, or was revoked; "" while it holds."""
        expires = self.principal.expires_ms
        if expires and now_ms > expires + CREDENTIAL_GRACE_S * 1000:
            return f"its bearer token expired and was not renewed within {CREDENTIAL_GRACE_S:g} s"
        if self._revoked is not None and self._revoked(self.principal):
            return f"its bearer token {self.principal.token_id} was revoked"
        return ""

    async def end(self, reason: str) -> None:
        """End the session (frees its leases in the store)."""
        await asyncio.to_thread(self.session.close, reason)

    def end_soon(self, reason: str) -> None:
        """`end` without waiting (from a call's done callback, on the loop)."""
        with contextlib.suppress(RuntimeError):  # stopping: its sessions are left for the next to resume
            self.hub.loop.run_in_executor(None, self.session.close, reason)

    async def fail(self, error: StreamplaneError) -> None:
        """End the session for the worker's bad input; its stream reports `error`."""
        await asyncio.to_thread(self.session.fail, error)

    async def events(self) -> AsyncIterator[list[SessionEvent]]:
        """Grants, revokes and seals as the group's owner decides them, until the session ends: it ends by
        raising why (FencedError once expired or replaced, the worker's own error after bad input). Each item
        is what one look found changed, in order (a rewind's or a join's grants come together)."""
        session = self.session
        watch: Watch | None = None
        try:
            while True:
                if session.failure is not None:
                    raise session.failure
                if self.expired:
                    raise await asyncio.to_thread(session.expire)
                if self.credential_lapsed:
                    lapsed = UnauthenticatedError(
                        f"session {session.session_id} ended: {self.credential_lapsed}; its leases were revoked"
                    )
                    await asyncio.to_thread(session.fail, lapsed, "credential expired")
                    raise lapsed
                self.wake.clear()
                if self.expecting is not None:  # told before the store is looked at: grants follow shortly
                    for_ms, self.expecting = self.expecting, None
                    yield [Expect(for_ms)]
                look, current = await asyncio.wrap_future(session.host.reader.submit(session.look))
                watch = current  # cancelled below, or in `finally` if the stream ends while it waits
                current.on_fire(setter(self.hub.loop, self.wake))
                if look is not None and (told := list(session.tell(*look))):
                    yield told
                await self.wake.wait()
                current.cancel()
        finally:
            if watch is not None:
                watch.cancel()  # a second cancel is harmless
            self.hub.forget(self)


class SessionHub:
    """The sessions a replica serves on its event loop, and the one task that checks their TTLs and the
    topology log for all of them."""

    def __init__(self, host: SessionHost, loop: asyncio.AbstractEventLoop, *, tick_s: float = TICK_S) -> None:
        self.host = host
        self.loop = loop
        self.tick_s = tick_s
        self._streams: set[SessionStream] = set()
        self._task: asyncio.Task[None] | None = None

    async def open(
        self,
        hello: Hello,
        principal: Principal,
        renew: Renewer | None = None,
        revoked: Callable[[Principal], bool] | None = None,
    ) -> SessionStream:
        """Open (or resume) the session a worker's hello asks for; on the loop."""
        session = await asyncio.to_thread(
            self.host.open_session,
            hello.group,
            hello.worker_id,
            list(hello.subscriptions),
            capacity=hello.capacity,
            max_load=hello.max_load,
            resume_session=hello.resume_session,
            principal=principal.name,
            where=hello.where,
            takes_slices=hello.takes_slices,
        )
        stream = SessionStream(self, session, principal, renew, revoked)
        stream.takes_hints = hello.takes_hints
        self._streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch_all(), name="session-hub")
        return stream

    def forget(self, stream: SessionStream) -> None:
        self._streams.discard(stream)

    def expect(self, group: str, for_ms: int = EXPECT_MS) -> None:
        """Tell the workers of `group` served here (those that take hints) that grants are on their way: a
        rewind is being applied. They keep their long polls short for `for_ms` (0: no longer), so that each
        reads its new positions as soon as its grants come rather than after the Fetch it has in flight. From
        any thread; nothing once the loop has closed. Workers served by another replica are not told (they
        read a long poll later)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: no session is served here any more
            self.loop.call_soon_threadsafe(self._expect, group, for_ms)

    def _expect(self, group: str, for_ms: int) -> None:
        for stream in self._streams:
            if stream.takes_hints and stream.session.group == group:
                stream.expecting = for_ms
                stream.wake.set()

    def check(self, last_head: int, look_anyway: bool = False) -> int:
        """Wake the sessions whose worker fell silent past the TTL, and those that have not looked since the
        topology log moved (all of them with `look_anyway`); returns the head seen."""
        head = self.host.topology_head
        moved = head != last_head
        now_ms = self.host.clock.now_ms()
        for stream in self._streams:
            session = stream.session
            if session.silent():
                stream.expired = True
                stream.wake.set()
            elif why := stream.lapsed(now_ms):
                stream.credential_lapsed = why
                stream.wake.set()
            elif look_anyway or (moved and session.seen_topology_head != head):
                stream.wake.set()
        return head

    async def _watch_all(self) -> None:
        # While the topology log is not followed (-1: the store is unreachable), every session looks at every
        # heartbeat interval instead, so that seals still reach the workers.
        unfollowed_every = max(1, round(self.host.config.heartbeat_interval_ms / 1000 / self.tick_s))
        head, ticks = self.host.topology_head, 0
        while self._streams:
            await asyncio.sleep(self.tick_s)
            ticks += 1
            try:
                head = self.check(head, look_anyway=head < 0 and ticks % unfollowed_every == 0)
            except Exception:  # never let one bad session stop the checks of all
                log.exception("sessions.check_failed")
