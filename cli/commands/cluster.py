"""Kafka clusters, their generations and the fleet-wide switches of the autopilot."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator

from streamplane import errors, model
from streamplane.cli.common import Add, Subparsers, connect, positive
from streamplane.cli.output import json_shown, print_pages, print_table
from streamplane.client.coordinator import CoordinatorClient
from streamplane.doctor import SealedWait, sealed_waits


def cmd_cluster_register(args: argparse.Namespace) -> None:
    cluster = model.Cluster(
        name=args.name,
        bootstrap_servers=args.bootstrap,
        zone=args.zone,
        capacity_weight=args.capacity_weight,
        config_ref=args.config_ref,
        admin=model.ADMIN_KAFKA,
    )
    with connect(args) as client:
        done = client.register_cluster(cluster, update_existing=args.update)
    if not json_shown(args, done):
        print(f"registered cluster {done.cluster.name} ({done.cluster.bootstrap_servers}) at version {done.version}")


def cmd_cluster_list(args: argparse.Namespace) -> None:
    """Page after page, each printed as it arrives (for --output json, one document at the end)."""
    totals: list[int] = []

    def pages(client: CoordinatorClient) -> Iterator[tuple[list[model.Cluster], bool]]:
        for page in client.cluster_pages(prefix=args.prefix, health=args.state, page_size=args.page_size):
            totals.append(page.total)
            yield page.clusters, not page.next_page_token

    def row(c: model.Cluster) -> list[str]:
        cordoned = " (cordoned)" if c.cordoned else ""
        reasons = "; ".join(c.health_reasons) or "-"
        return [
            c.name,
            c.bootstrap_servers,
            c.zone or "-",
            f"{c.capacity_weight:g}",
            c.health + cordoned,
            c.admin,
            c.config_ref or "-",
            reasons,
        ]

    with connect(args) as client:
        headers = ["NAME", "BOOTSTRAP", "ZONE", "WEIGHT", "HEALTH", "ADMIN", "SETTINGS", "REASONS"]
        shown = print_pages(args, pages(client), headers, row)
    if args.output != "json":
        where = f" starting with {args.prefix!r}" if args.prefix else ""
        state = f" ({shown:,} {args.state})" if args.state else ""
        print(f"{shown:,} shown of {totals[0] if totals else 0:,} cluster(s){where}{state}", file=sys.stderr)


def cmd_cluster_health(args: argparse.Namespace) -> None:
    import time as _time

    with connect(args) as client:
        cluster, probes = client.cluster_health(args.name)
    if json_shown(args, {"cluster": cluster, "probes": probes}):
        return
    since = f" for {(_time.time() * 1000 - cluster.health_since_ms) / 1000:.0f} s" if cluster.health_since_ms else ""
    print(f"{cluster.name}: {cluster.health}{since}" + (" (cordoned)" if cluster.cordoned else ""))
    for reason in cluster.health_reasons:
        print(f"  - {reason}")
    print_table(
        [
            "AGO_S",
            "REACHABLE",
            "LATENCY_MS",
            "BROKERS",
            "PARTITIONS",
            "LEADERLESS",
            "UNDER_REPLICATED",
            "CANARY_MS",
            "ERROR",
        ],
        [
            [
                f"{(_time.time() * 1000 - p.at_ms) / 1000:.1f}",
                "yes" if p.reachable else "no",
                f"{p.latency_ms:.1f}",
                p.brokers,
                p.partitions,
                p.leaderless,
                p.under_replicated,
                f"{p.canary_ms:.1f}" if p.canary_ms >= 0 else "-",
                p.error or p.canary_error or "-",
            ]
            for p in reversed(probes)
        ],
    )


def cmd_cluster_cordon(args: argparse.Namespace) -> None:
    with connect(args) as client:
        cluster = client.cordon_cluster(args.name, not args.undo)
    print(f"cluster {cluster.name} is " + ("cordoned: no new generation lands on it" if cluster.cordoned else "open"))


def cmd_cluster_remove(args: argparse.Namespace) -> None:
    with connect(args) as client:
        version = client.remove_cluster(args.name)
    print(f"cluster {args.name} removed at version {version}")


def _generations_on(client: CoordinatorClient, cluster: str) -> list[tuple[str, str, model.Generation]]:
    return [
        (s.name, lane.name, g)
        for s in client.list_streams(cluster=cluster)  # pages of the streams on it only
        for lane in s.lanes
        for g in lane.generations
        if g.cluster == cluster
    ]


def cmd_cluster_drain(args: argparse.Namespace) -> int:
    """Fail every lane off a cluster at the operator's pace (`--rate` lanes a minute, evenly spaced; the fleet's
    `max_failovers_per_minute` by default), then wait until each generation there drained."""
    import time as _time

    with connect(args) as client:
        client.cluster_health(args.name)  # a name not registered (a typo) is refused before anything moves
        rate = args.rate or client.fleet_policy().max_failovers_per_minute
        gap_s = 60.0 / rate
        todo = [(s, lane) for s, lane, g in _generations_on(client, args.name) if g.state == model.ACTIVE]
        if todo:
            print(f"  moving {len(todo)} lane(s) at {rate} a minute", file=sys.stderr, flush=True)
        began = _time.monotonic()
        for moved, (stream, lane) in enumerate(todo):
            _time.sleep(max(0.0, began + moved * gap_s - _time.monotonic()))  # the pace: one lane every gap_s
            done = client.failover(stream, lane, args.to or "", 0, f"drain of cluster {args.name}")
            print(f"  [{moved + 1}/{len(todo)}] {stream}/{lane} -> {done.current.cluster}", file=sys.stderr, flush=True)
        deadline = _time.monotonic() + args.timeout
        told: set[str] = set()
        look_at = 0.0
        while True:
            gens = _generations_on(client, args.name)
            left = [f"{s}/{lane}/g{g.number}" for s, lane, g in gens if g.state != model.DRAINED]
            if left and _time.monotonic() >= look_at:  # what waits, every 5 s: a lag call per sealed lane
                _say_what_waits(client, args.name, gens, told)
                look_at = _time.monotonic() + 5.0
            total = len(gens) or 1
            width = 30
            filled = width * (total - len(left)) // total
            print(
                f"\r  drained [{'#' * filled}{'.' * (width - filled)}] {total - len(left)}/{len(gens)}",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if not left:
                print(file=sys.stderr)
                print(f"cluster {args.name} is drained: {len(todo)} lane(s) moved, {len(gens)} generation(s) drained")
                return 0
            if _time.monotonic() > deadline:
                print(file=sys.stderr)
                waiting = _sealed_waits(client, gens)
                named = []
                for key in left[:5]:
                    behind = waiting[key].groups if key in waiting else ()
                    named.append(f"{key} (waiting for group(s) {', '.join(behind)})" if behind else key)
                raise errors.UnavailableError(
                    f"cluster {args.name} is not drained after {args.timeout:.0f} s: {', '.join(named)} still hold "
                    f"records (are their groups running, and is the cluster reachable to seal? {RETIRED_HINT})"
                )
            _time.sleep(1.0)


def _sealed_waits(client: CoordinatorClient, gens: list[tuple[str, str, model.Generation]]) -> dict[str, SealedWait]:
    """{"stream/lane/gN": what it waits for} of the sealed generations that still wait (see
    `doctor.sealed_waits`); one lag call per stream with one (a stream whose lag cannot be read is left out)."""
    found = {}
    for stream in sorted({s for s, _, g in gens if g.state == model.SEALED}):
        try:
            lag = client.lag("", stream)
        except errors.StreamplaneError:  # that stream went away, or the call failed: the others still count
            continue
        for w in sealed_waits([(lane, g) for s, lane, g in gens if s == stream], lag.partitions):
            found[f"{stream}/{w.lane}/g{w.generation}"] = w
    return found


RETIRED_HINT = "a group retired for good is deleted with `streamplane group delete GROUP`"


def _say_what_waits(
    client: CoordinatorClient, cluster: str, gens: list[tuple[str, str, model.Generation]], told: set[str]
) -> None:
    """A drain never waits silently. Each sealed generation it waits for is named once with the groups still
    reading it. If every one left holds records no group has read, nothing will drain them: FailedPrecondition
    naming each, with its count and the way out."""
    unread = []
    for key, w in _sealed_waits(client, gens).items():
        stream = key.split("/", 1)[0]
        if not w.groups:
            unread.append(
                f"{key} holds {w.records} record(s) no group has read: `streamplane generation abandon "
                f"{stream} {w.lane} {w.generation}` gives them up, or start a group that reads {stream}"
            )
        elif key not in told:
            told.add(key)
            print(
                f"\n  {key}: waiting for group(s) {', '.join(w.groups)} to read it to its end ({RETIRED_HINT})",
                file=sys.stderr,
            )
    if unread and len(unread) == sum(g.state != model.DRAINED for _, _, g in gens):
        print(file=sys.stderr)
        raise errors.FailedPreconditionError(f"cluster {cluster} cannot finish draining: " + "; ".join(unread))


def cmd_generation_abandon(args: argparse.Namespace) -> None:
    with connect(args) as client:
        done = client.abandon_generation(args.stream, args.lane, args.generation, args.reason)
    if json_shown(args, done):
        return
    print(f"{args.stream}/{args.lane}/g{args.generation} abandoned; never processed:")
    for line in done.lost:
        print(f"  {line}")


def cmd_fleet(args: argparse.Namespace) -> None:
    with connect(args) as client:
        policy = client.fleet_policy()
        if args.subcommand == "freeze":
            policy = client.set_fleet_policy(dataclasses.replace(policy, frozen=True))
        elif args.subcommand == "unfreeze":
            policy = client.set_fleet_policy(dataclasses.replace(policy, frozen=False))
        else:
            changed = {
                name: value
                for name, value in (
                    ("max_failovers_per_minute", args.max_failovers_per_minute),
                    ("max_evacuations_per_hour", args.max_evacuations_per_hour),
                    ("max_unhealthy_fraction", args.max_unhealthy_fraction),
                )
                if value
            }
            if changed:
                policy = client.set_fleet_policy(dataclasses.replace(policy, **changed))
    if not json_shown(args, policy):
        state = "frozen: nothing moves by itself" if policy.frozen else "automatic failover on"
        print(
            f"fleet: {state}; at most {policy.max_evacuations_per_hour} clusters evacuated an hour, none while more "
            f"than {policy.max_unhealthy_fraction:.0%} of the fleet is unhealthy; lanes move at up to "
            f"{policy.max_failovers_per_minute} a minute"
        )


def register(sub: Subparsers, add: Add) -> None:
    """The cluster commands' sub-parsers, beside the commands."""
    cluster = sub.add_parser("cluster", help="register and list Kafka clusters").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(cluster, "register", cmd_cluster_register, "register a Kafka cluster")
    p.add_argument("name")
    p.add_argument("--bootstrap", required=True, help="bootstrap servers, host:port[,host:port...]")
    p.add_argument("--zone", default="")
    p.add_argument("--capacity-weight", type=float, default=1.0)
    p.add_argument(
        "--config-ref",
        default="",
        help="the TLS/SASL settings the coordinator reaches this cluster with (a reference of its --kafka-settings)",
    )
    p.add_argument("--update", action="store_true", help="replace an existing registration of that name")
    p = add(cluster, "list", cmd_cluster_list, "list registered clusters with their health, page by page")
    p.add_argument("--prefix", default="", help="only clusters whose name starts with this")
    p.add_argument(
        "--state", default="", choices=[h.value for h in model.ClusterHealth], help="only clusters in this health"
    )
    p.add_argument("--limit", type=positive, default=None, help="stop after this many")
    p.add_argument("--page-size", type=positive, default=500, help="clusters asked for per call (at most 1000)")
    p = add(cluster, "health", cmd_cluster_health, "a cluster's health, its reasons and the recent probes")
    p.add_argument("name")
    p = add(cluster, "cordon", cmd_cluster_cordon, "stop new generations landing on a cluster (admins)")
    p.add_argument("name")
    p.add_argument("--undo", action="store_true", help="lift the cordon")
    p = add(cluster, "drain", cmd_cluster_drain, "fail every lane off a cluster and wait until it is drained")
    p.add_argument("name")
    p.add_argument("--to", default="", metavar="CLUSTER", help="target cluster (default: the autopilot's choice)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the generations to drain")
    p.add_argument(
        "--rate",
        type=positive,
        default=0,
        metavar="N",
        help="lanes moved a minute, evenly spaced (default: the fleet's max_failovers_per_minute)",
    )
    p = add(cluster, "remove", cmd_cluster_remove, "forget a cluster (refused while it holds undrained data)")
    p.add_argument("name")

    generation = sub.add_parser("generation", help="generations of a lane").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(generation, "abandon", cmd_generation_abandon, "give up a generation whose cluster is gone for good")
    p.add_argument("stream")
    p.add_argument("lane")
    p.add_argument("generation", type=positive)
    p.add_argument("--reason", required=True, help="why its unread records are given up (recorded)")

    fleet = sub.add_parser("fleet", help="the autopilot's fleet-wide switches").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    add(fleet, "freeze", cmd_fleet, "incident mode: health is watched, nothing moves by itself (admins)")
    add(fleet, "unfreeze", cmd_fleet, "automatic failover on again (admins)")
    p = add(fleet, "policy", cmd_fleet, "show the fleet policy, or set its rate cap")
    p.add_argument("--max-failovers-per-minute", type=int, default=0, help="lanes moved a minute (default 600)")
    p.add_argument("--max-evacuations-per-hour", type=int, default=0, help="clusters evacuated an hour (default 3)")
    p.add_argument("--max-unhealthy-fraction", type=float, default=0.0, help="past it nothing moves (default 0.5)")
