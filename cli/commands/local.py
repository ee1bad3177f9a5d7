"""Processes on this machine: the coordinator, the local stack, faults on it, the demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from streamplane import errors
from streamplane.cli.output import json_shown

if TYPE_CHECKING:
    from streamplane.coordinator.groups.timing import AssignerConfig
    from streamplane.coordinator.rpc.guard import Guard

from streamplane.cli.common import STORE_HELP, Add, Subparsers, positive


def cmd_coordinator(args: argparse.Namespace) -> int:
    from streamplane.coordinator.rpc import server
    from streamplane.coordinator.store import StoreConfig

    if args.console_port is not None and not 0 <= args.console_port <= 65535:
        raise errors.InvalidArgumentError(f"--console-port must be a port number (0 to 65535), not {args.console_port}")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise errors.InvalidArgumentError(f"--metrics-port must be a port number (0 to 65535), not {args.metrics_port}")
    if not 200 <= args.console_sample_ms <= 60_000:
        raise errors.InvalidArgumentError(
            f"--console-sample-ms must be between 200 and 60000, not {args.console_sample_ms}"
        )
    from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings

    kafka_settings = KafkaSettings.load(args.kafka_settings) if args.kafka_settings else PLAINTEXT
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
        kafka_settings=kafka_settings,
        kafka_settings_file=args.kafka_settings or "",
        insecure=args.insecure,
        console=server.ConsoleSettings(args.console_port, args.console_actions, args.console_sample_ms)
        if args.console_port is not None
        else None,
    )


def _guard(args: argparse.Namespace) -> Guard | None:
    """Authentication as `streamplane coordinator` was told: a token key, certificate identities, or neither."""
    from streamplane.coordinator.rpc import auth
    from streamplane.coordinator.rpc.guard import Guard

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
    from streamplane.devstack.fault_control import DevControl

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
    if not json_shown(args, got):
        print(done)


def _assigner_config(args: argparse.Namespace) -> AssignerConfig:
    from streamplane.coordinator.groups.timing import AssignerConfig

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


def register(sub: Subparsers, add: Add) -> None:
    """The local commands' sub-parsers, beside the commands."""
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
        "--kafka-settings",
        default=None,
        metavar="FILE",
        help="JSON {reference: {librdkafka setting: value}}: the TLS and SASL settings a cluster names with "
        "--config-ref, with which the coordinator reaches it (kept out of the store); read again on SIGHUP",
    )
    p.add_argument(
        "--insecure", action="store_true", help="listen beyond loopback without TLS or authentication (not advised)"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics on this port (0: a free one, named on the start line; off when not given)",
    )
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
        type=positive,
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
    p.add_argument("--replica", type=positive, default=0, metavar="K", help="the K-th replica (default: the first)")
    p.add_argument("--leader", action="store_true", help="the replica leading the sealer and the autopilot")
    p.add_argument("--owner", default="", metavar="GROUP", help="the replica running GROUP's assignment")
    located(p)
    for name, what in (("broker", "one broker of a cluster"), ("cluster", "every broker of a cluster")):
        p = add(fault, name, cmd_fault, f"take {what} down, or bring it back")
        p.add_argument("cluster")
        if name == "broker":
            p.add_argument("broker", type=positive, help="broker id (1..brokers)")
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
    p.add_argument("--broker", type=positive, required=True)
    located(p)

    p = add(sub, "demo", cmd_demo, "start the local stack and run a short pipeline through a failover")
    p.add_argument("--records", type=positive, default=2000)
    p.add_argument("--data-dir", default=None, help="keep the coordinator's state here (default: a temporary folder)")
