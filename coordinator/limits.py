"""Resource limits of the gRPC server: long-lived streams cannot take every server thread, and a stream that
never says hello is closed.

Every streaming call (worker sessions, event-log watches) holds a server thread for its whole life. The
server's pool is shared with unary calls, so streams are capped in total (the rest of the pool is reserved
for unary calls) and per principal (one client cannot take the fleet's share). Limits are counted, not
timed: no thread or timer per stream; one reaper thread closes sessions whose hello is late.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import structlog

from streamplane.clock import SYSTEM, Clock

log = structlog.get_logger(__name__)

UNARY_RESERVE = 64
"""Server threads that streams never take: unary calls are served however many streams are open."""
HELLO_TIMEOUT_S = 10.0
"""How long a worker session may stay open without its hello."""


class StreamLimits(grpc.ServerInterceptor):  # type: ignore[misc]
    """Caps the streaming calls open at once: `max_streams` in total, `per_principal` for one principal
    (`principal_of(context)` names it). A call over a cap is refused with RESOURCE_EXHAUSTED."""

    def __init__(
        self,
        max_streams: int,
        per_principal: int,
        principal_of: Callable[[grpc.ServicerContext], str],
    ) -> None:
        self.max_streams = max_streams
        self.per_principal = per_principal
        self._principal_of = principal_of
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self.total = 0

    def _acquire(self, principal: str) -> str:
        """ "" when a stream may open (and is counted), else why not."""
        with self._lock:
            if self.total >= self.max_streams:
                return f"the coordinator has {self.total} streams open, its limit; retry later"
            if self._open.get(principal, 0) >= self.per_principal:
                return f"{principal} has {self.per_principal} streams open, the limit per principal; retry later"
            self.total += 1
            self._open[principal] = self._open.get(principal, 0) + 1
            return ""

    def _release(self, principal: str) -> None:
        with self._lock:
            self.total -= 1
            left = self._open.get(principal, 1) - 1
            if left:
                self._open[principal] = left
            else:
                self._open.pop(principal, None)

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None], details: Any
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or not handler.response_streaming:
            return handler
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream

        def limited(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            principal = self._principal_of(context)
            refused = self._acquire(principal)
            if refused:
                log.warning("rpc.stream_refused", method=details.method, principal=principal, reason=refused)
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            released = threading.Event()

            def release() -> None:
                if not released.is_set():
                    released.set()
                    self._release(principal)

            if not context.add_callback(release):
                release()
            try:
                yield from behavior(request, context)
            finally:
                release()

        factory = (
            grpc.stream_stream_rpc_method_handler if handler.request_streaming else grpc.unary_stream_rpc_method_handler
        )
        return factory(
            limited,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class Deadlines:
    """Cancels calls that did not reach a point in time (a session's hello): one reaper thread for all."""

    def __init__(self, clock: Clock = SYSTEM, tick_s: float = 0.25) -> None:
        self._clock = clock
        self._tick_s = tick_s
        self._heap: list[tuple[float, int, grpc.ServicerContext]] = []
        self._pending: set[int] = set()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
        self._thread.start()

    def watch(self, context: grpc.ServicerContext, seconds: float) -> int:
        """Cancel `context` in `seconds` unless `met(token)` is called first."""
        token = next(self._ids)
        with self._lock:
            heapq.heappush(self._heap, (self._clock.monotonic() + seconds, token, context))
            self._pending.add(token)
        return token

    def met(self, token: int) -> None:
        with self._lock:
            self._pending.discard(token)

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            now = self._clock.monotonic()
            late = []
            with self._lock:
                while self._heap and self._heap[0][0] <= now:
                    _, token, context = heapq.heappop(self._heap)
                    if token in self._pending:
                        self._pending.discard(token)
                        late.append(context)
            for context in late:
                context.cancel()

    def stop(self) -> None:
        self._stop.set()
