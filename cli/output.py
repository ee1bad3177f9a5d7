"""Printing CLI results: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from enum import Enum
from typing import Any

from streamplane.errors import StreamplaneError


def to_jsonable(value: Any) -> Any:
    """Model objects (also inside lists and dicts) as plain JSON values; an event says its kind."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        kind = getattr(value, "kind", None)
        if isinstance(kind, str) and kind:
            out["kind"] = kind
        return out
    if isinstance(value, StreamplaneError):
        return {"error": type(value).__name__, "message": value.message}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    print(json.dumps(to_jsonable(value), indent=2, sort_keys=True, default=repr))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Columns padded to their widest cell; an empty table prints its headers and '(none)'."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")
    sys.stdout.flush()
