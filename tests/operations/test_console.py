"""The web console: its API behind the gRPC API's tokens and roles, previews before actions, live events, bad
input refused with a clear status; and in a real browser (headless Chromium driven by playwright-core) on a
live `streamplane dev`: a stream fails over and its timeline updates without a reload, a group's time-lag
chart moves, the event log filters. Screenshots of each page go to .cache/artifacts/console/."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.rpc.auth import TokenIssuer, new_key
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.errors import InvalidArgumentError
from tests.helpers import REPO, Proc, cli, make_certificates, start_dev, wait_until

ARTIFACTS = REPO / ".cache" / "artifacts" / "console"
BROWSER = REPO / "tests" / "browser"


class Console:
    """An in-process coordinator with authentication on and its console, and tokens for each role."""

    def __init__(self, running: server.RunningCoordinator, issuer: TokenIssuer) -> None:
        assert running.console is not None
        self.running, self.url, self.address = running, running.console.url, running.address
        now = time.time()
        self.tokens = {role: issuer.create(f"{role}-1", role, now_s=now, ttl_s=600) for role in model_roles()}

    def call(
        self, path: str, *, role: str | None = "admin", body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path.lstrip("/"), data=data, method="POST" if data else "GET")
        if role:
            request.add_header("Authorization", f"Bearer {self.tokens[role]}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                raw = reply.read()
                return reply.status, json.loads(raw) if reply.headers.get_content_type() == "application/json" else raw
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())


def model_roles() -> tuple[str, ...]:
    from streamplane.coordinator.rpc.auth import ROLES

    return ROLES


def _console(tmp_path: Path, local_cluster: Any, *, actions: bool) -> Iterator[Console]:
    bootstrap, control = local_cluster
    issuer = TokenIssuer(new_key())
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        admin=RoutingAdmin(),
        control_endpoints=[control.endpoint],
        guard=Guard(issuer),
        console=server.ConsoleSettings(port=0, actions=actions, sample_ms=200),
    )
    try:
        c = Console(running, issuer)
        admin = c.tokens["admin"]
        with CoordinatorClient(running.address, token=admin) as client:
            for name in ("east", "west"):
                client.register_cluster(
                    model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
                )
            client.create_stream("web", 2, cluster="east")
        yield c
    finally:
        running.stop(0)


@pytest.fixture
def console(tmp_path: Path, local_cluster: Any) -> Iterator[Console]:
    yield from _console(tmp_path, local_cluster, actions=True)


def test_every_page_needs_a_credential_and_a_viewer_reads_them_all(console: Console) -> None:
    status, body = console.call("api/fleet", role=None)
    assert status == 401 and "sign in" in body["message"]
    status, body = console.call("api/fleet", role=None, headers={"Authorization": "Bearer forged"})
    assert status == 401
    status, page = console.call("/", role=None)  # the page itself loads, then asks for a token
    assert status == 200 and b"/static/app.js" in page
    for path in ("api/fleet", "api/streams", "api/stream?name=web", "api/groups", "api/events", "api/whoami"):
        status, body = console.call(path, role="viewer")
        assert status == 200, (path, body)
    assert console.call("api/whoami", role="viewer")[1] == {
        "name": "viewer-1",
        "role": "viewer",
        "actions": True,
        "may_operate": False,
    }
    fleet = console.call("api/fleet", role="viewer")[1]
    assert {c["name"] for c in fleet["clusters"]} == {"east", "west"} and fleet["next_page"] == ""
    assert fleet["summary"]["clusters"] == 2 and fleet["streams"] == 1
    streams = console.call("api/streams", role="viewer")[1]
    assert [s["name"] for s in streams["streams"]] == ["web"] and streams["total"] == 1


def test_the_fleet_page_at_fleet_size_counts_by_health_and_zone_lists_what_needs_attention_and_pages(
    tmp_path: Path,
) -> None:
    """300 clusters in three zones and 250 streams: the fleet page counts them, lists only the clusters that
    are not healthy or are cordoned (with the generations they hold), and pages the rest; streams page with a
    prefix and a count."""
    from streamplane.clock import ManualClock
    from streamplane.coordinator.console.history import LagHistory
    from streamplane.coordinator.console.views import CLUSTER_PAGE, STREAM_PAGE, Views
    from streamplane.coordinator.store.embedded import EmbeddedDatabase
    from streamplane.coordinator.topology.topology import Topology
    from streamplane.testing.cluster_admin import MemoryClusterAdmin

    db = EmbeddedDatabase(None)
    try:
        topology = Topology(db, MemoryClusterAdmin(), ManualClock())
        for i in range(300):
            topology.register_cluster(model.Cluster(f"c{i:03d}", f"host-{i}:9092", zone=f"z{i % 3}"))
        for i in range(250):
            topology.create_stream(f"s{i:03d}", 1, "c007")
        topology.record_health("c007", "unhealthy", ["no broker answers"], actor="test")
        topology.record_health("c100", "degraded", ["1 broker missing"], actor="test")
        topology.cordon("c200")
        history = LagHistory(lambda: model.Lag(""), clock=ManualClock())
        views = Views(topology, None, history, ManualClock())  # type: ignore[arg-type]  # the fleet reads no group
        fleet = views.fleet()
        assert fleet["summary"]["by_health"] == {"healthy": 298, "unhealthy": 1, "degraded": 1}
        assert fleet["summary"]["by_zone"]["z1"] == {"healthy": 98, "unhealthy": 1, "degraded": 1}  # c007, c100
        assert fleet["streams"] == 250
        assert [c["name"] for c in fleet["attention"]] == ["c007", "c100", "c200"] and fleet["attention_total"] == 3
        held = fleet["attention"][0]
        assert held["generations"] == {"active": 500} and held["more"] is False, "250 streams x 2 lanes on c007"
        assert fleet["attention"][1]["generations"] == {}, "c100 holds nothing"
        assert len(fleet["clusters"]) == CLUSTER_PAGE and fleet["clusters"][0]["name"] == "c000"
        names = [c["name"] for c in fleet["clusters"]]
        after = fleet["next_page"]
        while after:
            more = views.fleet(after)
            names += [c["name"] for c in more["clusters"]]
            after = more["next_page"]
        assert names == [f"c{i:03d}" for i in range(300)]
        first = views.streams()
        assert len(first["streams"]) == STREAM_PAGE and first["total"] == 250 and first["next_page"] == "s099"
        assert views.streams(after="s099")["streams"][0]["name"] == "s100"
        some = views.streams(prefix="s24")
        assert [s["name"] for s in some["streams"]] == [f"s24{i}" for i in range(10)] and some["total"] == 10
    finally:
        db.close()


def test_a_cluster_whose_holdings_cannot_be_read_is_listed_and_the_fleet_page_still_shows(tmp_path: Path) -> None:
    """A stream record that cannot be decoded (bad data already in the store) on a cluster that needs attention:
    that row says so, every other row and count is shown (a cluster's holdings read its own streams only);
    only the first ATTENTION_HELD rows read holdings at all."""
    from streamplane.clock import ManualClock
    from streamplane.coordinator import keys
    from streamplane.coordinator.console.history import LagHistory
    from streamplane.coordinator.console.views import ATTENTION_HELD, Views
    from streamplane.coordinator.store.embedded import EmbeddedDatabase
    from streamplane.coordinator.topology.topology import Topology
    from streamplane.testing.cluster_admin import MemoryClusterAdmin

    db = EmbeddedDatabase(None)
    try:
        topology = Topology(db, MemoryClusterAdmin(), ManualClock())
        for i in range(ATTENTION_HELD + 2):
            topology.register_cluster(model.Cluster(f"c{i:02d}", f"host-{i}:9092"))
            topology.create_stream(f"s{i:02d}", 1, f"c{i:02d}")
            topology.record_health(f"c{i:02d}", "unhealthy", ["no broker answers"], actor="test")
        db.transact(lambda tr: tr.set(keys.stream_key("s01"), b"{not json"))  # c01's stream
        history = LagHistory(lambda: model.Lag(""), clock=ManualClock())
        views = Views(topology, None, history, ManualClock())  # type: ignore[arg-type]  # the fleet reads no group
        fleet = views.fleet()
        rows = {c["name"]: c for c in fleet["attention"]}
        assert fleet["attention_total"] == ATTENTION_HELD + 2 and len(rows) == ATTENTION_HELD + 2
        assert fleet["summary"]["by_health"] == {"unhealthy": ATTENTION_HELD + 2}
        assert rows["c01"]["generations"] is None and "could not be read" in rows["c01"]["error"]
        for i in (0, *range(2, ATTENTION_HELD)):
            assert rows[f"c{i:02d}"]["generations"] == {"active": 2} and "error" not in rows[f"c{i:02d}"]
        for i in (ATTENTION_HELD, ATTENTION_HELD + 1):  # not read
            assert rows[f"c{i:02d}"]["generations"] is None and "error" not in rows[f"c{i:02d}"]
    finally:
        db.close()


def test_login_sets_a_cookie_the_api_and_live_view_accept(console: Console) -> None:
    status, body = console.call("api/login", role=None, body={"token": console.tokens["viewer"]})
    assert status == 200 and body == {"name": "viewer-1", "role": "viewer"}
    request = urllib.request.Request(
        console.url + "api/login", data=json.dumps({"token": console.tokens["viewer"]}).encode()
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=5) as reply:
        cookie = reply.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, _ = console.call("api/fleet", role=None, headers={"Cookie": cookie.split(";")[0]})
    assert status == 200
    assert console.call("api/login", role=None, body={"token": "nope"})[0] == 401


def test_actions_are_previewed_then_made_by_operators_only(console: Console) -> None:
    ask = {"stream": "web", "lane": "realtime", "to": "", "reason": "disk full"}
    status, body = console.call("api/actions/failover", role="viewer", body=ask)
    assert status == 403 and "lacks stream.change" in body["message"]
    status, preview = console.call("api/actions/failover", role="operator", body=ask)
    assert status == 200, preview
    assert preview["to"]["cluster"] == "west" and preview["from"]["cluster"] == "east"
    assert "producers of web/realtime switch to g2 on west (2 partitions)" in preview["moves"]
    with CoordinatorClient(console.address, token=console.tokens["admin"]) as client:
        assert client.describe_stream("web").require_lane("realtime").active.number == 1  # a preview moves nothing
        status, done = console.call("api/actions/failover", role="operator", body={**ask, "confirm": True})
        assert status == 200 and done["current"]["cluster"] == "west", done
        lane = client.describe_stream("web").require_lane("realtime")
        assert [g.state for g in lane.generations][-1] == model.ACTIVE and lane.active.number == 2
        failed_over = [e for e in client.watch_topology("", follow=False) if isinstance(e, model.FailedOver)]
        assert failed_over[-1].actor == "operator-1" and failed_over[-1].reason == "disk full"
    status, preview = console.call("api/actions/freeze", role="operator", body={"frozen": True})
    assert status == 403 and "cluster.change" in preview["message"]  # freezing the fleet is an admin's
    status, preview = console.call("api/actions/freeze", role="admin", body={"frozen": True})
    assert status == 200 and preview["moves"][0].startswith("automatic failover stops fleet-wide")
    status, done = console.call("api/actions/freeze", role="admin", body={"frozen": True, "confirm": True})
    assert status == 200 and done["policy"]["frozen"] is True
    status, preview = console.call("api/actions/drain", role="admin", body={"cluster": "east"})
    assert status == 200 and preview["moves"][0] == "web/dlq -> west"


def test_a_read_only_console_refuses_actions(tmp_path: Path, local_cluster: Any) -> None:
    for c in _console(tmp_path, local_cluster, actions=False):
        status, body = c.call("api/actions/freeze", role="admin", body={"frozen": True, "confirm": True})
        assert status == 403 and "read-only" in body["message"]
        assert c.call("api/whoami")[1]["actions"] is False


def test_bad_input_gets_a_status_and_a_sentence(console: Console) -> None:
    assert console.call("api/stream?name=nope")[0] == 404
    status, body = console.call("api/group?name=" + "x" * 500)
    assert status == 400 and "group" in body["message"]
    assert console.call("api/events?before=zz")[0] == 400
    assert console.call("api/nope")[0] == 404
    assert console.call("static/../server.py", role=None)[0] == 404
    status, body = console.call("api/actions/failover", body=b"{not json")
    assert status == 400 and "not JSON" in body["message"]
    status, body = console.call("api/actions/failover", body={"stream": 7, "lane": "realtime"})
    assert status == 400 and "stream must be" in body["message"]
    status, body = console.call("api/actions/failover", body={"stream": "web"}, headers={"Origin": "http://evil"})
    assert status == 403 and "cross-origin" in body["message"]
    status, body = console.call("api/actions/freeze", body={"frozen": "yes"})
    assert status == 400


def test_the_live_view_streams_topology_events_and_lag_samples(console: Console) -> None:
    request = urllib.request.Request(console.url + "api/live")
    request.add_header("Authorization", f"Bearer {console.tokens['viewer']}")
    got: list[str] = []
    reply = urllib.request.urlopen(request, timeout=10)

    def read() -> None:
        for raw in reply:
            got.append(raw.decode().rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    wait_until(lambda: "event: hello" in got, timeout=5)
    with CoordinatorClient(console.address, token=console.tokens["admin"]) as client:
        client.failover("web", "realtime", "west", reason="live")
    wait_until(lambda: any("failed_over web/realtime" in line for line in got), timeout=5, what=lambda: str(got))
    wait_until(lambda: "event: lag" in got, timeout=5)
    reply.close()


def test_the_group_page_shows_workers_lag_history_retries_and_rejects(console: Console) -> None:
    token = console.tokens["admin"]
    with CoordinatorClient(console.address, token=token) as client:
        client.configure_group("web-g", "realtime", 2)
    with Producer(console.address, token=token) as producer:
        for i in range(50):
            producer.produce("web", b"bad" if i == 7 else b"ok%d" % i, key=b"k")
        assert producer.flush() == 0
    seen: list[int] = []

    def handle(msg: Message) -> None:
        if msg.value == b"bad":
            raise ValueError("not a log line")
        seen.append(msg.offset)

    stop = threading.Event()
    with Consumer(console.address, group="web-g", stream="web", token=token, retry_backoff_s=0.1) as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
        runner.start()
        wait_until(lambda: console.call("api/group?name=web-g")[1].get("rejects", {}).get("total") == 1, timeout=20)
        page = console.call("api/group?name=web-g", role="viewer")[1]
        stop.set()
        runner.join()
    assert [m["worker_id"] for m in page["members"]] == [consumer.worker_id]
    assert sum(len(x) for x in page["leases"].values()) >= 2
    (reject,) = page["rejects"]["first"]
    assert "not a log line" in reject["reason"]
    assert (reject["dlq"]["stream"], reject["dlq"]["lane"], reject["dlq"]["generation"]) == ("web", "dlq", 1)
    assert (reject["attempts"], reject["state"]) == (2, "pending")
    dlq = page["dlq"]
    assert (dlq["pending"], dlq["redriven"], dlq["purged"], dlq["streams"]) == (1, 0, 0, ["web"])
    assert dlq["by_error"] == [{"reason": reject["reason"].splitlines()[0][:120], "count": 1}]
    assert page["where"] == "", "no record predicate configured"
    with CoordinatorClient(console.address, token=token) as client:
        client.configure_group("web-g", where="key ^= 'k'")
    assert console.call("api/group?name=web-g", role="viewer")[1]["where"] == "key ^= 'k'"

    # the dlq panel's redrive: previewed for an operator; the redrive itself runs where its command is run
    ask = {"group": "web-g", "stream": "web"}
    status, body = console.call("api/actions/redrive", role="viewer", body=ask)
    assert status == 403
    status, preview = console.call("api/actions/redrive", role="operator", body=ask)
    assert status == 200 and preview["pending"] == 1
    assert preview["command"] == "streamplane dlq redrive web --group web-g"
    status, body = console.call("api/actions/redrive", role="operator", body={**ask, "confirm": True})
    assert status == 409 and "never through the coordinator" in body["message"]
    status, body = console.call("api/actions/redrive", role="operator", body={"group": "web-g", "stream": "nope"})
    assert status in (404, 409) and body["message"]
    # the lag sampler keeps the last hour per group, from the coordinator's lag sweep (one pass a second, so
    # the group's first sample may come after its first reject)
    wait_until(lambda: console.call("api/group?name=web-g", role="viewer")[1]["history"], timeout=10)
    assert {e["kind"] for e in page["events"]} >= {"member_joined", "lease_granted"}


def test_the_stream_page_names_the_groups_a_sealed_generation_waits_for(console: Console) -> None:
    token = console.tokens["admin"]
    with Producer(console.address, token=token) as producer:
        for i in range(40):
            producer.produce("web", b"r%d" % i, key=b"k%d" % i)
        assert producer.flush() == 0
    with CoordinatorClient(console.address, token=token) as client:
        ends = client.describe_stream("web").require_lane("realtime").active
        assert ends.partitions == 2
        part = model.LeaseCommit("web/realtime/g1/p0", 0, model.Commit(acked=[(0, 3)], high_watermark=3))
        client.commit("retired-app", part)  # read 3 records of g1, then never again
        client.failover("web", "realtime", "west", reason="move")

        def g1() -> dict[str, Any]:
            lane = next(x for x in console.call("api/stream?name=web")[1]["lanes"] if x["name"] == "realtime")
            return next(g for g in lane["generations"] if g["number"] == 1)

        wait_until(lambda: g1()["state"] == "sealed", timeout=20)
    assert g1()["waiting_for"] == ["retired-app"]


# -- in a real browser -----------------------------------------------------------------------------------------


def _browser_ready() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the console's browser test needs Node.js (this machine kind has it)")
    if not (BROWSER / "node_modules" / "playwright-core").is_dir():
        pytest.fail("tests/browser/node_modules is missing: scripts/bootstrap.sh installs playwright-core with npm")
    if not (Path("/usr/lib/chromium/chromium").exists() or Path("/usr/bin/chromium").exists()):
        pytest.fail("Chromium is missing: scripts/bootstrap.sh installs Debian's chromium")
    return node


@pytest.mark.e2e
def test_console_in_a_browser_on_a_live_dev_stack(tmp_path: Path) -> None:
    node = _browser_ready()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    proc, address, _ = start_dev(tmp_path / "dev")
    browser: Proc | None = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        url = next(line.split("=", 1)[1] for line in proc.seen if line.startswith("console="))
        token = Path(next(line.split("=", 1)[1] for line in proc.seen if line.startswith("token_file="))).read_text()
        created = cli("stream", "create", "weblogs", "--partitions", "2", "--cluster", "local-a", coordinator=address)
        assert created.returncode == 0, created.stderr

        def produce() -> None:
            with Producer(address) as producer:
                while not stop.is_set():
                    for i in range(50):
                        producer.produce("weblogs", b"line %d" % i)
                    time.sleep(0.02)  # paces the producer

        def consume() -> None:
            def slow(msg: Message) -> None:
                time.sleep(0.002)  # slower than the producer: time lag grows, the chart moves

            with Consumer(address, group="web-readers", stream="weblogs", concurrency=1) as consumer:
                consumer.run(slow, stop=stop)

        threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
        for t in threads:
            t.start()
        with CoordinatorClient(address) as client:
            wait_until(lambda: client.lag("web-readers").lanes, timeout=20)

        browser = Proc(
            [node, str(BROWSER / "console.mjs"), url, token.strip(), str(ARTIFACTS), "weblogs", "web-readers"]
        )
        fleet = browser.wait_for(r"^step fleet clusters=(\d+)", timeout=60)
        assert fleet.group(1) == "2"
        browser.wait_for(r"^wait failover", timeout=30)
        done = cli("failover", "weblogs", "--to", "local-b", "--reason", "browser test", coordinator=address)
        assert done.returncode == 0, done.stderr
        browser.send("go")
        timeline = browser.wait_for(r"^step timeline reloaded=(\w+) g1=(\w+)", timeout=30)
        assert timeline.group(1) == "false", "the timeline must update in place, without a reload"
        assert timeline.group(2) in ("draining", "sealed", "drained")
        chart = browser.wait_for(r"^step chart first=(\d+) now=(\d+) max_ms=([\d.]+)", timeout=60)
        assert int(chart.group(2)) >= int(chart.group(1)) + 3 and float(chart.group(3)) > 0
        events = browser.wait_for(r"^step events all=(\d+) failed_over=(\d+)", timeout=30)
        assert int(events.group(2)) >= 1 and int(events.group(2)) < int(events.group(1))
        confirm = browser.wait_for(r"^step confirm moves=(.*) policy=(.*)$", timeout=30)
        assert "automatic failover stops fleet-wide" in confirm.group(1)
        assert "automatic failover on" in confirm.group(2), "cancelled: nothing changed"
        browser.wait_for(r"^done", timeout=30)
        assert not [line for line in browser.seen if line.startswith("pageerror")], browser.seen
        for shot in ("login", "fleet", "stream-before", "stream-after", "group", "events", "confirm"):
            assert (ARTIFACTS / f"{shot}.png").stat().st_size > 5_000, shot
        print(f"console screenshots in {ARTIFACTS}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
        if browser is not None and browser.popen.poll() is None:
            browser.popen.kill()
        proc.popen.terminate()
        try:
            proc.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.popen.kill()


def test_with_tls_the_console_serves_https_with_the_coordinators_certificate(tmp_path: Path) -> None:
    import ssl

    certs = make_certificates(tmp_path / "certs")
    issuer = TokenIssuer(new_key())
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        guard=Guard(issuer),
        tls=server.ServerTls(certs["server.crt"], certs["server.key"]),
        console=server.ConsoleSettings(port=0),
    )
    try:
        assert running.console is not None and running.console.url.startswith("https://")
        token = issuer.create("viewer-1", "viewer", now_s=time.time(), ttl_s=60)
        request = urllib.request.Request(running.console.url + "api/whoami")
        request.add_header("Authorization", f"Bearer {token}")
        context = ssl.create_default_context(cafile=str(certs["ca"]))
        with urllib.request.urlopen(request, timeout=5, context=context) as reply:
            assert json.loads(reply.read())["name"] == "viewer-1"
        plain = running.console.url.replace("https://", "http://") + "api/whoami"
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(plain, timeout=5).read()
    finally:
        running.stop(0)


def test_the_groups_page_pages_with_a_prefix_and_a_count_and_reads_lag_from_the_sampler() -> None:
    """250 groups: the groups page shows a page at a time with the count, filters by prefix, and shows each
    group's lag as the sampler last saw it, never reading the commit log per request (a group not sampled
    yet says so)."""
    from streamplane.clock import ManualClock
    from streamplane.coordinator import keys
    from streamplane.coordinator.console.history import LagHistory
    from streamplane.coordinator.console.views import GROUP_PAGE, Views
    from streamplane.coordinator.store.embedded import EmbeddedDatabase
    from streamplane.coordinator.topology.topology import Topology
    from streamplane.testing.cluster_admin import MemoryClusterAdmin

    db = EmbeddedDatabase(None)
    try:
        topology = Topology(db, MemoryClusterAdmin(), ManualClock())
        names = [f"g{i:03d}" for i in range(250)]
        for name in names:
            db.transact(lambda tr, name=name: tr.set(keys.group_key(name), json.dumps({"name": name}).encode()))
        lanes = (model.LaneLag("g007", "web", "realtime", 40, 2_500), model.LaneLag("g007", "web", "dlq", 2, 100))
        history = LagHistory(lambda: model.Lag("", lanes=lanes), clock=ManualClock())
        history.sample()
        views = Views(topology, None, history, ManualClock())  # type: ignore[arg-type]  # reads no assigner
        first = views.groups()
        assert first["total"] == 250 and len(first["groups"]) == GROUP_PAGE and first["next_page"] == "g099"
        shown = {g["name"]: g for g in first["groups"]}
        assert (shown["g007"]["offset_lag"], shown["g007"]["time_lag_ms"]) == (42, 2_500)
        assert shown["g008"]["offset_lag"] is None, "not sampled yet"
        paged = [g["name"] for g in first["groups"]]
        after = first["next_page"]
        while after:
            more = views.groups(after=after)
            assert more["total"] == 0, "counted on the first page only"
            paged += [g["name"] for g in more["groups"]]
            after = more["next_page"]
        assert paged == names
        some = views.groups(prefix="g24")
        assert [g["name"] for g in some["groups"]] == [f"g24{i}" for i in range(10)] and some["total"] == 10
        with pytest.raises(InvalidArgumentError):
            views.groups(prefix="g2", after="h000")
    finally:
        db.close()


def test_the_stream_page_marks_the_rewinds_of_its_groups(console: Console) -> None:
    token = console.tokens["admin"]
    with CoordinatorClient(console.address, token=token) as client:
        client.commit("web-r", model.LeaseCommit("web/realtime/g1/p0", 0, model.Commit(acked=[(0, 3)])))
        client.rewind_group("web-r", "web", model.RewindTarget(model.RewindTo.EARLIEST), force=True)
    status, page = console.call("api/stream?name=web", role="viewer")
    assert status == 200
    (rewound,) = page["rewinds"]
    assert rewound["group"] == "web-r" and rewound["actor"] and "2 partition(s), 3 record(s) again" in rewound["reason"]
