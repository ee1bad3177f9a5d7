"""What every command family shares: the coordinator client from the global options, argument types."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeAlias

from streamplane import errors
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.credentials import ClientTls

STORE_HELP = (
    "embedded (default), fdb, or postgresql://user@host:port/db (password from PGPASSWORD or PGPASSFILE; TLS with "
    "sslmode=...); env STREAMPLANE_STORE"
)
"""The --store option's help, for every command that opens a store."""

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""A parser's sub-parsers (what `add_subparsers` returns)."""
Add = Callable[[Any, str, Callable[..., Any], str], argparse.ArgumentParser]
"""`add(parent, name, command, help)`: a sub-parser whose `fn` is the command."""


def connect(args: argparse.Namespace) -> CoordinatorClient:
    """The coordinator client the global options (--coordinator, --timeout, --token, --tls-*) describe."""
    tls = ClientTls.find(args.tls_ca, args.tls_cert, args.tls_key)
    return CoordinatorClient(args.coordinator, timeout_s=args.timeout, token=args.token, tls=tls)


def no_progress(group: str, stream: str = "", lane: str = "") -> errors.NotFoundError:
    """The sentence for a group that has committed nothing where it was named (any stream; one lane): a mistyped
    group must not be shown as a group with no lag (`lag`) or nothing wrong (`doctor`)."""
    where = (f"stream {stream}" if stream else "any stream") + (f" lane {lane}" if lane else "")
    return errors.NotFoundError(
        f"group {group!r} has committed nothing on {where}: is the name right? "
        "(`streamplane group describe` shows its members)",
        kind="group",
        name=group,
    )


def positive(text: str) -> int:
    """An argument type: a positive integer."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def duration(text: str) -> int:
    """Seconds from '3600', '90s', '90m', '12h' or '30d'."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = int(float(number) * unit)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a duration like 3600, 90m, 12h or 30d, not {text!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text!r}")
    return seconds


def event_log_arguments(p: argparse.ArgumentParser) -> None:
    """The options of every command that prints an event log."""
    p.add_argument("--since", default="", metavar="VERSION", help="only events after this version")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument("--stream", default="", help="only events about this stream")
    p.add_argument("--actor", default="", help="only events whose actor contains this (any case)")
    p.add_argument("--kind", default="", help="only events of this kind (e.g. failed_over, lease_granted)")


def since_ms(text: str) -> int:
    """An argument type: unix ms from an ISO 8601 time ('2026-11-27T14:00:00Z', a date alone is midnight UTC), or
    a duration back from now ('90m', '12h', '2d')."""
    try:
        return int((time.time() - duration(text)) * 1000)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a time like 2026-11-27T14:00:00Z or a duration back from now like 90m or 12h, not {text!r}"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: end it with Z (UTC) or +HH:MM")
    return int(when.timestamp() * 1000)
