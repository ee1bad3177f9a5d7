"""The dlq lane, operable: what a group rejected, where each record came from, why, and when."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator

from streamplane import errors, model
from streamplane.cli.common import Add, Subparsers, connect, positive, since_ms
from streamplane.cli.output import json_shown, print_pages
from streamplane.client.coordinator import CoordinatorClient
from streamplane.process import tune_collector


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z" if ms else "-"


def _where(dlq: model.DlqLocation | None) -> str:
    return f"g{dlq.generation}/p{dlq.partition}@{dlq.offset}" if dlq else "-"


def cmd_dlq_list(args: argparse.Namespace) -> None:
    """Page after page, each printed as it arrives."""

    def pages(client: CoordinatorClient) -> Iterator[tuple[list[model.RejectedRecord], bool]]:
        for page in client.reject_pages(
            args.stream,
            group=args.group,
            lane=args.lane,
            since_ms=args.since or 0,
            page_size=args.page_size,
            purged=args.all,
        ):
            yield page.rejects, not page.next_page_token

    def row(r: model.RejectedRecord) -> list[object]:
        p = r.partition
        return [
            r.group,
            p.lane,
            p.generation,
            p.partition,
            r.offset,
            r.attempts or "-",
            _when(r.rejected_ms),
            _where(r.dlq),
            *([r.state] if args.all else []),
            r.reason.replace("\n", " ")[:120],
        ]

    headers = ["GROUP", "LANE", "GEN", "PARTITION", "OFFSET", "ATTEMPTS", "REJECTED", "DLQ COPY"]
    headers += ["STATE", "REASON"] if args.all else ["REASON"]
    with connect(args) as client:
        shown = print_pages(args, pages(client), headers, row)
    if args.output != "json":
        print(f"{shown:,} rejected record(s) shown", file=sys.stderr)


def cmd_dlq_purge(args: argparse.Namespace) -> None:
    """Batch after batch (a thousand a call), with its progress on stderr."""
    total = 0
    what = "would purge" if args.dry_run else "purged"
    with connect(args) as client:
        for n in client.purge_rejects(args.stream, before_ms=args.before, group=args.group, dry_run=args.dry_run):
            total += n
            print(f"dlq purge: {what} {total:,} so far", file=sys.stderr, flush=True)
    if not json_shown(args, {"purged": total, "dry_run": args.dry_run}):
        print(f"{what} {total:,} reject(s) of {args.stream} rejected before {_when(args.before)}")


def cmd_dlq_redrive(args: argparse.Namespace) -> None:
    """Batch after batch, with its progress on stderr; killed and run again, it goes on and duplicates nothing."""
    from streamplane.client.redrive import Redrive, RedriveReport

    if args.rate is not None and args.rate <= 0:
        raise errors.InvalidArgumentError(f"--rate takes a positive number of records a second, not {args.rate}")
    with connect(args) as client:
        lanes = client.lag(args.group, args.stream, partitions=False).lanes
        pending = sum(x.dlq_pending for x in lanes)
        began = time.monotonic()

        def progress(report: RedriveReport) -> None:
            if report.waiting_ms:
                print(
                    f"dlq redrive: another run holds the claim for {report.waiting_ms / 1000:.0f} s more; waiting",
                    file=sys.stderr,
                    flush=True,
                )
                return
            done = report.produced + report.found_landed
            rate = report.produced / max(time.monotonic() - began, 1e-3)
            share = f" of about {pending:,}" if pending else ""
            print(f"dlq redrive: {done:,}{share} redriven ({rate:,.0f}/s)", file=sys.stderr, flush=True)

        run = Redrive(
            client,
            args.stream,
            args.group,
            to_lane=args.to_lane,
            since_ms=args.since or 0,
            until_ms=args.until or 0,
            rate=args.rate or 0.0,
            batch_size=args.batch_size,
        )
        tune_collector()  # this process is ours: thousands of records a batch pass through it
        report = run.run(progress)
    if json_shown(args, report):
        return
    print(
        f"redrove {report.produced:,} record(s) of group {args.group} into {args.stream}/{args.to_lane}"
        + (f"; {report.found_landed:,} were there already from a run that was stopped" if report.found_landed else "")
        + (
            f"; {report.unreadable:,} could not be read (their copies are gone) and stay pending"
            if report.unreadable
            else ""
        )
    )


def register(sub: Subparsers, add: Add) -> None:
    """The dlq commands' sub-parsers, beside the commands."""
    dlq = sub.add_parser("dlq", help="the dlq lane: rejected records").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(
        dlq,
        "list",
        cmd_dlq_list,
        "list a stream's rejected records: where each came from, its attempts, the handler's error, when",
    )
    p.add_argument("stream")
    p.add_argument("--group", default="", help="one group's rejects (default: every group's)")
    p.add_argument("--lane", default="", help="rejects of one lane (default: every lane)")
    p.add_argument("--since", type=since_ms, default=None, metavar="TIME", help="rejected at or after (ISO or 90m)")
    p.add_argument("--limit", type=positive, default=None, help="stop after this many")
    p.add_argument("--page-size", type=positive, default=100, help="records asked for at a time (at most 1000)")
    p.add_argument("--all", action="store_true", help="purged rejects too, with their state")
    p = add(
        dlq,
        "purge",
        cmd_dlq_purge,
        "stop listing a stream's rejects recorded before a time (their records stay done; Kafka keeps the bytes)",
    )
    p.add_argument("stream")
    p.add_argument("--before", type=since_ms, required=True, metavar="TIME", help="rejected before (ISO or 30d)")
    p.add_argument("--group", default="", help="one group's rejects (default: every group's)")
    p.add_argument("--dry-run", action="store_true", help="count them, purge nothing")
    p = add(
        dlq,
        "redrive",
        cmd_dlq_redrive,
        "produce a group's rejected records again into a lane, each once, with where they came from",
    )
    p.add_argument("stream")
    p.add_argument("--group", required=True, help="the group whose rejects are produced again")
    p.add_argument("--since", type=since_ms, default=None, metavar="TIME", help="rejected at or after (ISO or 90m)")
    p.add_argument("--until", type=since_ms, default=None, metavar="TIME", help="rejected before (ISO or 10m)")
    p.add_argument("--to-lane", default="realtime", help="the lane to produce into (default realtime)")
    p.add_argument("--rate", type=float, default=None, help="records a second at most (default: no limit)")
    p.add_argument("--batch-size", type=positive, default=2000, help="rejects claimed at a time (at most 5000)")
