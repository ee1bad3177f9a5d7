"""The event log: one versionstamped entry per change, read back in commit order.

Versions are the 12 bytes of the key's versionstamp (commit version, batch order, user version), shown as
24 hex digits so that string order is commit order. Every append bumps EVENT_HEAD, which watchers wait on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, fields
from typing import Any, TypeVar

from streamplane.coordinator import keys
from streamplane.coordinator.rpc.event_loop import setter
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.store.api import Watch, read_counter
from streamplane.coordinator.topology.records import UNDECODABLE
from streamplane.errors import InvalidArgumentError, quoted
from streamplane.model import (
    EVENT_KINDS,
    Cluster,
    Event,
    FailoverPolicy,
    FleetPolicy,
    Generation,
    GroupChanged,
    Lane,
    Stream,
    TopologyEvent,
    UnreadableEvent,
)

VERSION_HEX_DIGITS = 24


def format_version(version: bytes) -> str:
    return version.hex()


def parse_version(text: str, field: str = "from_version") -> bytes | None:
    """The 12 bytes of a version string; None for the empty string (the start of the log)."""
    if not text:
        return None
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != VERSION_HEX_DIGITS // 2:
        raise InvalidArgumentError(f"{field} {quoted(text)} is not a version: expected {VERSION_HEX_DIGITS} hex digits")
    if raw[:10] == b"\xff" * 10:  # the store's marker of a version not yet assigned: no event ever has it
        raise InvalidArgumentError(f"{field} {quoted(text)} is not a version the event log can hold")
    return raw


_HEADER = {"version", "time_ms", "actor"}
_RECORDS: dict[str, Any] = {
    "cluster": Cluster,
    "stream": Stream,
    "lane": Lane,
    "generation": Generation,
    "previous": Generation,
    "current": Generation,
    "failover": FailoverPolicy,
    "fleet": FleetPolicy,
}
"""Payload fields that hold a topology record (as a JSON object) when they are not a plain name."""


_KINDS: dict[str, type[Event]] = {**EVENT_KINDS, GroupChanged.kind: GroupChanged}
"""Every stored kind: the topology log's, and group events (in their own log; in the topology log of stores
written before that, where watchers skip them)."""


def _payload(event: Event) -> dict[str, Any]:
    if isinstance(event, GroupChanged):  # flat, and many a pass: by hand; stored as "type" since the first version
        e = event
        return {
            "group": e.group,
            "type": e.change,
            "worker_id": e.worker_id,
            "lease_id": e.lease_id,
            "epoch": e.epoch,
            "reason": e.reason,
        }
    return {k: v for k, v in asdict(event).items() if k not in _HEADER}


def _event(kind: str, data: dict[str, Any], **header: Any) -> Event:
    """The typed event of a stored payload."""
    cls = _KINDS[kind]
    if cls is GroupChanged:
        data = {**data, "change": data.get("type", "")}
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in _HEADER or f.name not in data:
            continue
        value = data[f.name]
        if isinstance(value, dict):
            value = _RECORDS[f.name].from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[f.name] = value
    return cls(**header, **kwargs)


def _body(event: Event, actor: str, time_ms: int) -> bytes:
    body = {"type": event.kind, "time_ms": time_ms, "actor": actor, "data": _payload(event)}
    return json.dumps(body, sort_keys=True).encode()


def _actor_prefix(actor: str) -> bytes:
    """How every `_body` of `actor` begins ("actor" sorts first among its keys): told apart without decoding."""
    return json.dumps({"actor": actor, "data": None}, sort_keys=True).encode().split(b' "data"')[0]


def append_event(tr: Transaction, event: TopologyEvent, *, actor: str, time_ms: int, user_version: int = 0) -> None:
    """Append one event to the topology log in `tr`; its version is the transaction's commit versionstamp.
    `time_ms` is the caller's clock, read outside the transaction body (a retried body keeps its time)."""
    tr.set_versionstamped_key(keys.event_key_incomplete(user_version), _body(event, actor, time_ms))
    tr.add(keys.EVENT_HEAD, 1)
    tr.add(keys.SEALER_WAKE, 1)


def append_group_event(
    tr: Transaction, event: GroupChanged, *, actor: str, time_ms: int, user_version: int = 0
) -> None:
    """Append one event to its group's log in `tr` (each group has its own, so churn stays with its watchers)."""
    tr.set_versionstamped_key(keys.group_event_key_incomplete(event.group, user_version), _body(event, actor, time_ms))
    tr.add(keys.group_event_head_key(event.group), 1)


def committed_version(tr: Transaction, user_version: int = 0) -> str:
    """After commit: the version of the event appended with `user_version` in `tr`."""
    return format_version(tr.get_versionstamp().wait() + user_version.to_bytes(2, "big"))


def _decode(version: bytes, value: bytes) -> Event:
    """The event stored at `version`; an UnreadableEvent when it does not decode (its readers go on past it)."""
    try:
        body = json.loads(value)
        return _event(
            body["type"],
            body.get("data", {}),
            version=format_version(version),
            time_ms=int(body["time_ms"]),
            actor=str(body.get("actor", "")),
        )
    except UNDECODABLE:
        return UnreadableEvent(version=format_version(version))


@transactional
def read_events(tr: Transaction, after: bytes | None, *, limit: int = 1000) -> list[Event]:
    """Topology events strictly after version `after` (None: from the start), oldest first, at most `limit`.
    A store written before group events had their own log has some here too: callers skip GroupChanged."""
    begin = keys.EVENTS.range().start if after is None else keys.event_key(after) + b"\x00"
    rows = tr.get_range(begin, keys.EVENTS.range().stop, limit=limit)
    return [_decode(keys.event_version(k), v) for k, v in rows]


@transactional
def read_recent_events(tr: Transaction, *, before: bytes | None = None, limit: int = 500) -> list[Event]:
    """The newest topology events strictly before version `before` (None: the newest of all), newest first, at
    most `limit`: a reader of the log's tail (the console) pays for what it shows, not for the log's length."""
    r = keys.EVENTS.range()
    end = r.stop if before is None else keys.event_key(before)
    rows = tr.get_range(r.start, end, limit=limit, reverse=True, snapshot=True)
    return [_decode(keys.event_version(k), v) for k, v in rows]


@transactional
def read_recent_group_events(
    tr: Transaction, group: str, *, before: bytes | None = None, limit: int = 500
) -> list[GroupChanged]:
    """A group's newest events strictly before version `before` (None: the newest), newest first."""
    r = keys.GROUP_EVENTS.range((group,))
    end = r.stop if before is None else keys.group_event_key(group, before)
    rows = tr.get_range(r.start, end, limit=limit, reverse=True, snapshot=True)
    out = [_decode(keys.group_event_version(k), v) for k, v in rows]
    return [e for e in out if isinstance(e, GroupChanged)]


@transactional
def head(tr: Transaction) -> int:
    """A count that every append to the topology log moves (0 for an empty log): what changed since a reader
    last looked is one small read away."""
    return read_counter(tr, keys.EVENT_HEAD)


@transactional
def head_version(tr: Transaction) -> str:
    """The version of the newest topology event ("" for an empty log)."""
    r = keys.EVENTS.range()
    last = tr.get_range(r.start, r.stop, limit=1, reverse=True, snapshot=True)
    return format_version(keys.event_version(last[0][0])) if last else ""


@transactional
def read_events_and_watch(tr: Transaction, after: bytes | None, *, limit: int = 1000) -> tuple[list[Event], Watch]:
    """Like `read_events`, plus a watch that fires on the next append: read and watch are atomic, so none is missed."""
    return read_events(tr, after, limit=limit), tr.watch(keys.EVENT_HEAD)


@transactional
def read_group_events(
    tr: Transaction, group: str, after: bytes | None, *, limit: int = 1000, snapshot: bool = False
) -> list[GroupChanged]:
    """A group's events strictly after version `after` (None: from the start), oldest first, at most `limit`.
    A snapshot read is enough for a reader that keeps its cursor: an event committed after it has a later
    version, so the next read finds it."""
    r = keys.GROUP_EVENTS.range((group,))
    begin = r.start if after is None else keys.group_event_key(group, after) + b"\x00"
    rows = tr.get_range(begin, r.stop, limit=limit, snapshot=snapshot)
    out = [_decode(keys.group_event_version(k), v) for k, v in rows]
    return [e for e in out if isinstance(e, GroupChanged)]


@transactional
def read_group_events_of_others(
    tr: Transaction, group: str, after: bytes | None, actor: str, *, limit: int, max_rows: int
) -> tuple[list[GroupChanged], bytes | None] | None:
    """A group's events after version `after` that `actor` did not append, and the version of the last row
    read (the next cursor). Rows of `actor` are told apart by the encoded body's first bytes, not decoded: a
    reader following the log skips its own writes cheaply. None when more than `limit` events of others or
    `max_rows` rows follow `after` (too much to follow). Snapshot reads, as in `read_group_events`."""
    own = _actor_prefix(actor)
    r = keys.GROUP_EVENTS.range((group,))
    begin = r.start if after is None else keys.group_event_key(group, after) + b"\x00"
    found: list[GroupChanged] = []
    cursor, rows = after, 0
    while True:
        page = tr.get_range(begin, r.stop, limit=1000, snapshot=True)
        for k, v in page:
            if not v.startswith(own):
                event = _decode(keys.group_event_version(k), v)
                if isinstance(event, GroupChanged):
                    found.append(event)
        rows += len(page)
        if len(found) > limit or rows > max_rows:
            return None
        if len(page) < 1000:
            return found, (keys.group_event_version(page[-1][0]) if page else cursor)
        cursor = keys.group_event_version(page[-1][0])
        begin = page[-1][0] + b"\x00"


@transactional
def last_group_event(tr: Transaction, group: str) -> bytes | None:
    """The version of a group's newest event (None: it has none), as a cursor for `read_group_events`."""
    r = keys.GROUP_EVENTS.range((group,))
    last = tr.get_range(r.start, r.stop, limit=1, reverse=True, snapshot=True)
    return keys.group_event_version(last[0][0]) if last else None


@transactional
def read_group_events_and_watch(
    tr: Transaction, group: str, after: bytes | None, *, limit: int = 1000
) -> tuple[list[GroupChanged], Watch]:
    """Like `read_group_events`, plus a watch on the group's next event (atomic with the read)."""
    return read_group_events(tr, group, after, limit=limit), tr.watch(keys.group_event_head_key(group))


E = TypeVar("E", bound=Event)


async def follow(
    read_and_watch: Callable[[bytes | None], tuple[list[E], Watch]],
    after: bytes | None,
    *,
    until_head: bool = False,
) -> AsyncIterator[E]:
    """Every event of a log after `after`, then each new one as it commits, for as long as the caller iterates
    (on an event loop: reads run on its executor; between them it waits on a watch, with no thread or poll).
    `until_head`: end instead once a read finds nothing after what was delivered (every event committed before
    the call, and any committed while it read), however long the reads took."""
    loop = asyncio.get_running_loop()
    cursor = after
    while True:
        batch, watch = await asyncio.to_thread(read_and_watch, cursor)
        if until_head and not batch:
            watch.cancel()
            return
        fired = asyncio.Event()
        watch.on_fire(setter(loop, fired))
        try:
            for event in batch:
                cursor = bytes.fromhex(event.version)
                yield event
            if not batch:
                await fired.wait()
        finally:
            watch.cancel()
