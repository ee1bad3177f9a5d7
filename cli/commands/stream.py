"""Streams: create, list, describe, add lanes, set failover policies, fail a lane over."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from streamplane import model
from streamplane.cli.common import Add, Subparsers, connect, positive
from streamplane.cli.output import json_shown, print_pages, print_table
from streamplane.client.coordinator import CoordinatorClient


def _print_stream(stream: model.Stream) -> None:
    print(f"stream {stream.name}")
    print(f"topic settings: {stream.topic.describe()}")
    rows = []
    for lane in stream.lanes:
        for gen in lane.generations:
            rows.append(
                [
                    lane.name,
                    lane.priority,
                    f"g{gen.number}",
                    gen.state,
                    gen.cluster,
                    gen.topic,
                    gen.partitions,
                ]
            )
    print_table(["LANE", "PRIORITY", "GENERATION", "STATE", "CLUSTER", "TOPIC", "PARTITIONS"], rows)


def cmd_stream_create(args: argparse.Namespace) -> None:
    with connect(args) as client:
        topic = model.TopicSettings(
            replication_factor=args.replication_factor,
            min_insync_replicas=args.min_insync_replicas,
            retention_ms=args.retention_ms,
            segment_ms=args.segment_ms,
            segment_bytes=args.segment_bytes,
        )
        done = client.create_stream(args.name, args.partitions, args.cluster, topic=topic)
    if not json_shown(args, done):
        print(f"created at version {done.version}")
        _print_stream(done.stream)


def cmd_stream_list(args: argparse.Namespace) -> None:
    """Page after page, each printed as it arrives (a fleet's streams never sit in memory at once, except for
    --output json, which prints one document)."""
    totals: list[int] = []
    unreadable: list[str] = []

    def pages(client: CoordinatorClient) -> Iterator[tuple[list[model.Stream], bool]]:
        for page in client.stream_pages(prefix=args.prefix, cluster=args.cluster, page_size=args.page_size):
            totals.append(page.total)
            unreadable.extend(page.unreadable)
            yield page.streams, not page.next_page_token

    def row(s: model.Stream) -> list[Any]:
        return [s.name, len(s.lanes), " ".join(f"{x.name}:g{x.active.number}@{x.active.cluster}" for x in s.lanes)]

    with connect(args) as client:
        shown = print_pages(args, pages(client), ["STREAM", "LANES", "ACTIVE GENERATIONS"], row)
    if args.output != "json":
        where = f" starting with {args.prefix!r}" if args.prefix else ""
        on = f" ({shown:,} on cluster {args.cluster})" if args.cluster else ""
        print(f"{shown:,} shown of {totals[0] if totals else 0:,} stream(s){where}{on}", file=sys.stderr)
    if unreadable:
        print(
            f"left out: {len(unreadable):,} stream(s) whose stored records do not decode "
            f"({', '.join(unreadable[:10])}); `streamplane stream describe NAME` says why",
            file=sys.stderr,
        )


def cmd_stream_describe(args: argparse.Namespace) -> None:
    with connect(args) as client:
        stream = client.describe_stream(args.name)
    if not json_shown(args, stream):
        _print_stream(stream)


def cmd_stream_add_lane(args: argparse.Namespace) -> None:
    with connect(args) as client:
        done = client.add_lane(args.stream, args.lane, args.priority, args.partitions, args.cluster)
    if not json_shown(args, done):
        print(f"added lane {args.lane} at version {done.version}")
        _print_stream(done.stream)


def cmd_stream_policy(args: argparse.Namespace) -> None:
    with connect(args) as client:
        current = client.describe_stream(args.name).failover
        policy = model.FailoverPolicy(
            mode=args.mode or current.mode,
            unhealthy_after_ms=args.unhealthy_after_ms or current.unhealthy_after_ms,
            min_interval_ms=args.min_interval_ms if args.min_interval_ms is not None else current.min_interval_ms,
        )
        stream = client.set_stream_policy(args.name, policy) if policy != current else client.describe_stream(args.name)
    if not json_shown(args, stream.failover):
        p = stream.failover
        print(
            f"{args.name}: failover {p.mode}, after {p.unhealthy_after_ms / 1000:g} s unhealthy, "
            f"at most once per {p.min_interval_ms / 1000:g} s per lane"
        )


def cmd_stream_delete(args: argparse.Namespace) -> None:
    print(f"deleting stream {args.name} and its topics on every cluster ...", file=sys.stderr, flush=True)
    with connect(args) as client:
        done = client.delete_stream(args.name, force=args.force, reason=args.reason)
    if json_shown(args, done):
        return
    cut = done.deleted.producers + tuple(f"group {g}" for g in done.deleted.groups)
    print(f"deleted stream {args.name}" + (f"; cut off: {', '.join(cut)}" if cut else ""))
    print(f"  topics deleted: {len(done.topics_deleted)} of {len(done.deleted.topics)}")
    for line in done.topics_left:
        print(f"  left: {line}")
    if done.topics_left:
        print("  (a stream created again by this name never writes or reads those: its generations number past them)")


def cmd_failover(args: argparse.Namespace) -> None:
    with connect(args) as client:
        done = client.failover(args.stream, args.lane, args.to or "", args.partitions, args.reason)
    if not json_shown(args, done):
        p, c = done.previous, done.current
        print(
            f"failed over {args.stream}/{args.lane} at version {done.version}: "
            f"g{p.number} on {p.cluster} is {p.state}, "
            f"g{c.number} on {c.cluster} ({c.topic}, {c.partitions} partitions) is {c.state}"
        )


def register(sub: Subparsers, add: Add) -> None:
    """The stream commands' sub-parsers, beside the commands."""
    stream = sub.add_parser("stream", help="create, list and describe streams").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(stream, "create", cmd_stream_create, "create a stream with its realtime and dlq lanes")
    p.add_argument("name")
    p.add_argument("--partitions", type=positive, required=True)
    p.add_argument("--cluster", default="", help="cluster of the first generations (default: the largest healthy)")
    for flag, what in (
        ("--replication-factor", "replicas of each partition"),
        ("--min-insync-replicas", "replicas a write with acks=all needs"),
        ("--retention-ms", "how long records are kept (-1: forever)"),
        ("--segment-ms", "how often a log segment is rolled"),
        ("--segment-bytes", "log segment size (at least 1 MiB)"),
    ):
        p.add_argument(
            flag, type=int, default=0, help=f"{what} on every topic of the stream (0: the cluster's default)"
        )
    p = add(stream, "list", cmd_stream_list, "list streams, page by page (with a count)")
    p.add_argument("--prefix", default="", help="only streams whose name starts with this")
    p.add_argument("--cluster", default="", help="only streams with a generation on this cluster")
    p.add_argument("--limit", type=positive, default=None, help="stop after this many")
    p.add_argument("--page-size", type=positive, default=500, help="streams asked for per call (at most 1000)")
    p = add(stream, "describe", cmd_stream_describe, "show a stream's lanes and generations")
    p.add_argument("name")
    p = add(stream, "policy", cmd_stream_policy, "show or set when the autopilot fails the stream's lanes over")
    p.add_argument("name")
    p.add_argument("--mode", choices=["auto", "manual"], default="")
    p.add_argument("--unhealthy-after-ms", type=int, default=0, help="how long a cluster must be unhealthy")
    p.add_argument("--min-interval-ms", type=int, default=None, help="a lane moves at most once in this long")
    p = add(stream, "delete", cmd_stream_delete, "delete a stream, every group's progress on it, and its topics")
    p.add_argument("name")
    p.add_argument("--force", action="store_true", help="even while producers or groups use it")
    p.add_argument("--reason", default="", help="why, kept with the event")
    p = add(stream, "add-lane", cmd_stream_add_lane, "add a lane to a stream")
    p.add_argument("stream")
    p.add_argument("lane")
    p.add_argument("--priority", type=int, required=True, help="0..1000, higher is served first")
    p.add_argument("--partitions", type=int, default=0)
    p.add_argument("--cluster", default="")

    p = add(sub, "failover", cmd_failover, "move a lane to another cluster: open g+1 there, drain g")
    p.add_argument("stream")
    p.add_argument("--lane", default="realtime")
    p.add_argument("--to", default="", metavar="CLUSTER", help="target cluster (default: the autopilot's choice)")
    p.add_argument("--partitions", type=int, default=0, help="partition count of the new generation (default: same)")
    p.add_argument("--reason", default="")
