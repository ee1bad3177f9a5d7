"""The servicers' gate: who is calling (a bearer token or a client certificate), may they, and how often.

Every servicer method asks the guard first (`require`), before it reads the request any further; the actor of
every event is the principal it returns, never a name the client sent.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.groups.revocations import RevocationList
from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.auth import ANONYMOUS, Identity, Principal, TokenIssuer, load_keys
from streamplane.coordinator.store.api import Database
from streamplane.errors import InvalidArgumentError, LimitExceededError, UnauthenticatedError

AUTHORIZATION = "authorization"
CHANGES_PER_S = 20.0
"""Topology changes (clusters, streams, lanes, failovers, group settings) one principal may make per second,
sustained; CHANGE_BURST at once."""
CHANGE_BURST = 200.0
KEY_FILE_CHECK_S = 1.0
"""How often the token key file is looked at (one stat) for a rotation."""


@dataclass
class _Bucket:
    tokens: float
    at: float


class Guard:
    """Authenticates calls and checks permissions. Without an issuer and identities, authentication is off
    and every caller is `auth.ANONYMOUS` (the server refuses that on a non-loopback address)."""

    def __init__(
        self,
        issuer: TokenIssuer | None = None,
        identities: dict[str, Identity] | None = None,
        *,
        clock: Clock = SYSTEM,
        changes_per_s: float = CHANGES_PER_S,
        change_burst: float = CHANGE_BURST,
        key_file: Path | None = None,
    ) -> None:
        """`key_file`: where the issuer's keys come from; it is read again when it changes (a rotation)."""
        self._key_file = key_file
        self._key_stamp: tuple[int, int, int] | None = None
        self._key_checked = float("-inf")
        if key_file is not None and issuer is None:
            issuer = TokenIssuer.of(load_keys(key_file))
            self._key_stamp = self._stamp()
        self.revocations: RevocationList | None = None
        self.issuer = issuer
        self.identities = identities or {}
        self._clock = clock
        self._rate = changes_per_s
        self._burst = change_burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def attach(self, db: Database) -> None:
        """Check every token against the revocations in `db` (the coordinator's store)."""
        self.revocations = RevocationList(db, clock=self._clock)

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._key_file) if self._key_file else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino) if st else None

    def _current_issuer(self) -> TokenIssuer | None:
        """The issuer, its keys read again if the key file changed (at most one stat a second)."""
        if self._key_file is not None and self._clock.monotonic() - self._key_checked >= KEY_FILE_CHECK_S:
            self._key_checked = self._clock.monotonic()
            stamp = self._stamp()
            if stamp is not None and stamp != self._key_stamp:
                try:
                    self.issuer = TokenIssuer.of(load_keys(self._key_file))
                    self._key_stamp = stamp
                except InvalidArgumentError:
                    pass  # being rewritten: the keys we have stand until it reads whole
        return self.issuer

    @property
    def enabled(self) -> bool:
        return self.issuer is not None or bool(self.identities)

    def principal(self, context: grpc.ServicerContext) -> Principal:
        """The caller; UnauthenticatedError when authentication is on and the call proves no identity."""
        if not self.enabled:
            return ANONYMOUS
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                return self.bearer(str(value))
        names = (context.auth_context() or {}).get("x509_common_name") or []
        if names:
            name = names[0].decode(errors="replace")
            identity = self.identities.get(name)
            if identity is None:
                raise UnauthenticatedError(f"client certificate {name!r} is not an identity this coordinator knows")
            return Principal(name, identity.role, identity.streams, identity.groups, via="certificate")
        raise UnauthenticatedError(
            "the call carries no credential: pass --token or set STREAMPLANE_TOKEN (streamplane dev writes one "
            "for its own address), or present a client certificate"
        )

    def bearer(self, authorization: str) -> Principal:
        """The principal of an `authorization` value ('Bearer <token>'), for gRPC metadata and HTTP alike."""
        if not self.enabled:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        issuer = self._current_issuer()
        if scheme.lower() != "bearer" or not token.strip() or issuer is None:
            raise UnauthenticatedError("the authorization must be 'Bearer <token>'")
        principal = issuer.verify(token.strip(), now_s=self._clock.now_ms() / 1000)
        if principal.token_id and self.revoked(principal):
            raise UnauthenticatedError(f"the bearer token {principal.token_id} was revoked; ask an admin for a new one")
        return principal

    def revoked(self, principal: Principal) -> bool:
        """Whether the principal's token was revoked (as this replica's list, at most a second old, says)."""
        return (
            bool(principal.token_id) and self.revocations is not None and self.revocations.revoked(principal.token_id)
        )

    def require(
        self, context: grpc.ServicerContext, permission: str, *, stream: str = "", group: str = ""
    ) -> Principal:
        """The caller, if it may do `permission` on the stream or group; else an error naming what lacks."""
        principal = self.principal(context)
        auth.check(principal, permission, stream=stream, group=group)
        return principal

    def change(self, context: grpc.ServicerContext, permission: str, *, stream: str = "", group: str = "") -> str:
        """Like `require`, for a topology change: also counted against the principal's rate. Returns the actor."""
        principal = self.require(context, permission, stream=stream, group=group)
        self.charge(principal)
        return actor(principal, context)

    def charge(self, principal: Principal) -> None:
        """Count one topology change against the principal's rate; LimitExceededError past it."""
        now = self._clock.monotonic()
        with self._lock:
            bucket = self._buckets.setdefault(principal.name, _Bucket(self._burst, now))
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._rate)
            bucket.at = now
            if bucket.tokens < 1:
                raise LimitExceededError(
                    f"{principal.name} made more than {self._rate:g} topology changes per second; retry shortly"
                )
            bucket.tokens -= 1

    def name_of(self, context: grpc.ServicerContext) -> str:
        """The caller's name for resource limits; 'unauthenticated' when it proves none."""
        try:
            return self.principal(context).name if self.enabled else context.peer().rsplit(":", 1)[0]
        except UnauthenticatedError:
            return "unauthenticated"


def actor(principal: Principal, context: grpc.ServicerContext) -> str:
    """Who made a change, for the event log: the principal, or the peer address when authentication is off."""
    return principal.name if principal.via != "none" else f"anonymous@{context.peer()}"
