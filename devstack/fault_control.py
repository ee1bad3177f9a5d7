"""The local stack's control endpoint: `streamplane fault` breaks and mends its parts on purpose.

`streamplane dev` serves it on a free loopback port (printed as `control=HOST:PORT`) and writes it, with the
coordinator's address, to DATA_DIR/dev.json, where `streamplane fault` finds it. HTTP with JSON bodies, the
same for both engines; errors travel as the streamplane error they are (kind, message, fields).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamplane.devstack.cluster_control import JsonHandler
from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError, UnavailableError
from streamplane.rpc import details_json, error_from_code, status_for

if TYPE_CHECKING:
    from streamplane.devstack.stack import LocalStack

STATE_FILE = "dev.json"


def _int(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, not {value!r}")
    return value


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} is required")
    return value


def _replica(stack: LocalStack, body: dict[str, Any]) -> int:
    owner = body.get("owner", "")
    if not isinstance(owner, str):
        raise InvalidArgumentError(f"owner must be a group name, not {owner!r}")
    return stack.replica(_int(body, "replica", 0), leader=bool(body.get("leader", False)), owner=owner)


def _routes(stack: LocalStack) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    return {
        "/state": lambda _: stack.state(),
        "/coordinator/kill": lambda b: stack.kill_coordinator(_replica(stack, b)),
        "/coordinator/pause": lambda b: stack.pause_coordinator(_replica(stack, b)),
        "/coordinator/resume": lambda b: stack.resume_coordinator(_replica(stack, b)),
        "/store/restart": lambda _: stack.restart_store(),
        "/brokers/down": lambda b: stack.broker_down(
            _text(b, "cluster"), _int(b, "broker", 0), pause=bool(b.get("pause", False))
        ),
        "/brokers/up": lambda b: stack.broker_up(_text(b, "cluster"), _int(b, "broker", 0)),
        "/leader": lambda b: stack.set_leader(
            _text(b, "cluster"), _text(b, "topic"), _int(b, "partition"), _int(b, "broker")
        ),
    }


class ControlServer:
    """The endpoint, on its own thread; `close()` stops it and removes the state file."""

    def __init__(self, stack: LocalStack, data_dir: Path, host: str = "127.0.0.1") -> None:
        routes = _routes(stack)

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                route = routes.get(self.path)
                try:
                    if route is None:
                        raise NotFoundError(f"no such control resource {self.path}")
                    length = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise InvalidArgumentError("the request body must be a JSON object")
                    self._reply(200, route(body))
                except json.JSONDecodeError as err:
                    self._reply(400, _error(InvalidArgumentError(f"the request body is not JSON: {err}")))
                except StreamplaneError as err:
                    self._reply(400, _error(err))

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.endpoint = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="dev-control", daemon=True)
        self._thread.start()
        self._state_file = Path(data_dir) / STATE_FILE
        self._state_file.write_text(json.dumps({"control": self.endpoint, "coordinator": stack.coordinator_address}))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._state_file.unlink(missing_ok=True)


def _error(err: StreamplaneError) -> dict[str, Any]:
    return {
        "error": err.message,
        "code": status_for(err).value[0],
        "kind": type(err).__name__,
        "details": details_json(err),
    }


class DevControl:
    """Client of a running `streamplane dev`'s control endpoint."""

    def __init__(self, endpoint: str, *, timeout_s: float = 90.0) -> None:
        self.endpoint = endpoint
        self._timeout_s = timeout_s

    @classmethod
    def find(cls, data_dir: Path) -> DevControl:
        """The control endpoint of the `streamplane dev` running on `data_dir`."""
        path = Path(data_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise UnavailableError(
                f"no local stack runs on {data_dir} ({path} is missing or unreadable): start `streamplane dev` "
                "first, or name its control endpoint with --dev HOST:PORT"
            ) from err
        return cls(str(state["control"]))

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://{self.endpoint}{path}",
            data=json.dumps(body or {}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return dict(json.loads(response.read() or b"{}"))
        except urllib.error.HTTPError as err:
            got = json.loads(err.read() or b"{}")
            raise error_from_code(
                int(got.get("code", 2)), str(got.get("error", err.reason)), got.get("kind", ""), got.get("details", "")
            ) from err
        except (urllib.error.URLError, OSError) as err:
            raise UnavailableError(
                f"the local stack's control endpoint {self.endpoint} is unreachable ({err})"
            ) from err
