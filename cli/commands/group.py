"""Consumer groups: members and leases, lag, configuration, rewinds, their log, and why a lane is late."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time as _time
from typing import Any

from streamplane import errors, model
from streamplane.cli.commands.events import print_events
from streamplane.cli.common import Add, Subparsers, connect, duration, event_log_arguments, no_progress, since_ms
from streamplane.cli.output import json_shown, print_table
from streamplane.client.coordinator import CoordinatorClient
from streamplane.predicate import parse, render


def cmd_group_describe(args: argparse.Namespace) -> None:
    with connect(args) as client:
        desc = client.describe_group(args.group)
    if desc.unknown:
        raise errors.NotFoundError(
            f"group {args.group!r} does not exist: no worker has joined it, and it has no progress or settings",
            kind="group",
            name=args.group,
        )
    if json_shown(args, desc):
        return
    now = int(_time.time() * 1000)
    print(f"group {desc.group}  (assignment loop on {desc.leader_replica or 'no leader'})")
    held: dict[str, list[Any]] = {}
    for lease in desc.leases:
        held.setdefault(lease.worker_id, []).append(lease)
    print_table(
        ["WORKER", "CAPACITY", "CPU", "RECORDS/S", "LEASES", "LAG RECORDS", "SESSION TTL LEFT"],
        [
            [
                m.worker_id,
                f"{m.capacity:g}",
                f"{m.cpu:.2f}",
                f"{m.records_per_s:,.0f}",
                len(held.get(m.worker_id, [])),
                sum(x.load.lag_records for x in held.get(m.worker_id, [])),
                f"{max(0, m.alive_until_ms - now)} ms",
            ]
            for m in desc.members
        ],
    )
    print()
    print_table(
        ["LEASE", "EPOCH", "STATE", "WORKER", "RECORDS/S", "LAG RECORDS", "LAG MS"],
        [
            [
                x.lease_id,
                x.epoch,
                x.state,
                x.worker_id or "-",
                f"{x.load.records_per_s:,.0f}",
                x.load.lag_records,
                x.load.lag_ms,
            ]
            for x in desc.leases
        ],
    )


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


def cmd_lag(args: argparse.Namespace) -> None:
    if args.watch is not None and args.watch <= 0:
        raise errors.InvalidArgumentError(f"--watch takes a positive number of seconds, not {args.watch}")
    with connect(args) as client:
        while True:
            lag = client.lag(args.group or "", args.stream, args.lane, partitions=False)
            if args.group and not lag.lanes and args.watch is None and not _lost(client, args.group, args.stream, lag):
                raise no_progress(args.group, args.stream, args.lane)  # no lag at all is not "caught up"
            if args.output == "json" and args.partitions:  # one document: the totals and every partition
                pages = client.lag_pages(args.group or "", args.stream, args.lane)
                lag = dataclasses.replace(lag, partitions=tuple(x for page in pages for x in page.partitions))
            if not json_shown(args, lag):
                if args.watch is not None:
                    print("\033[H\033[2J", end="")  # clear the screen between refreshes
                title = f"group {args.group}" if args.group else "all groups"
                print(f"{title}: offset lag {lag.offset_lag:,}, time lag {_seconds(lag.time_lag_ms)}")
                print_table(
                    ["STREAM", "LANE", "OFFSET LAG", "TIME LAG", "DLQ PENDING", "REDRIVEN", "PURGED", "FILTERED"],
                    [
                        [
                            x.stream,
                            x.lane,
                            f"{x.offset_lag:,}",
                            _seconds(x.time_lag_ms),
                            f"{x.dlq_pending:,}",
                            f"{x.dlq_redriven:,}",
                            f"{x.dlq_purged:,}",
                            f"{x.filtered:,}",
                        ]
                        for x in lag.lanes
                    ],
                )
                lost = _lost(client, args.group, args.stream, lag) if args.group else []
                if lost:
                    print()
                    print(
                        "lost: records of abandoned generations this group never processed (see `streamplane events`)"
                    )
                    print_table(["PARTITION", "NEVER PROCESSED"], lost)
                if args.partitions:  # page after page, each printed as it arrives
                    print()
                    shown = 0
                    for page in client.lag_pages(args.group or "", args.stream, args.lane):
                        if page.partitions or (not shown and not page.next_page_token):
                            print_table(
                                ["PARTITION", "LOW WATERMARK", "HIGH WATERMARK", "OFFSET LAG", "TIME LAG", "FILTERED"]
                                + ([] if args.group else ["GROUP"]),
                                [
                                    [
                                        x.lease_id,
                                        x.low_watermark,
                                        x.high_watermark,
                                        f"{x.offset_lag:,}",
                                        _seconds(x.time_lag_ms),
                                        f"{x.filtered:,}",
                                    ]
                                    + ([] if args.group else [x.group])
                                    for x in page.partitions
                                ],
                                header=shown == 0,
                            )
                        shown += len(page.partitions)
                    print(f"{shown:,} partition(s)", file=sys.stderr)
            if args.watch is None:
                return
            _time.sleep(args.watch)


def cmd_doctor(args: argparse.Namespace) -> None:
    from streamplane.cli import doctor
    from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings

    if not 0.2 <= args.interval <= 60:
        raise errors.InvalidArgumentError(f"--interval takes 0.2 to 60 seconds, not {args.interval:g}")
    if args.target_s <= 0:
        raise errors.InvalidArgumentError(f"--target-s must be positive, not {args.target_s:g}")
    kafka_settings = KafkaSettings.load(args.kafka_settings) if args.kafka_settings else PLAINTEXT
    print(f"looking at {args.stream} twice, {args.interval:g} s apart ...", file=sys.stderr, flush=True)
    with connect(args) as client:
        if args.group:  # a typo'd group would be diagnosed "on time": say so, and diagnose the stream all the same
            client.describe_stream(args.stream)  # NotFoundError for a stream that does not exist, first
            if not client.lag(args.group, args.stream, partitions=False).lanes:
                print(f"warning: {no_progress(args.group, args.stream).message}", file=sys.stderr, flush=True)
        found = doctor.run(
            client,
            args.stream,
            args.group or "",
            interval_s=args.interval,
            target_ms=int(args.target_s * 1000),
            kafka_settings=kafka_settings,
        )
    if json_shown(args, found):
        return
    print("\n\n".join(doctor.render(d, args.interval) for d in found))


def _lost(client: CoordinatorClient, group: str, stream: str, lag: model.Lag) -> list[list[str]]:
    """[partition, range] the group never processed in abandoned generations of the streams it reads."""
    streams = {stream} if stream else {x.stream for x in lag.lanes}
    rows = []
    for name in sorted(streams):
        for lane in client.describe_stream(name).lanes:
            for g in lane.generations:
                if g.state != model.ABANDONED:
                    continue
                for p in range(g.partitions):
                    lid = model.PartitionRef(name, lane.name, g.number, p).lease_id
                    low = client.progress(group, lid, max_ranges=1).low_watermark
                    end = g.end_offsets[p] if p < len(g.end_offsets) else None
                    if end is None:
                        rows.append([lid, f"[{low}, ?)"])
                    elif low < end:
                        rows.append([lid, f"[{low}, {end}) ({end - low:,} records)"])
    return rows


def cmd_group_configure(args: argparse.Namespace) -> None:
    # 0 means "leave as it is" on the wire: a 0 given here is a bad value, said as such
    if args.max_attempts == 0:
        raise errors.InvalidArgumentError("max_attempts must be between 1 and 1000, not 0")
    if args.lag_target_ms == 0:
        raise errors.InvalidArgumentError("lag_target_ms must be between 1000 and 86400000, not 0 (or --no-lag-target)")
    if args.no_lag_target and args.lag_target_ms is not None:
        raise errors.InvalidArgumentError("give --lag-target-ms or --no-lag-target, not both")
    if args.never_expire and args.expire_after is not None:
        raise errors.InvalidArgumentError("give --expire-after or --never-expire, not both")
    per_lane = args.max_attempts is not None or args.lag_target_ms is not None or args.no_lag_target
    if args.where is not None and args.no_where:
        raise errors.InvalidArgumentError("give --where or --no-where, not both")
    where = "" if args.no_where else args.where
    if where:
        where = render(parse(where))  # a bad predicate is refused here, naming the column of its error
    split = _split_argument(args.split)
    if args.max_slices == 0:
        raise errors.InvalidArgumentError(f"max_slices must be between 1 (never split) and {model.MAX_SLICES}, not 0")
    slicing = split is not None or args.max_slices is not None
    if not per_lane and args.expire_after is None and not args.never_expire and where is None and not slicing:
        raise errors.InvalidArgumentError(
            "give --max-attempts, --lag-target-ms, --no-lag-target, --expire-after, --never-expire, --where, "
            "--no-where, --max-slices or --split"
        )
    if per_lane and not args.lane:
        raise errors.InvalidArgumentError("--lane is required with --max-attempts, --lag-target-ms or --no-lag-target")
    expire_ms = -1 if args.never_expire else (args.expire_after or 0) * 1000
    with connect(args) as client:
        target = -1 if args.no_lag_target else args.lag_target_ms or 0
        client.configure_group(
            args.group,
            args.lane,
            args.max_attempts or 0,
            target,
            expire_ms,
            where=where,
            max_slices=args.max_slices or 0,
            split=split,
        )
    if args.max_attempts:
        print(f"group {args.group}: records of lane {args.lane} are rejected after {args.max_attempts} attempts")
    if target > 0:
        print(
            f"group {args.group}: past {target / 1000:g} s of time lag, lane {args.lane} gets the first claim on "
            "the group's workers"
        )
    elif target < 0:
        print(f"group {args.group}: lane {args.lane} has no time-lag target")
    if expire_ms > 0:
        print(f"group {args.group}: deleted after {args.expire_after:,} s with no live member and no commit")
    elif expire_ms < 0:
        print(f"group {args.group}: never expires (delete it with `streamplane group delete`)")
    if where:
        print(f"group {args.group}: every member filters with where {where!r}")
    elif where == "":
        print(f"group {args.group}: no record predicate; members read every record")
    if args.max_slices:
        print(f"group {args.group}: a partition is split into {args.max_slices} slices at most")
    if split is not None and split[1] > 1:
        print(
            f"group {args.group}: {split[0]} is read in {split[1]} key slices by as many workers (each fetches "
            f"the whole partition: its fetch bytes grow {split[1]}x); watch it with `group describe`"
        )
    elif split is not None:
        print(f"group {args.group}: {split[0]} is merged again; its slices hand it back whole")


def _split_argument(given: list[str] | None) -> tuple[str, int] | None:
    """--split PARTITION N as (partition id, slices): the partition as stream/lane/g<generation>/p<partition>
    (or stream/lane/<generation>/<partition>), N a whole number."""
    if given is None:
        return None
    name, count = given
    parts = name.split("/")
    if len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit():
        name = f"{parts[0]}/{parts[1]}/g{parts[2]}/p{parts[3]}"
    try:
        slices = int(count)
    except ValueError:
        raise errors.InvalidArgumentError(f"--split takes a partition and a number of slices, not {count!r}") from None
    return name, slices


def cmd_group_delete(args: argparse.Namespace) -> None:
    with connect(args) as client:
        deleted = client.delete_group(args.group, force=args.force, reason=args.reason)
    if json_shown(args, deleted):
        return
    ended = f"; ended the sessions of {', '.join(deleted.members)}" if deleted.members else ""
    print(f"deleted group {deleted.group}: its members, leases, progress, retries, rejects and settings{ended}")
    if deleted.generations:
        print(f"no longer waited for by: {', '.join(deleted.generations)}")


def _rewind_target(args: argparse.Namespace) -> model.RewindTarget:
    if args.to_time is not None:
        return model.RewindTarget(model.RewindTo.TIME, time_ms=args.to_time)
    if args.to_earliest:
        return model.RewindTarget(model.RewindTo.EARLIEST)
    try:
        given = json.loads(args.to_offsets)
    except json.JSONDecodeError as err:
        raise errors.InvalidArgumentError(f"--to-offsets is not JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(given, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in given.values()):
        raise errors.InvalidArgumentError('--to-offsets must map partitions to offsets, like {"realtime/g2/p0": 1200}')
    offsets = {}
    for name, offset in given.items():
        ref = model.PartitionRef.parse(name if name.count("/") == 3 else f"{args.stream}/{name}")
        offsets[ref] = offset
    return model.RewindTarget(model.RewindTo.OFFSETS, offsets=offsets)


def _positions(positions: tuple[model.RewindPosition, ...], count: str) -> None:
    """Where each partition of a rewind or a window starts, and how many records it processes (`count`)."""
    rows = [
        [p.partition.lane, p.partition.generation, p.generation_state, p.partition.partition, p.offset, p.again]
        for p in positions
    ]
    print_table(["LANE", "GEN", "STATE", "PARTITION", "FROM OFFSET", count], rows)


def cmd_group_rewind(args: argparse.Namespace) -> None:
    target = _rewind_target(args)
    with connect(args) as client:
        done = client.rewind_group(
            args.group, args.stream, target, lane=args.lane, dry_run=args.dry_run, force=args.force
        )
    if json_shown(args, done):
        return
    _positions(done.positions, "AGAIN")
    for line in done.lost:
        print(f"cannot be reprocessed: {line}")
    what = "rewound" if done.applied else "would rewind"
    print(
        f"{what} group {done.group} on {done.stream}: {len(done.positions)} partition(s), {done.again:,} record(s) "
        "to process again"
        + (f"; {done.leases_regranted} lease(s) granted again at a new epoch" if done.applied else "")
    )


def cmd_group_create(args: argparse.Namespace) -> None:
    with connect(args) as client:
        made = client.create_window_group(
            args.group,
            args.stream,
            from_ms=args.from_time,
            until_ms=args.until or 0,
            lane=args.lane,
            force=args.force,
            dry_run=args.dry_run,
        )
    if json_shown(args, made):
        return
    _positions(made.positions, "RECORDS")
    for line in made.lost:
        print(f"cannot be read: {line}")
    what = "made" if made.applied else "would make"
    print(
        f"{what} group {made.group}: it replays {made.stream} from {_iso(made.from_ms)} until {_iso(made.until_ms)}, "
        f"{len(made.positions)} partition(s), {made.records:,} record(s); its consumers' run() returns when done"
    )


def _iso(ms: int) -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def cmd_group_events(args: argparse.Namespace) -> None:
    with connect(args) as client:
        print_events(args, client.watch_group(args.group, args.since, follow=args.follow))


def register(sub: Subparsers, add: Add) -> None:
    """The group commands' sub-parsers, beside the commands."""
    group = sub.add_parser("group", help="consumer groups").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(group, "describe", cmd_group_describe, "show a group's workers, their load, leases, epochs and lag")
    p.add_argument("group")
    p = add(group, "events", cmd_group_events, "print a group's log: members joining, leases granted and moved")
    p.add_argument("group")
    event_log_arguments(p)
    p = add(
        group,
        "configure",
        cmd_group_configure,
        "set a lane's attempts before rejection and its time-lag target (past it, the lane gets the workers first)",
    )
    p.add_argument("group")
    p.add_argument("--lane", default="", help="the lane the attempts or time-lag target are for")
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--lag-target-ms", type=int, default=None, help="default 5000 for the top-priority lane")
    p.add_argument("--no-lag-target", action="store_true", help="the lane never gets the first claim")
    p.add_argument(
        "--expire-after",
        type=duration,
        default=None,
        metavar="DURATION",
        help="delete the group after this long with no live member and no commit (90m, 12h, 30d; default 7d)",
    )
    p.add_argument("--never-expire", action="store_true", help="keep the group until `group delete`")
    p.add_argument(
        "--where",
        default=None,
        metavar="PREDICATE",
        help="the record predicate every member filters with, as header(service) = 'api' (a worker with another "
        "is refused at join)",
    )
    p.add_argument("--no-where", action="store_true", help="remove the group's record predicate")
    p.add_argument(
        "--max-slices",
        type=int,
        default=None,
        metavar="N",
        help="the most slices a partition is split into (1 to 16; 1: never; default 4)",
    )
    p.add_argument(
        "--split",
        nargs=2,
        default=None,
        metavar=("STREAM/LANE/GEN/PARTITION", "N"),
        help="read a hot partition in N key slices, each by another worker, order per key kept (N 1: merge it)",
    )
    p = add(
        group,
        "delete",
        cmd_group_delete,
        "delete a group and everything it kept, so that the generations it read no longer wait for it",
    )
    p.add_argument("group")
    p.add_argument("--force", action="store_true", help="even with live members: their sessions end")
    p.add_argument("--reason", default="", help="why, kept with the event")

    p = add(
        group,
        "create",
        cmd_group_create,
        "make a side group that replays a window of a stream beside the live groups, and stops at its end",
    )
    p.add_argument("group")
    p.add_argument("--stream", required=True)
    p.add_argument("--from", dest="from_time", type=since_ms, required=True, metavar="TIME", help="ISO, or 3h back")
    p.add_argument("--until", type=since_ms, default=None, metavar="TIME", help="ISO, or 1h back (default: now)")
    p.add_argument("--lane", default="", help="one lane (default: every lane but dlq)")
    p.add_argument("--dry-run", action="store_true", help="show each partition's records in the window")
    p.add_argument("--force", action="store_true", help="make it although part of the window cannot be read")
    p = add(
        group,
        "rewind",
        cmd_group_rewind,
        "send a live group back to a time, the earliest records or offsets, across generations and clusters",
    )
    p.add_argument("group")
    p.add_argument("stream")
    p.add_argument("--lane", default="", help="one lane (default: every lane but dlq)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-time", type=since_ms, default=None, metavar="TIME", help="ISO time, or a duration back (3h)")
    to.add_argument("--to-earliest", action="store_true", help="the first record each partition still keeps")
    to.add_argument("--to-offsets", default=None, metavar="JSON", help='like {"realtime/g2/p0": 1200}')
    p.add_argument("--dry-run", action="store_true", help="show how many records each partition processes again")
    p.add_argument("--force", action="store_true", help="rewind what can be although some generation cannot")

    p = add(sub, "lag", cmd_lag, "offset and time lag per stream and lane, of one group or all")
    p.add_argument("group", nargs="?", default="")
    p.add_argument("--stream", default="")
    p.add_argument("--lane", default="")
    p.add_argument("--partitions", action="store_true", help="also one line per partition")
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )

    p = add(sub, "doctor", cmd_doctor, "explain why a stream is late for a group, with evidence and what to run next")
    p.add_argument("stream")
    p.add_argument("--group", default="", help="the group to examine (default: every group that read the stream)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between its two looks (default 2)")
    p.add_argument("--target-s", type=float, default=5.0, help="the time lag a lane should stay under (default 5)")
    p.add_argument(
        "--kafka-settings",
        default=None,
        metavar="FILE",
        help="the coordinator's JSON of TLS/SASL settings by reference: clusters that name one are read with it",
    )
