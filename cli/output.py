"""Printing CLI results: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from streamplane.model import to_jsonable

T = TypeVar("T")


def print_json(value: Any) -> None:
    print(json.dumps(to_jsonable(value), indent=2, sort_keys=True, default=repr))


def json_shown(args: Any, value: Any) -> bool:
    """With `--output json`, print `value` as JSON and say so; otherwise the caller prints it for people. The one
    place the choice is made."""
    if args.output == "json":
        print_json(value)
        return True
    return False


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, header: bool = True) -> None:
    """Columns padded to their widest cell; an empty table prints its headers and '(none)'. Without `header`
    (a later page of a table printed page by page), the rows alone."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells if header else cells[1:]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")
    sys.stdout.flush()


def print_pages(
    args: Any, pages: Iterable[tuple[Sequence[T], bool]], headers: Sequence[str], row: Callable[[T], Sequence[Any]]
) -> int:
    """A paged list for people: each page's rows printed as the page arrives, under one header, up to
    `args.limit` (a fleet's list never sits in memory at once); with --output json, one document of them all
    at the end. `pages` gives (the page's items, whether it is the last). The number shown."""
    shown = 0
    found: list[T] = []
    for items, last in pages:
        items = items[: args.limit - shown] if args.limit else items
        if args.output == "json":
            found.extend(items)
        elif items or (not shown and last):
            print_table(headers, [row(x) for x in items], header=shown == 0)
        shown += len(items)
        if args.limit and shown >= args.limit:
            break
    json_shown(args, found)
    return shown
