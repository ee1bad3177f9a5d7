"""Client of a local cluster's control channel (topic creation and fault injection over HTTP/JSON)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any

from streamplane.errors import FailedPreconditionError, UnavailableError, quoted

MAX_REPLY_BYTES = 1 << 20


def _json_object(raw: bytes) -> dict[str, Any]:
    """A reply's JSON object; ValueError for anything else."""
    found = json.loads(raw or b"{}")
    if not isinstance(found, dict):
        raise ValueError("not a JSON object")
    return found


class LocalClusterControl:
    """Talks to the control endpoint (host:port) printed by a local cluster process."""

    def __init__(self, endpoint: str, *, name: str = "local", timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.name = name
        self._timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.endpoint}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return _json_object(response.read(MAX_REPLY_BYTES))
        except urllib.error.HTTPError as err:
            try:
                detail = _json_object(err.read(MAX_REPLY_BYTES)).get("error", err.reason)
            except ValueError:
                detail = err.reason
            raise FailedPreconditionError(f"local cluster {self.name}: {quoted(detail, 300)}") from err
        except ValueError as err:
            raise UnavailableError(
                f"local cluster {self.name}: control channel at {self.endpoint} did not answer a JSON object"
            ) from err
        except (urllib.error.URLError, OSError) as err:
            raise UnavailableError(
                f"local cluster {self.name}: control channel at {self.endpoint} is unreachable ({err})"
            ) from err

    def info(self) -> dict[str, Any]:
        return self._call("GET", "/info")

    def create_topic(self, topic: str, partitions: int) -> bool:
        """Create a topic; False when it already existed with that partition count."""
        return bool(self._call("POST", "/topics", {"name": topic, "partitions": partitions})["created"])

    def broker_down(self, broker: int) -> None:
        self._call("POST", "/brokers/down", {"broker": broker})

    def broker_up(self, broker: int) -> None:
        self._call("POST", "/brokers/up", {"broker": broker})

    def set_consumer_group_session_timeout(self, ms: int) -> None:
        """Session timeout of KIP-848 consumer groups (classic groups take session.timeout.ms from clients)."""
        self._call("POST", "/groups/consumer-session-timeout", {"ms": ms})

    def set_leader(self, topic: str, partition: int, broker: int) -> None:
        self._call("POST", "/leader", {"topic": topic, "partition": partition, "broker": broker})


class JsonHandler(BaseHTTPRequestHandler):
    """The server side of a control channel: JSON replies, and no access log (its parent owns the terminal)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
