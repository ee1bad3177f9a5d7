"""The console's HTTP adapter: static pages, a JSON API over `views`, server-sent events for live updates.

Authentication and roles are the gRPC API's: a bearer token in `Authorization`, or the same token in an
HttpOnly, SameSite=Strict cookie set by POST /api/login (an EventSource cannot send headers). Every API call
needs `fleet.read` (on the stream or group it shows); actions need the permission of the matching CLI command
and are refused unless the console was started with actions on. Live updates follow the event logs' watches
(topology, and the shown group's), and the lag sampler; nothing is polled per table.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog

from streamplane import errors
from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.console.history import LagHistory
from streamplane.coordinator.console.views import Views, event_row, require_text
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import EventFilter, Lag, Probe, to_jsonable
from streamplane.names import check_object_name

log = structlog.get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "sp_token"
MAX_LIVE = 64
"""Live (server-sent events) connections at once; more get 503."""
MAX_BODY = 64 * 1024
KEEPALIVE_S = 15.0
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
HTTP_STATUS: list[tuple[type[errors.StreamplaneError], HTTPStatus]] = [
    (errors.InvalidArgumentError, HTTPStatus.BAD_REQUEST),
    (errors.NotFoundError, HTTPStatus.NOT_FOUND),
    (errors.AlreadyExistsError, HTTPStatus.CONFLICT),
    (errors.FailedPreconditionError, HTTPStatus.CONFLICT),
    (errors.UnauthenticatedError, HTTPStatus.UNAUTHORIZED),
    (errors.PermissionDeniedError, HTTPStatus.FORBIDDEN),
    (errors.LimitExceededError, HTTPStatus.TOO_MANY_REQUESTS),
    (errors.UnavailableError, HTTPStatus.SERVICE_UNAVAILABLE),
]


def http_status(err: errors.StreamplaneError) -> HTTPStatus:
    return next((code for kind, code in HTTP_STATUS if isinstance(err, kind)), HTTPStatus.INTERNAL_SERVER_ERROR)


class Console:
    """The console of one coordinator replica: its HTTP server, views and lag sampler."""

    def __init__(
        self,
        topology: Topology,
        assigner: Assigner,
        guard: Guard,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        actions: bool = False,
        sample_ms: int = 5000,
        clock: Clock = SYSTEM,
        probes: Any = None,
        lag: Callable[[], Lag] | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """`lag`: every group's lag, as the coordinator's lag sweep last read it (by default read whole, for
        a console on its own)."""
        self.guard = guard
        self.actions = actions
        self.history = LagHistory(
            lag or (lambda: commitlog.lag_of_every_group(topology.db, now_ms=clock.now_ms())),
            sample_ms=sample_ms,
            clock=clock,
        )
        self.views = Views(topology, assigner, self.history, clock, probes or (lambda name: list[Probe]()))
        self.topology = topology
        self.stopping = threading.Event()
        self._live = threading.BoundedSemaphore(MAX_LIVE)
        self.secure = tls is not None
        self.files = {p.name: p for p in STATIC.iterdir() if p.suffix in CONTENT_TYPES}
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{'https' if self.secure else 'http'}://{host!s}:{port}/"

    def start(self) -> None:
        self.history.start()
        self._thread = threading.Thread(target=self.server.serve_forever, name="console", daemon=True)
        self._thread.start()
        log.info("console.started", url=self.url, actions=self.actions)

    def stop(self) -> None:
        self.stopping.set()
        self.history.stop()
        self.server.shutdown()
        self.server.server_close()


def _handler(console: Console) -> type[BaseHTTPRequestHandler]:
    views = console.views

    class Handler(BaseHTTPRequestHandler):
        server_version = "streamplane-console"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("console.request", request=format % args)

        # -- plumbing
        def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header(
                "Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
            )
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(to_jsonable(value), default=repr).encode()
            self._send(status, body, "application/json", headers)

        def _error(self, err: errors.StreamplaneError) -> None:
            self._json({"error": type(err).__name__, "message": err.message}, http_status(err))

        def _principal(self) -> auth.Principal:
            header = self.headers.get("Authorization")
            if header:
                return console.guard.bearer(header)
            morsel = SimpleCookie(self.headers.get("Cookie", "")).get(COOKIE)
            if morsel is not None and morsel.value:
                return console.guard.bearer(f"Bearer {morsel.value}")
            if not console.guard.enabled:
                return auth.ANONYMOUS
            raise errors.UnauthenticatedError("sign in with a token (streamplane token create --role viewer)")

        def _query(self) -> dict[str, str]:
            return {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}

        def _body(self) -> dict[str, Any]:
            if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                raise errors.InvalidArgumentError("send the action as application/json")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise errors.LimitExceededError(f"the request body is over {MAX_BODY} bytes")
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as err:
                raise errors.InvalidArgumentError(f"the request body is not JSON: {err}") from err
            if not isinstance(body, dict):
                raise errors.InvalidArgumentError("the request body must be a JSON object")
            return body

        # -- routes
        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            try:
                if path == "/" or path == "/index.html":
                    self._static("index.html")
                elif path.startswith("/static/"):
                    self._static(path.removeprefix("/static/"))
                elif path == "/api/live":
                    self._live()
                elif path.startswith("/api/"):
                    self._json(self._get(path.removeprefix("/api/")))
                else:
                    raise errors.NotFoundError(f"no page {path[:64]!r}", kind="page", name=path[:64])
            except errors.StreamplaneError as err:
                self._error(err)
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception as err:  # a bug: say so, keep serving
                log.exception("console.failed", path=path[:200])
                self._error(errors.StreamplaneError(f"the console failed: {type(err).__name__}"))

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            try:
                origin = self.headers.get("Origin")
                if origin and urlsplit(origin).netloc != self.headers.get("Host"):
                    raise errors.PermissionDeniedError("cross-origin requests are refused")
                if path == "/api/login":
                    self._login()
                elif path == "/api/logout":
                    cookie = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
                    self._json({"signed_out": True}, headers={"Set-Cookie": cookie})
                elif path.startswith("/api/actions/"):
                    self._json(self._act(path.removeprefix("/api/actions/"), self._body()))
                else:
                    raise errors.NotFoundError(f"no action {path[:64]!r}", kind="action", name=path[:64])
            except errors.StreamplaneError as err:
                self._error(err)
            except Exception as err:
                log.exception("console.failed", path=path[:200])
                self._error(errors.StreamplaneError(f"the console failed: {type(err).__name__}"))

        def _static(self, name: str) -> None:
            found = console.files.get(name)
            if found is None:
                raise errors.NotFoundError(f"no file {name[:64]!r}", kind="file", name=name[:64])
            self._send(200, found.read_bytes(), CONTENT_TYPES[found.suffix])

        def _login(self) -> None:
            token = require_text(self._body(), "token")
            principal = console.guard.bearer(f"Bearer {token}")
            auth.check(principal, auth.READ)
            secure = "; Secure" if console.secure else ""
            cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"
            self._json({"name": principal.name, "role": principal.role}, headers={"Set-Cookie": cookie})

        def _get(self, what: str) -> Any:
            principal = self._principal()
            q = self._query()
            if what == "whoami":
                auth.check(principal, auth.READ)
                may = principal.may(auth.CHANGE_STREAMS) and principal.may(auth.CHANGE_CLUSTERS)
                return {"name": principal.name, "role": principal.role, "actions": console.actions, "may_operate": may}
            if what == "stream":
                auth.check(principal, auth.READ, stream=q.get("name", ""))
                return views.stream(q.get("name", ""))
            if what == "group":
                auth.check(principal, auth.READ, group=q.get("name", ""))
                return views.group(q.get("name", ""))
            auth.check(principal, auth.READ)
            if what == "fleet":
                return views.fleet(q.get("after", ""))
            if what == "streams":
                return views.streams(q.get("prefix", ""), q.get("after", ""))
            if what == "groups":
                return views.groups(q.get("prefix", ""), q.get("after", ""))
            if what == "events":
                f = EventFilter(q.get("stream", ""), q.get("group", ""), q.get("actor", ""), q.get("kind", ""))
                return views.events(f, q.get("before", ""))
            raise errors.NotFoundError(f"no API {what[:64]!r}", kind="api", name=what[:64])

        def _act(self, what: str, body: dict[str, Any]) -> Any:
            principal = self._principal()
            if not console.actions:
                raise errors.PermissionDeniedError(
                    "the console is read-only: start the coordinator with --console-actions to allow operator actions"
                )
            confirm = body.get("confirm") is True
            if what == "failover":
                stream, lane = require_text(body, "stream"), require_text(body, "lane")
                to, reason = require_text(body, "to", optional=True), require_text(body, "reason", optional=True)
                auth.check(principal, auth.CHANGE_STREAMS, stream=stream)
                if not confirm:
                    return views.failover_preview(stream, lane, to)
                console.guard.charge(principal)
                return views.failover(stream, lane, to, reason, principal.name)
            if what == "drain":
                cluster, to = require_text(body, "cluster"), require_text(body, "to", optional=True)
                auth.check(principal, auth.CHANGE_CLUSTERS)
                auth.check(principal, auth.CHANGE_STREAMS)
                if not confirm:
                    return views.drain_preview(cluster, to)
                console.guard.charge(principal)
                return views.drain(cluster, to, principal.name)
            if what == "freeze":
                frozen = body.get("frozen")
                if not isinstance(frozen, bool):
                    raise errors.InvalidArgumentError("frozen must be true or false")
                auth.check(principal, auth.CHANGE_CLUSTERS)
                if not confirm:
                    return views.freeze_preview(frozen)
                console.guard.charge(principal)
                return views.freeze(frozen, principal.name)
            if what == "redrive":
                group, stream = require_text(body, "group"), require_text(body, "stream")
                auth.check(principal, auth.CONFIGURE_GROUPS, stream=stream, group=group)
                preview = views.redrive_preview(group, stream)
                if confirm:
                    raise errors.FailedPreconditionError(
                        "a redrive's records go from Kafka to Kafka, never through the coordinator: run "
                        f"`{preview['command']}` where your workers run (it shows its progress, and goes on if stopped)"
                    )
                return preview
            raise errors.NotFoundError(f"no action {what[:64]!r}", kind="action", name=what[:64])

        def _live(self) -> None:
            """Server-sent events: `topology` and `group` events as they commit, `lag` as it is sampled."""
            principal = self._principal()
            q = self._query()
            group = q.get("group", "")
            if group:
                check_object_name("group", group)
            auth.check(principal, auth.READ, group=group)
            if not console._live.acquire(blocking=False):
                raise errors.UnavailableError(f"the console serves at most {MAX_LIVE} live views at once")
            try:
                self._stream_events(group, q.get("after", ""))
            finally:
                console._live.release()

        def _stream_events(self, group: str, after: str) -> None:
            db = views.db
            head = events.head_version(db)
            cursor = events.parse_version(after or head, "after") if (after or head) else None
            group_head = events.read_recent_group_events(db, group, limit=1) if group else []
            group_cursor = bytes.fromhex(group_head[0].version) if group_head else None
            seq = console.history.seq
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self._event("hello", {"version": head})
            quiet = 0.0
            while not console.stopping.is_set():
                batch, watch = console.topology.read_events_and_watch(cursor)
                try:
                    sent = False
                    for e in batch:
                        cursor = bytes.fromhex(e.version)
                        self._event("topology", event_row(e))
                        sent = True
                    if group:
                        for ge in events.read_group_events(db, group, group_cursor, limit=500):
                            group_cursor = bytes.fromhex(ge.version)
                            self._event("group", event_row(ge))
                            sent = True
                    if console.history.seq != seq:
                        seq = console.history.seq
                        sample = console.history.latest(group) if group else None
                        self._event("lag", to_jsonable(sample) if sample else {"at_ms": 0})
                        sent = True
                    if not batch:
                        watch.wait(0.5)
                finally:
                    watch.cancel()
                quiet = 0.0 if sent else quiet + 0.5
                if quiet >= KEEPALIVE_S:  # a comment line: finds a closed connection, keeps proxies open
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    quiet = 0.0

        def _event(self, kind: str, data: Any) -> None:
            self.wfile.write(f"event: {kind}\ndata: {json.dumps(data, default=repr)}\n\n".encode())
            self.wfile.flush()

    return Handler
