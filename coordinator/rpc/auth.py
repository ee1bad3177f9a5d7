"""Who may do what: principals, roles, permissions, and the signed tokens that carry them.

A principal is an authenticated caller: a bearer token's subject or a client certificate's identity, with one
role and, for producers and consumers, the streams and groups it is limited to. Roles nest: a viewer reads;
a producer or consumer also writes data of its streams or groups; an operator changes streams and groups
(failover, lanes, group configuration); an admin also changes clusters and issues tokens. No gRPC here: the
servicers' guard (`streamplane.coordinator.rpc.guard`) authenticates the call and asks `check`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from streamplane.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError, quoted
from streamplane.names import check_object_name

ADMIN, OPERATOR, PRODUCER, CONSUMER, VIEWER = "admin", "operator", "producer", "consumer", "viewer"
ROLES = (ADMIN, OPERATOR, PRODUCER, CONSUMER, VIEWER)

# permissions: <object>.<verb>
READ = "fleet.read"
"""Clusters, streams, groups, lag and the event logs."""
PRODUCE = "stream.produce"
"""Producer sessions (heartbeats, close) writing any lane of a stream."""
REJECT = "stream.reject"
"""Writing a stream's dlq lane, and only that lane: where a worker copies the records it rejects."""
DLQ_LANE = "dlq"
CONSUME = "group.consume"
"""Worker sessions, commits, retries and lease checks of a group."""
CHANGE_STREAMS = "stream.change"
"""Create streams, add lanes, fail over."""
CONFIGURE_GROUPS = "group.configure"
CHANGE_CLUSTERS = "cluster.change"
"""Register and update clusters."""
ISSUE_TOKENS = "token.create"

_GRANTS: dict[str, frozenset[str]] = {
    VIEWER: frozenset({READ}),
    PRODUCER: frozenset({READ, PRODUCE}),
    CONSUMER: frozenset({READ, CONSUME, REJECT}),
    OPERATOR: frozenset({READ, CHANGE_STREAMS, CONFIGURE_GROUPS}),
    ADMIN: frozenset({READ, PRODUCE, REJECT, CONSUME, CHANGE_STREAMS, CONFIGURE_GROUPS, CHANGE_CLUSTERS, ISSUE_TOKENS}),
}


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidArgumentError(f"role {quoted(role)} is not one of {', '.join(ROLES)}")
    return role


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. `streams` and `groups` limit a producer's or consumer's reach (empty: all)."""

    name: str
    role: str
    streams: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    via: str = "token"
    """How it was authenticated: token, certificate, or none (authentication is off)."""
    expires_ms: int = 0
    """When its credential expires (a token's exp claim, unix ms); 0 for never (certificates, no auth)."""
    token_id: str = ""
    """Its token's id (the jti claim): what `streamplane token revoke` takes back. Empty for other credentials
    and for tokens issued before ids existed."""

    def may(self, permission: str, *, stream: str = "", group: str = "") -> bool:
        if permission not in _GRANTS[self.role]:
            return False
        if stream and self.streams and stream not in self.streams:
            return False
        return not (group and self.groups and group not in self.groups)


ANONYMOUS = Principal("anonymous", ADMIN, via="none")
"""Every caller when authentication is off (a loopback `streamplane coordinator` without a key)."""


def check_write(principal: Principal, stream: str, lane: str) -> None:
    """Raise PermissionDeniedError unless `principal` may write `lane` of `stream`: a producer any lane of its
    streams, a consumer only the dlq lane (the records it rejects)."""
    if lane == DLQ_LANE and principal.may(REJECT, stream=stream):
        return
    check(principal, PRODUCE, stream=stream)


def check_any_write(principal: Principal) -> None:
    """Raise PermissionDeniedError unless `principal` may write something: open a producer session."""
    if not principal.may(REJECT):
        check(principal, PRODUCE)


def check(principal: Principal, permission: str, *, stream: str = "", group: str = "") -> None:
    """Raise PermissionDeniedError naming the missing permission unless `principal` has it on the resource."""
    if principal.may(permission, stream=stream, group=group):
        return
    resource = "/".join(x for x in (f"stream/{stream}" if stream else "", f"group/{group}" if group else "") if x)
    scope = ""
    if permission in _GRANTS[principal.role]:
        scope = (
            f" (its token covers streams {list(principal.streams) or 'all'}, groups {list(principal.groups) or 'all'})"
        )
    raise PermissionDeniedError(
        f"{principal.name} ({principal.role}) lacks {permission}" + (f" on {resource}" if resource else "") + scope,
        permission=permission,
        resource=resource,
    )


# -- tokens ---------------------------------------------------------------------------------------------------

ALGORITHM = "HS256"
KEY_BYTES = 32
MAX_TTL_S = 366 * 24 * 3600
MAX_SCOPE = 100
"""Streams or groups one token may name."""


def new_key() -> bytes:
    return secrets.token_hex(KEY_BYTES).encode()


def load_keys(path: Path, *, create: bool = False) -> tuple[bytes, ...]:
    """The keys in `path`, one per line (hex text), newest first: the first signs new tokens and every one
    verifies (so a rotation has an overlap). With `create`, a new key is written there (mode 0600) if none is."""
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_bytes(new_key())
    try:
        keys = tuple(line.strip() for line in path.read_bytes().splitlines() if line.strip())
    except OSError as err:
        raise InvalidArgumentError(f"token key file {path} cannot be read: {err.strerror}") from err
    if not keys:
        raise InvalidArgumentError(f"token key file {path} holds no key")
    for i, key in enumerate(keys, 1):
        if len(key) < KEY_BYTES:
            raise InvalidArgumentError(
                f"token key file {path}: key {i} holds {len(key)} bytes; at least {KEY_BYTES} are needed"
            )
    return keys


def rotate_keys(path: Path, *, retire: bool = False) -> tuple[int, int]:
    """Rotate the key file in place (atomically, mode 0600): a new signing key first, the current ones kept
    to verify the tokens they signed; with `retire`, keep only the newest key instead. (keys before, after)."""
    keys = load_keys(path)
    after = keys[:1] if retire else (new_key(), *keys)
    temporary = path.with_name(path.name + ".tmp")
    temporary.touch(mode=0o600)
    temporary.write_bytes(b"\n".join(after) + b"\n")
    temporary.replace(path)
    return len(keys), len(after)


@dataclass(frozen=True)
class TokenIssuer:
    """Signs bearer tokens with its first key and verifies them with any of its keys (HMAC-SHA256); the clock
    is the caller's. Every token carries an id (jti) that revocation names."""

    key: bytes = field(repr=False)
    older: tuple[bytes, ...] = field(default=(), repr=False)
    """Keys that still verify the tokens they signed during a rotation (see `rotate_keys`)."""

    @staticmethod
    def of(keys: tuple[bytes, ...]) -> TokenIssuer:
        return TokenIssuer(keys[0], keys[1:])

    def create(
        self,
        subject: str,
        role: str,
        *,
        now_s: float,
        ttl_s: float,
        streams: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
    ) -> str:
        """A token for `subject` with `role`, valid for `ttl_s` seconds from `now_s`."""
        check_role(role)
        if not subject or len(subject) > 128 or not subject.isprintable():
            raise InvalidArgumentError(f"subject {quoted(subject)} must be 1 to 128 printable characters")
        if not 0 < ttl_s <= MAX_TTL_S:
            raise InvalidArgumentError(f"ttl must be more than 0 s and at most {MAX_TTL_S} s, not {ttl_s}")
        for what, names in (("streams", streams), ("groups", groups)):
            if len(names) > MAX_SCOPE:
                raise InvalidArgumentError(f"a token names at most {MAX_SCOPE} {what}, not {len(names)}")
            for name in names:
                check_object_name(what[:-1], name)
        claims: dict[str, Any] = {
            "sub": subject,
            "role": role,
            "iat": int(now_s),
            "exp": int(now_s + ttl_s),
            "jti": secrets.token_hex(8),
        }
        if streams:
            claims["streams"] = list(streams)
        if groups:
            claims["groups"] = list(groups)
        return jwt.encode(claims, self.key, algorithm=ALGORITHM)

    def verify(self, token: str, *, now_s: float) -> Principal:
        """The principal a token stands for; UnauthenticatedError if it is malformed, forged or expired."""
        if len(token) > 8192:
            raise UnauthenticatedError(f"the bearer token is {len(token)} characters long; no token of ours is")
        claims: dict[str, Any] = {}
        for key in (self.key, *self.older):
            try:
                claims = jwt.decode(
                    token, key, algorithms=[ALGORITHM], options={"verify_exp": False, "require": ["sub", "exp"]}
                )
                break
            except jwt.InvalidSignatureError as err:
                failed: jwt.InvalidTokenError = err  # perhaps signed with another of our keys
            except jwt.InvalidTokenError as err:
                raise UnauthenticatedError(f"the bearer token is not valid: {err}") from err
        else:
            raise UnauthenticatedError(f"the bearer token is not valid: {failed}") from failed
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now_s:
            raise UnauthenticatedError(
                "the bearer token has expired; ask an admin for a new one (streamplane token create)"
            )
        role = claims.get("role")
        if role not in ROLES:
            raise UnauthenticatedError(f"the bearer token names no known role ({quoted(role)})")
        streams, groups = claims.get("streams", []), claims.get("groups", [])
        if not all(isinstance(x, list) and all(isinstance(n, str) for n in x) for x in (streams, groups)):
            raise UnauthenticatedError("the bearer token's streams and groups are not lists of names")
        return Principal(
            str(claims["sub"]),
            role,
            tuple(streams),
            tuple(groups),
            via="token",
            expires_ms=claims["exp"] * 1000,
            token_id=str(claims.get("jti", "")),
        )

    def token_id(self, token: str) -> str:
        """The id of a token this issuer signed (its jti), read without checking its expiry."""
        claims = jwt.decode(token, options={"verify_signature": False})
        return str(claims.get("jti", ""))


@dataclass(frozen=True)
class Identity:
    """What a client certificate's identity (its subject's common name) may do."""

    role: str
    streams: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


def parse_identities(data: Any) -> dict[str, Identity]:
    """{common name: Identity} from JSON {"CN": {"role": ..., "streams": [...], "groups": [...]}}."""
    if not isinstance(data, dict):
        raise InvalidArgumentError("the certificate identities must be a JSON object {common name: {role, ...}}")
    out = {}
    for name, spec in data.items():
        if not isinstance(spec, dict):
            raise InvalidArgumentError(f"identity {quoted(name)} must map to an object with a role")
        out[str(name)] = Identity(
            check_role(str(spec.get("role", ""))),
            tuple(check_object_name("stream", s) for s in spec.get("streams", [])),
            tuple(check_object_name("group", g) for g in spec.get("groups", [])),
        )
    return out
