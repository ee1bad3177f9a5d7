"""Reading the store's keys and values decoded, for `streamplane inspect` (either driver)."""

from __future__ import annotations

import json
from typing import Any

from streamplane.coordinator import keys
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.errors import InvalidArgumentError, quoted


def parse_prefix(text: str) -> tuple[str | int, ...]:
    """'gen/logs/realtime/2' -> ('gen', 'logs', 'realtime', 2): the path under the root subspace."""
    parts = [p for p in text.strip("/").split("/") if p] if text else []
    if len(parts) > 8:
        raise InvalidArgumentError(f"prefix {quoted(text)} has more than 8 elements")
    return tuple(int(p) if p.lstrip("-").isdigit() else p for p in parts)


def decode_value(key: tuple[Any, ...], raw: bytes) -> Any:
    """JSON values as objects, counters as integers, anything else as a bytes repr."""
    if key[1:2] == ("event_head",) and len(raw) == 8:
        return int.from_bytes(raw, "little", signed=True)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return repr(raw)


@transactional
def _read(tr: Transaction, begin: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
    return tr.get_range(begin, end, limit=limit, snapshot=True)


def inspect_store(db: Database, prefix: tuple[Any, ...], *, limit: int = 10_000) -> list[tuple[tuple[Any, ...], Any]]:
    """Keys under ROOT + prefix (a partial last element matches as a string prefix), decoded, in key order."""
    if limit <= 0:
        raise InvalidArgumentError(f"limit must be positive, not {limit}")
    if prefix:
        packed = keys.pack_prefix(prefix)
        begin, end = packed, packed + b"\xff"
        if isinstance(prefix[-1], str):
            # A string packs as 0x02 bytes 0x00: dropping the terminator matches every string starting with it.
            begin = packed[:-1]
            end = begin + b"\xff"
    else:
        r = keys.ROOT.range()
        begin, end = r.start, r.stop
    rows = _read(db, begin, end, limit)
    decoded = []
    for raw_key, raw_value in rows:
        key = keys.decode_key(raw_key)
        decoded.append((key, decode_value(key, raw_value)))
    return decoded
