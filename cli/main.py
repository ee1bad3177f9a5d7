"""`streamplane`: manage clusters, streams and failovers, read the event log, inspect the store, run the local stack.

Exit codes: 0 success, 1 internal error, 2 bad input, 3 not found, 4 already exists, 5 refused by the
current state (failed precondition, fenced), 6 unavailable (coordinator, store or Kafka unreachable), 7 not
allowed (no, a bad or an expired credential; or a role without the permission).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamplane import errors, model
from streamplane.cli.output import print_json, print_table
from streamplane.client.coordinator import DEFAULT_COORDINATOR, CoordinatorClient
from streamplane.client.credentials import ClientTls
from streamplane.model import to_jsonable

if TYPE_CHECKING:
    from streamplane.coordinator.assigner import AssignerConfig
    from streamplane.coordinator.guard import Guard

EXIT_CODES: list[tuple[type[errors.StreamplaneError], int]] = [
    (errors.InvalidArgumentError, 2),
    (errors.NotFoundError, 3),
    (errors.AlreadyExistsError, 4),
    (errors.FailedPreconditionError, 5),
    (errors.UnavailableError, 6),
    (errors.UnauthenticatedError, 7),
    (errors.PermissionDeniedError, 7),
]


STORE_HELP = (
    "embedded (default), fdb, or postgresql://user@host:port/db (password from PGPASSWORD or PGPASSFILE; TLS with "
    "sslmode=...); env STREAMPLANE_STORE"
)


def exit_code_for(err: errors.StreamplaneError) -> int:
    """The CLI's exit code for an error: its own (a child process's, passed on) or its kind's."""
    own = getattr(err, "exit_code", None)
    if isinstance(own, int) and 0 < own < 256:
        return own
    return next((code for kind, code in EXIT_CODES if isinstance(err, kind)), 1)


# -- commands that talk to the coordinator ---------------------------------------------------------------------


def _client(args: argparse.Namespace) -> CoordinatorClient:
    tls = ClientTls.find(args.tls_ca, args.tls_cert, args.tls_key)
    return CoordinatorClient(args.coordinator, timeout_s=args.timeout, token=args.token, tls=tls)


def cmd_token_create(args: argparse.Namespace) -> None:
    subject = args.subject or f"{args.role}-{secrets.token_hex(4)}"
    with _client(args) as client:
        token, expires = client.create_token(
            subject, args.role, streams=tuple(args.stream), groups=tuple(args.group), ttl_s=args.ttl
        )
    if args.output == "json":
        from streamplane.client.credentials import token_claims

        print_json({"token": token, "expires_unix_s": expires, "token_id": token_claims(token).get("jti", "")})
    else:
        print(token)


def cmd_whoami(args: argparse.Namespace) -> None:
    with _client(args) as client:
        me = client.whoami()
    if args.output == "json":
        print_json(me)
    else:
        scope = f" streams={','.join(me['streams']) or '*'} groups={','.join(me['groups']) or '*'}"
        print(
            f"{me['name']} role={me['role']} via={me['via']}"
            + (scope if me["role"] in ("producer", "consumer") else "")
            + (f" token={me['token_id']} expires_unix_s={me['expires_unix_s']}" if me["token_id"] else "")
        )


def cmd_token_revoke(args: argparse.Namespace) -> None:
    with _client(args) as client:
        done = client.revoke_token(args.token_id, args.reason)
    print(
        f"token {args.token_id} "
        + ("revoked: every replica refuses it within a second" if done else "was revoked already")
    )


def cmd_token_rotate_key(args: argparse.Namespace) -> None:
    from streamplane.coordinator import auth

    before, _ = auth.rotate_keys(Path(args.token_key_file), retire=args.retire)
    if args.retire:
        print(f"{args.token_key_file}: kept the newest key of {before}; tokens signed with the others are refused")
    else:
        print(
            f"{args.token_key_file}: a new signing key, and {before} older key(s) still verifying; coordinators "
            "using this file read it within a second. Issue new tokens, then run this again with --retire"
        )


def cmd_cluster_register(args: argparse.Namespace) -> None:
    cluster = model.Cluster(
        name=args.name,
        bootstrap_servers=args.bootstrap,
        zone=args.zone,
        capacity_weight=args.capacity_weight,
        config_ref=args.config_ref,
        admin=model.ADMIN_KAFKA,
    )
    with _client(args) as client:
        done = client.register_cluster(cluster, update_existing=args.update)
    if args.output == "json":
        print_json(done)
    else:
        print(f"registered cluster {done.cluster.name} ({done.cluster.bootstrap_servers}) at version {done.version}")


def cmd_cluster_list(args: argparse.Namespace) -> None:
    with _client(args) as client:
        clusters = client.list_clusters()
    if args.output == "json":
        print_json(clusters)
        return
    print_table(
        ["NAME", "BOOTSTRAP", "ZONE", "WEIGHT", "HEALTH", "ADMIN", "REASONS"],
        [
            [
                c.name,
                c.bootstrap_servers,
                c.zone or "-",
                f"{c.capacity_weight:g}",
                c.health + (" (cordoned)" if c.cordoned else ""),
                c.admin,
                "; ".join(c.health_reasons) or "-",
            ]
            for c in clusters
        ],
    )


def cmd_cluster_health(args: argparse.Namespace) -> None:
    import time as _time

    with _client(args) as client:
        cluster, probes = client.cluster_health(args.name)
    if args.output == "json":
        print_json({"cluster": cluster, "probes": probes})
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
    with _client(args) as client:
        cluster = client.cordon_cluster(args.name, not args.undo)
    print(f"cluster {cluster.name} is " + ("cordoned: no new generation lands on it" if cluster.cordoned else "open"))


def cmd_cluster_remove(args: argparse.Namespace) -> None:
    with _client(args) as client:
        version = client.remove_cluster(args.name)
    print(f"cluster {args.name} removed at version {version}")


def _generations_on(client: CoordinatorClient, cluster: str) -> list[tuple[str, str, model.Generation]]:
    return [
        (s.name, lane.name, g)
        for s in client.list_streams()
        for lane in s.lanes
        for g in lane.generations
        if g.cluster == cluster
    ]


def cmd_cluster_drain(args: argparse.Namespace) -> int:
    """Fail every lane off a cluster (at the fleet's rate cap), then wait until each generation there drained."""
    import time as _time

    with _client(args) as client:
        rate = client.fleet_policy().max_failovers_per_minute
        todo = [(s, lane) for s, lane, g in _generations_on(client, args.name) if g.state == model.ACTIVE]
        for moved, (stream, lane) in enumerate(todo):
            if moved and moved % rate == 0:
                print(f"  {moved} failovers: a minute's pause (the fleet's rate cap, {rate} a minute)", file=sys.stderr)
                _time.sleep(60)
            done = client.failover(stream, lane, args.to or "", 0, f"drain of cluster {args.name}")
            print(f"  [{moved + 1}/{len(todo)}] {stream}/{lane} -> {done.current.cluster}", file=sys.stderr, flush=True)
        deadline = _time.monotonic() + args.timeout
        while True:
            gens = _generations_on(client, args.name)
            left = [f"{s}/{lane}/g{g.number}" for s, lane, g in gens if g.state != model.DRAINED]
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
                raise errors.UnavailableError(
                    f"cluster {args.name} is not drained after {args.timeout:.0f} s: {', '.join(left[:5])} still "
                    "hold records (are their groups running, and is the cluster reachable to seal?)"
                )
            _time.sleep(1.0)


def cmd_generation_abandon(args: argparse.Namespace) -> None:
    with _client(args) as client:
        done = client.abandon_generation(args.stream, args.lane, args.generation, args.reason)
    if args.output == "json":
        print_json(done)
        return
    print(f"{args.stream}/{args.lane}/g{args.generation} abandoned; never processed:")
    for line in done.lost:
        print(f"  {line}")


def cmd_stream_policy(args: argparse.Namespace) -> None:
    with _client(args) as client:
        current = client.describe_stream(args.name).failover
        policy = model.FailoverPolicy(
            mode=args.mode or current.mode,
            unhealthy_after_ms=args.unhealthy_after_ms or current.unhealthy_after_ms,
            min_interval_ms=args.min_interval_ms if args.min_interval_ms is not None else current.min_interval_ms,
        )
        stream = client.set_stream_policy(args.name, policy) if policy != current else client.describe_stream(args.name)
    if args.output == "json":
        print_json(stream.failover)
    else:
        p = stream.failover
        print(
            f"{args.name}: failover {p.mode}, after {p.unhealthy_after_ms / 1000:g} s unhealthy, "
            f"at most once per {p.min_interval_ms / 1000:g} s per lane"
        )


def cmd_fleet(args: argparse.Namespace) -> None:
    with _client(args) as client:
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
    if args.output == "json":
        print_json(policy)
    else:
        state = "frozen: nothing moves by itself" if policy.frozen else "automatic failover on"
        print(
            f"fleet: {state}; at most {policy.max_evacuations_per_hour} clusters evacuated an hour, none while more "
            f"than {policy.max_unhealthy_fraction:.0%} of the fleet is unhealthy; lanes move at up to "
            f"{policy.max_failovers_per_minute} a minute"
        )


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
    with _client(args) as client:
        topic = model.TopicSettings(
            replication_factor=args.replication_factor,
            min_insync_replicas=args.min_insync_replicas,
            retention_ms=args.retention_ms,
            segment_ms=args.segment_ms,
            segment_bytes=args.segment_bytes,
        )
        done = client.create_stream(args.name, args.partitions, args.cluster, topic=topic)
    if args.output == "json":
        print_json(done)
    else:
        print(f"created at version {done.version}")
        _print_stream(done.stream)


def cmd_stream_list(args: argparse.Namespace) -> None:
    with _client(args) as client:
        streams = client.list_streams()
    if args.output == "json":
        print_json(streams)
        return
    rows = []
    for s in streams:
        active = [f"{lane.name}:g{lane.active.number}@{lane.active.cluster}" for lane in s.lanes]
        rows.append([s.name, len(s.lanes), " ".join(active)])
    print_table(["STREAM", "LANES", "ACTIVE GENERATIONS"], rows)


def cmd_stream_describe(args: argparse.Namespace) -> None:
    with _client(args) as client:
        stream = client.describe_stream(args.name)
    if args.output == "json":
        print_json(stream)
    else:
        _print_stream(stream)


def cmd_stream_add_lane(args: argparse.Namespace) -> None:
    with _client(args) as client:
        done = client.add_lane(args.stream, args.lane, args.priority, args.partitions, args.cluster)
    if args.output == "json":
        print_json(done)
    else:
        print(f"added lane {args.lane} at version {done.version}")
        _print_stream(done.stream)


def cmd_failover(args: argparse.Namespace) -> None:
    with _client(args) as client:
        done = client.failover(args.stream, args.lane, args.to or "", args.partitions, args.reason)
    if args.output == "json":
        print_json(done)
    else:
        p, c = done.previous, done.current
        print(
            f"failed over {args.stream}/{args.lane} at version {done.version}: "
            f"g{p.number} on {p.cluster} is {p.state}, "
            f"g{c.number} on {c.cluster} ({c.topic}, {c.partitions} partitions) is {c.state}"
        )


def cmd_group_describe(args: argparse.Namespace) -> None:
    import time as _time

    with _client(args) as client:
        desc = client.describe_group(args.group)
    if args.output == "json":
        print_json(desc)
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
    import time as _time

    if args.watch is not None and args.watch <= 0:
        raise errors.InvalidArgumentError(f"--watch takes a positive number of seconds, not {args.watch}")
    with _client(args) as client:
        while True:
            lag = client.lag(args.group or "", args.stream, args.lane)
            if args.output == "json":
                print_json(lag)
            else:
                if args.watch is not None:
                    print("\033[H\033[2J", end="")  # clear the screen between refreshes
                title = f"group {args.group}" if args.group else "all groups"
                print(f"{title}: offset lag {lag.offset_lag:,}, time lag {_seconds(lag.time_lag_ms)}")
                print_table(
                    ["STREAM", "LANE", "OFFSET LAG", "TIME LAG"],
                    [[x.stream, x.lane, f"{x.offset_lag:,}", _seconds(x.time_lag_ms)] for x in lag.lanes],
                )
                lost = _lost(client, args.group, args.stream, lag) if args.group else []
                if lost:
                    print()
                    print(
                        "lost: records of abandoned generations this group never processed (see `streamplane events`)"
                    )
                    print_table(["PARTITION", "NEVER PROCESSED"], lost)
                if args.partitions:
                    print()
                    print_table(
                        ["PARTITION", "LOW WATERMARK", "HIGH WATERMARK", "OFFSET LAG", "TIME LAG"],
                        [
                            [
                                x.lease_id,
                                x.low_watermark,
                                x.high_watermark,
                                f"{x.offset_lag:,}",
                                _seconds(x.time_lag_ms),
                            ]
                            for x in lag.partitions
                        ],
                    )
            if args.watch is None:
                return
            _time.sleep(args.watch)


def cmd_doctor(args: argparse.Namespace) -> None:
    from streamplane.cli import doctor

    if not 0.2 <= args.interval <= 60:
        raise errors.InvalidArgumentError(f"--interval takes 0.2 to 60 seconds, not {args.interval:g}")
    if args.target_s <= 0:
        raise errors.InvalidArgumentError(f"--target-s must be positive, not {args.target_s:g}")
    print(f"looking at {args.stream} twice, {args.interval:g} s apart ...", file=sys.stderr, flush=True)
    with _client(args) as client:
        found = doctor.run(
            client, args.stream, args.group or "", interval_s=args.interval, target_ms=int(args.target_s * 1000)
        )
    if args.output == "json":
        print_json(found)
        return
    print("\n\n".join(doctor.render(d, args.interval) for d in found))


def _lost(client: CoordinatorClient, group: str, stream: str, lag: model.Lag) -> list[list[str]]:
    """[partition, range] the group never processed in abandoned generations of the streams it reads."""
    streams = {stream} if stream else {model.PartitionRef.parse(x.lease_id).stream for x in lag.partitions}
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
    if args.max_attempts is None and args.lag_target_ms is None and not args.no_lag_target:
        raise errors.InvalidArgumentError("give --max-attempts, --lag-target-ms or --no-lag-target")
    with _client(args) as client:
        target = -1 if args.no_lag_target else args.lag_target_ms or 0
        client.configure_group(args.group, args.lane, args.max_attempts or 0, target)
    if args.max_attempts:
        print(f"group {args.group}: records of lane {args.lane} are rejected after {args.max_attempts} attempts")
    if target > 0:
        print(
            f"group {args.group}: past {target / 1000:g} s of time lag, lane {args.lane} gets the first claim on "
            "the group's workers"
        )
    elif target < 0:
        print(f"group {args.group}: lane {args.lane} has no time-lag target")


def _print_events(args: argparse.Namespace, stream: Iterator[model.Event]) -> None:
    import datetime as dt

    for event in stream:
        if args.output == "json":
            print(json.dumps(to_jsonable(event), sort_keys=True), flush=True)
        else:
            when = dt.datetime.fromtimestamp(event.time_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            print(f"{event.version}  {when[:-4]}Z  {event.actor}  {model.describe_event(event)}", flush=True)


def cmd_events(args: argparse.Namespace) -> None:
    with _client(args) as client:
        idle = None if args.follow else args.idle_timeout
        _print_events(args, client.watch_topology(args.since, idle_timeout_s=idle))


def cmd_group_events(args: argparse.Namespace) -> None:
    with _client(args) as client:
        idle = None if args.follow else args.idle_timeout
        _print_events(args, client.watch_group(args.group, args.since, idle_timeout_s=idle))


# -- commands that run or read things locally -------------------------------------------------------------------


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
    if args.output == "json":
        print_json([{"key": list(map(repr, key)), "value": value} for key, value in rows])
        return
    for key, value in rows:
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        print(f"{key!r} = {shown}")
    print(f"({len(rows)} key(s) under {prefix!r} in the {config.driver} store)", file=sys.stderr)


def cmd_coordinator(args: argparse.Namespace) -> int:
    from streamplane.coordinator import server
    from streamplane.coordinator.store import StoreConfig

    if args.console_port is not None and not 0 <= args.console_port <= 65535:
        raise errors.InvalidArgumentError(f"--console-port must be a port number (0 to 65535), not {args.console_port}")
    if not 200 <= args.console_sample_ms <= 60_000:
        raise errors.InvalidArgumentError(
            f"--console-sample-ms must be between 200 and 60000, not {args.console_sample_ms}"
        )
    return server.serve_forever(
        StoreConfig.from_env(args.data_dir, args.store),
        parent_pid=args.parent_pid,
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        assigner_config=_assigner_config(args),
        guard=_guard(args),
        tls=server.ServerTls(
            Path(args.server_cert), Path(args.server_key), Path(args.tls_client_ca) if args.tls_client_ca else None
        )
        if args.server_cert
        else None,
        control_endpoints=args.allow_control_endpoint,
        insecure=args.insecure,
        console=server.ConsoleSettings(args.console_port, args.console_actions, args.console_sample_ms)
        if args.console_port is not None
        else None,
    )


def _guard(args: argparse.Namespace) -> Guard | None:
    """Authentication as `streamplane coordinator` was told: a token key, certificate identities, or neither."""
    from streamplane.coordinator import auth
    from streamplane.coordinator.guard import Guard

    if bool(args.server_cert) != bool(args.server_key):
        raise errors.InvalidArgumentError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.server_cert:
        raise errors.InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key")
    key_file = Path(args.token_key_file) if args.token_key_file else None
    issuer = auth.TokenIssuer.of(auth.load_keys(key_file)) if key_file else None
    identities = {}
    if args.identities:
        try:
            identities = auth.parse_identities(json.loads(Path(args.identities).read_text()))
        except (OSError, ValueError) as err:
            raise errors.InvalidArgumentError(f"--identities {args.identities} cannot be read as JSON: {err}") from err
    if identities and not args.tls_client_ca:
        raise errors.InvalidArgumentError("--identities names client certificates: it needs --tls-client-ca")
    return Guard(issuer, identities, key_file=key_file) if issuer or identities else None


def cmd_dev(args: argparse.Namespace) -> int:
    from streamplane.devstack.stack import run_dev

    _assigner_config(args)  # checks --session-ttl-ms here; the coordinator child gets it as it is
    if args.console_port > 65535:
        raise errors.InvalidArgumentError(f"--console-port must be a port number (0 to 65535), not {args.console_port}")
    return run_dev(
        clusters=args.clusters,
        data_dir=Path(args.data_dir),
        port=args.port,
        host=args.host,
        session_ttl_ms=args.session_ttl_ms,
        engine=args.engine,
        kafka_security=args.kafka_security,
        brokers=args.brokers,
        console_port=None if args.console_port < 0 else args.console_port,
        store=args.store,
        replicas=args.replicas,
    )


def cmd_fault(args: argparse.Namespace) -> None:
    from streamplane.devstack.devcontrol import DevControl

    control = DevControl(args.dev) if args.dev else DevControl.find(Path(args.data_dir))
    if args.target == "coordinator":
        actions = [name for name in ("kill", "pause", "resume") if getattr(args, name)]
        if len(actions) != 1:
            raise errors.InvalidArgumentError("say one of --kill, --pause or --resume")
        body = {"replica": args.replica, "leader": args.leader, "owner": args.owner}
        if actions == ["kill"]:
            print("killing a coordinator replica (SIGKILL); waiting for its restart ...", file=sys.stderr, flush=True)
        got = control.call(f"/coordinator/{actions[0]}", body)
        which = f"coordinator replica {got['replica']} ({got['address']})"
        if actions == ["kill"]:
            done = f"{which}: pid {got['killed_pid']} killed; pid {got['pid']} serves after {got['away_s']:.1f} s"
        else:
            done = f"{which}: pid {got['pid']} {got['state']}"
    elif args.target == "store":
        print("restarting the store's PostgreSQL server ...", file=sys.stderr, flush=True)
        got = control.call("/store/restart")
        done = f"PostgreSQL restarted after {got['away_s']:.1f} s: every connection was lost"
    elif args.target == "leader":
        body = {"cluster": args.cluster, "topic": args.topic, "partition": args.partition, "broker": args.broker}
        got = control.call("/leader", body)
        done = f"{args.topic}[{args.partition}] on {args.cluster}: leader is broker {args.broker}"
    else:
        if args.down == args.up:
            raise errors.InvalidArgumentError("say --down or --up")
        if args.pause and not args.down:
            raise errors.InvalidArgumentError("--pause goes with --down")
        body = {"cluster": args.cluster, "broker": getattr(args, "broker", 0), "pause": args.pause}
        if args.up:
            print(f"bringing {args.cluster} back (a real broker takes seconds) ...", file=sys.stderr, flush=True)
        got = control.call("/brokers/down" if args.down else "/brokers/up", body)
        brokers = ", ".join(map(str, got["brokers"]))
        done = f"cluster {args.cluster}: broker(s) {brokers} {got['state']}"
    if args.output == "json":
        print_json(got)
    else:
        print(done)


def _assigner_config(args: argparse.Namespace) -> AssignerConfig:
    from streamplane.coordinator.assigner import AssignerConfig

    if not 100 <= args.session_ttl_ms <= 60_000:
        raise errors.InvalidArgumentError(f"--session-ttl-ms must be between 100 and 60000, not {args.session_ttl_ms}")
    ttl = args.session_ttl_ms
    join_window_ms = getattr(args, "join_window_ms", AssignerConfig.join_window_ms)  # `dev` keeps the default
    if not 0 <= join_window_ms <= 60_000:
        raise errors.InvalidArgumentError(f"--join-window-ms must be between 0 and 60000, not {join_window_ms}")
    return AssignerConfig.with_ttl(ttl, join_window_ms=join_window_ms)


def cmd_demo(args: argparse.Namespace) -> int:
    from streamplane.devstack.demo import run_demo
    from streamplane.log import configure_logging

    configure_logging(os.environ.get("STREAMPLANE_LOG_LEVEL", "warning"))  # the demo narrates itself

    return run_demo(records=args.records, data_dir=Path(args.data_dir) if args.data_dir else None)


# -- parser ---------------------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def _duration(text: str) -> int:
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


def _event_log_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="", metavar="VERSION", help="only events after this version")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument("--idle-timeout", type=float, default=1.0, help=argparse.SUPPRESS)


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

    cluster = sub.add_parser("cluster", help="register and list Kafka clusters").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(cluster, "register", cmd_cluster_register, "register a Kafka cluster")
    p.add_argument("name")
    p.add_argument("--bootstrap", required=True, help="bootstrap servers, host:port[,host:port...]")
    p.add_argument("--zone", default="")
    p.add_argument("--capacity-weight", type=float, default=1.0)
    p.add_argument("--config-ref", default="", help="name of the client TLS/SASL settings for this cluster")
    p.add_argument("--update", action="store_true", help="replace an existing registration of that name")
    add(cluster, "list", cmd_cluster_list, "list registered clusters with their health")
    p = add(cluster, "health", cmd_cluster_health, "a cluster's health, its reasons and the recent probes")
    p.add_argument("name")
    p = add(cluster, "cordon", cmd_cluster_cordon, "stop new generations landing on a cluster (admins)")
    p.add_argument("name")
    p.add_argument("--undo", action="store_true", help="lift the cordon")
    p = add(cluster, "drain", cmd_cluster_drain, "fail every lane off a cluster and wait until it is drained")
    p.add_argument("name")
    p.add_argument("--to", default="", metavar="CLUSTER", help="target cluster (default: the autopilot's choice)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the generations to drain")
    p = add(cluster, "remove", cmd_cluster_remove, "forget a cluster (refused while it holds undrained data)")
    p.add_argument("name")

    stream = sub.add_parser("stream", help="create, list and describe streams").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(stream, "create", cmd_stream_create, "create a stream with its realtime and dlq lanes")
    p.add_argument("name")
    p.add_argument("--partitions", type=_positive, required=True)
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
    add(stream, "list", cmd_stream_list, "list streams")
    p = add(stream, "describe", cmd_stream_describe, "show a stream's lanes and generations")
    p.add_argument("name")
    p = add(stream, "policy", cmd_stream_policy, "show or set when the autopilot fails the stream's lanes over")
    p.add_argument("name")
    p.add_argument("--mode", choices=["auto", "manual"], default="")
    p.add_argument("--unhealthy-after-ms", type=int, default=0, help="how long a cluster must be unhealthy")
    p.add_argument("--min-interval-ms", type=int, default=None, help="a lane moves at most once in this long")
    p = add(stream, "add-lane", cmd_stream_add_lane, "add a lane to a stream")
    p.add_argument("stream")
    p.add_argument("lane")
    p.add_argument("--priority", type=int, required=True, help="0..1000, higher is served first")
    p.add_argument("--partitions", type=int, default=0)
    p.add_argument("--cluster", default="")

    group = sub.add_parser("group", help="consumer groups").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(group, "describe", cmd_group_describe, "show a group's workers, their load, leases, epochs and lag")
    p.add_argument("group")
    p = add(group, "events", cmd_group_events, "print a group's log: members joining, leases granted and moved")
    p.add_argument("group")
    _event_log_arguments(p)
    p = add(
        group,
        "configure",
        cmd_group_configure,
        "set a lane's attempts before rejection and its time-lag target (past it, the lane gets the workers first)",
    )
    p.add_argument("group")
    p.add_argument("--lane", required=True)
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--lag-target-ms", type=int, default=None, help="default 5000 for the top-priority lane")
    p.add_argument("--no-lag-target", action="store_true", help="the lane never gets the first claim")

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

    generation = sub.add_parser("generation", help="generations of a lane").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(generation, "abandon", cmd_generation_abandon, "give up a generation whose cluster is gone for good")
    p.add_argument("stream")
    p.add_argument("lane")
    p.add_argument("generation", type=_positive)
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

    p = add(sub, "whoami", cmd_whoami, "who the coordinator takes you for: name, role, scope")

    token = sub.add_parser("token", help="bearer tokens").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(token, "create", cmd_token_create, "print a new signed token (admins only)")
    p.add_argument("--subject", default="", help="who the token stands for (default: the role and a random suffix)")
    p.add_argument("--role", required=True, choices=["admin", "operator", "producer", "consumer", "viewer"])
    p.add_argument("--stream", action="append", default=[], help="limit a producer or consumer to this stream")
    p.add_argument("--group", action="append", default=[], help="limit a consumer to this group")
    p.add_argument("--ttl", type=_duration, default=24 * 3600, help="validity, e.g. 3600, 90m, 12h, 30d (default 1d)")
    p = add(token, "revoke", cmd_token_revoke, "take a token back: every replica refuses it within a second")
    p.add_argument("token_id", help="the token's id (streamplane whoami, or token create -o json, shows it)")
    p.add_argument("--reason", default="")
    p = add(
        token,
        "rotate-key",
        cmd_token_rotate_key,
        "rotate the token key file: a new signing key, the old ones still verifying (--retire drops them)",
    )
    p.add_argument("--token-key-file", required=True, help="the coordinators' --token-key-file")
    p.add_argument("--retire", action="store_true", help="keep only the newest key (after reissuing tokens)")

    p = add(sub, "failover", cmd_failover, "move a lane to another cluster: open g+1 there, drain g")
    p.add_argument("stream")
    p.add_argument("--lane", default="realtime")
    p.add_argument("--to", default="", metavar="CLUSTER", help="target cluster (default: the autopilot's choice)")
    p.add_argument("--partitions", type=int, default=0, help="partition count of the new generation (default: same)")
    p.add_argument("--reason", default="")

    p = add(sub, "doctor", cmd_doctor, "explain why a stream is late for a group, with evidence and what to run next")
    p.add_argument("stream")
    p.add_argument("--group", default="", help="the group to examine (default: every group that read the stream)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between its two looks (default 2)")
    p.add_argument("--target-s", type=float, default=5.0, help="the time lag a lane should stay under (default 5)")

    p = add(sub, "events", cmd_events, "print the topology event log (a group's churn: group events GROUP)")
    _event_log_arguments(p)

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

    p = add(sub, "coordinator", cmd_coordinator, "run the coordinator in the foreground")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7400)
    p.add_argument("--token-key-file", default=None, help="secret key (hex) that signs tokens: authentication on")
    p.add_argument("--tls-cert", dest="server_cert", default=None, help="server certificate chain (PEM): serve TLS")
    p.add_argument("--tls-key", dest="server_key", default=None, help="server private key (PEM)")
    p.add_argument("--tls-client-ca", default=None, help="require client certificates signed by this CA (mTLS)")
    p.add_argument(
        "--identities", default=None, help="JSON {certificate common name: {role, streams, groups}} for mTLS clients"
    )
    p.add_argument(
        "--allow-control-endpoint",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a local cluster's control channel that registrations may name (repeatable)",
    )
    p.add_argument(
        "--insecure", action="store_true", help="listen beyond loopback without TLS or authentication (not advised)"
    )
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (0: off)")
    p.add_argument(
        "--console-port",
        type=int,
        default=None,
        help="serve the web console on this port (0: a free one; off when not given); same TLS and tokens as gRPC",
    )
    p.add_argument(
        "--console-actions", action="store_true", help="allow operator actions (failover, drain, freeze) in the console"
    )
    p.add_argument("--console-sample-ms", type=int, default=5000, help="how often the console samples lag")
    p.add_argument(
        "--session-ttl-ms",
        type=int,
        default=6000,  # AssignerConfig.ttl_ms (not imported: the CLI starts without the coordinator)
        help="a silent worker loses its leases after this (its heartbeats go out every third of it)",
    )
    p.add_argument(
        "--join-window-ms",
        type=int,
        default=300,
        help="a new group is first assigned once no worker joined for this long (at most 10 s): a fleet starting "
        "together is assigned once instead of moving leases as each joins (0: at once)",
    )
    p.add_argument("--data-dir", default=None, help="embedded store folder (env STREAMPLANE_DATA_DIR)")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--parent-pid", type=int, default=0, help=argparse.SUPPRESS)  # `streamplane dev`'s child

    p = add(sub, "dev", cmd_dev, "run the local stack (coordinator + local Kafka clusters) in the foreground")
    p.add_argument("--clusters", type=int, default=2)
    p.add_argument(
        "--engine",
        choices=["mock", "kafka"],
        default="mock",
        help="librdkafka's in-memory mock cluster (starts in a second), or a real Apache Kafka broker per cluster "
        "(fetched from Maven Central once; about 5 s to start, its log kept under the data dir)",
    )
    p.add_argument(
        "--kafka-security",
        choices=["plaintext", "sasl_ssl"],
        default="plaintext",
        help="with --engine kafka, sasl_ssl adds a SCRAM/PLAIN listener over TLS with a generated certificate and "
        "users (printed as kafka.NAME.sasl_ssl=...)",
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=0,
        help="brokers per cluster (default 3 on the mock engine, 1 on real Kafka; with more than one, real topics "
        "are replicated to every broker)",
    )
    p.add_argument("--session-ttl-ms", type=int, default=3000, help="a silent worker loses its leases after this")
    p.add_argument(
        "--console-port", type=int, default=0, help="the web console's port (default: a free one; -1: no console)"
    )
    p.add_argument(
        "--store",
        choices=["embedded", "postgres"],
        default="embedded",
        help="the coordinator's store: SQLite in the data dir, or a throwaway PostgreSQL server there (Debian's "
        "binaries; run as user postgres when we are root)",
    )
    p.add_argument(
        "--replicas",
        type=_positive,
        default=1,
        help="coordinator processes, each on its own port from --port on (more than one needs --store postgres)",
    )
    p.add_argument("--data-dir", default=str(Path.home() / ".streamplane" / "dev"))
    p.add_argument("--port", type=int, default=7400)
    p.add_argument("--host", default="127.0.0.1")

    fault = sub.add_parser(
        "fault", help="break and mend parts of a running `streamplane dev` stack on purpose (either engine)"
    ).add_subparsers(dest="target", required=True, metavar="TARGET")

    def located(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", default=str(Path.home() / ".streamplane" / "dev"), help="the dev stack's")
        p.add_argument("--dev", default="", metavar="HOST:PORT", help="its control endpoint (default: from data dir)")

    p = add(
        fault,
        "coordinator",
        cmd_fault,
        "kill a coordinator replica with SIGKILL (it restarts, clusters stay up), or pause and resume it",
    )
    p.add_argument("--kill", action="store_true", help="SIGKILL; the stack restarts it on its port")
    p.add_argument("--pause", action="store_true", help="SIGSTOP: a zombie that wakes at --resume")
    p.add_argument("--resume", action="store_true", help="SIGCONT a paused replica")
    p.add_argument("--replica", type=_positive, default=0, metavar="K", help="the K-th replica (default: the first)")
    p.add_argument("--leader", action="store_true", help="the replica leading the sealer and the autopilot")
    p.add_argument("--owner", default="", metavar="GROUP", help="the replica running GROUP's assignment")
    located(p)
    for name, what in (("broker", "one broker of a cluster"), ("cluster", "every broker of a cluster")):
        p = add(fault, name, cmd_fault, f"take {what} down, or bring it back")
        p.add_argument("cluster")
        if name == "broker":
            p.add_argument("broker", type=_positive, help="broker id (1..brokers)")
        p.add_argument("--down", action="store_true")
        p.add_argument("--up", action="store_true")
        p.add_argument("--pause", action="store_true", help="with --down on real brokers: SIGSTOP, not SIGKILL")
        located(p)
    p = add(fault, "store", cmd_fault, "restart the stack's PostgreSQL server (dev --store postgres)")
    p.add_argument("--restart", action="store_true", required=True)
    located(p)
    p = add(fault, "leader", cmd_fault, "move a partition's leader to another broker (mock engine)")
    p.add_argument("cluster")
    p.add_argument("topic")
    p.add_argument("partition", type=int)
    p.add_argument("--broker", type=_positive, required=True)
    located(p)

    p = add(sub, "demo", cmd_demo, "start the local stack and run a short pipeline through a failover")
    p.add_argument("--records", type=_positive, default=2000)
    p.add_argument("--data-dir", default=None, help="keep the coordinator's state here (default: a temporary folder)")
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
