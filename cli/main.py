"""`streamplane`: manage clusters, streams and failovers, read the event log, inspect the store, run the local stack.

Exit codes: 0 success, 1 internal error, 2 bad input, 3 not found, 4 already exists, 5 refused by the
current state (failed precondition, fenced), 6 unavailable (coordinator, store or Kafka unreachable), 7 not
allowed (no, a bad or an expired credential; or a role without the permission).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from streamplane import errors
from streamplane.cli.commands import FAMILIES
from streamplane.client.coordinator import DEFAULT_COORDINATOR

EXIT_CODES: list[tuple[type[errors.StreamplaneError], int]] = [
    (errors.InvalidArgumentError, 2),
    (errors.NotFoundError, 3),
    (errors.AlreadyExistsError, 4),
    (errors.FailedPreconditionError, 5),
    (errors.UnavailableError, 6),
    (errors.UnauthenticatedError, 7),
    (errors.PermissionDeniedError, 7),
]


def exit_code_for(err: errors.StreamplaneError) -> int:
    """The CLI's exit code for an error: its own (a child process's, passed on) or its kind's."""
    own = getattr(err, "exit_code", None)
    if isinstance(own, int) and 0 < own < 256:
        return own
    return next((code for kind, code in EXIT_CODES if isinstance(err, kind)), 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamplane",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--coordinator",
        default=os.environ.get("STREAMPLANE_COORDINATOR", DEFAULT_COORDINATOR),
        help="coordinator address host:port (env STREAMPLANE_COORDINATOR; default %(default)s)",
    )
    parser.add_argument("--output", "-o", choices=["table", "json"], default="table")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per coordinator call")
    parser.add_argument(
        "--token",
        default=None,
        help="bearer token (env STREAMPLANE_TOKEN; default: the one `streamplane dev` wrote for this address)",
    )
    parser.add_argument(
        "--tls-ca", default=None, help="CA of the coordinator's certificate: use TLS (env STREAMPLANE_TLS_CA)"
    )
    parser.add_argument("--tls-cert", default=None, help="client certificate for mutual TLS (env STREAMPLANE_TLS_CERT)")
    parser.add_argument("--tls-key", default=None, help="key of the client certificate (env STREAMPLANE_TLS_KEY)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        parent: argparse._SubParsersAction[argparse.ArgumentParser], name: str, fn: Callable[..., Any], help_: str
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_)
        p.set_defaults(fn=fn)
        return p

    for family in FAMILIES:
        family.register(sub, add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from streamplane.log import configure_logging

    configure_logging()
    args = build_parser().parse_args(argv)
    try:
        result = args.fn(args)
    except errors.StreamplaneError as err:
        print(f"streamplane: {err.message}", file=sys.stderr)
        return exit_code_for(err)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
