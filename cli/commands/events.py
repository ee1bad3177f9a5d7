"""The topology's event log, and the store read directly."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from streamplane import model
from streamplane.cli.common import STORE_HELP, Add, Subparsers, connect, event_log_arguments
from streamplane.cli.output import json_shown
from streamplane.model import to_jsonable


def print_events(args: argparse.Namespace, stream: Iterator[model.Event]) -> None:
    """Print the events `--stream`, `--actor` and `--kind` let through as they come; at the end of a log read
    without --follow, how many were shown of how many read (on stderr)."""
    import datetime as dt

    shown = read = 0
    wanted = model.EventFilter(stream=args.stream, actor=args.actor, kind=args.kind)
    for event in stream:
        read += 1
        if not wanted.matches(event):
            continue
        shown += 1
        if args.output == "json":
            print(json.dumps(to_jsonable(event), sort_keys=True), flush=True)
        else:
            when = dt.datetime.fromtimestamp(event.time_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            print(f"{event.version}  {when[:-4]}Z  {event.actor}  {model.describe_event(event)}", flush=True)
    print(f"{shown:,} event(s) shown of {read:,} read", file=sys.stderr)


def cmd_events(args: argparse.Namespace) -> None:
    with connect(args) as client:
        print_events(args, client.watch_topology(args.since, follow=args.follow))


def cmd_inspect(args: argparse.Namespace) -> None:
    from streamplane.coordinator.inspect import inspect_store, parse_prefix
    from streamplane.coordinator.store import StoreConfig, open_store

    config = StoreConfig.from_env(args.data_dir, args.store)
    prefix = parse_prefix(args.prefix)
    db = open_store(config, read_only=True)
    try:
        rows = inspect_store(db, prefix, limit=args.limit)
    finally:
        db.close()
    if json_shown(args, [{"key": list(map(repr, key)), "value": value} for key, value in rows]):
        return
    for key, value in rows:
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        print(f"{key!r} = {shown}")
    print(f"({len(rows)} key(s) under {prefix!r} in the {config.driver} store)", file=sys.stderr)


def register(sub: Subparsers, add: Add) -> None:
    """The events commands' sub-parsers, beside the commands."""
    p = add(sub, "events", cmd_events, "print the topology event log (a group's churn: group events GROUP)")
    event_log_arguments(p)

    p = add(sub, "inspect", cmd_inspect, "print the store's keys and values, decoded (reads the store directly)")
    p.add_argument(
        "prefix",
        nargs="?",
        default="",
        help="key path under the root, elements separated by '/', e.g. gen/logs/realtime",
    )
    p.add_argument("--data-dir", default=None, help="embedded store folder (env STREAMPLANE_DATA_DIR)")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--limit", type=int, default=10_000)
