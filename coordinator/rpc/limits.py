"""Resource limits of the gRPC server: the streams open at once are capped, in total and per principal.

Streams (worker sessions, event-log watches) are coroutines on the event loop, not threads, so an open stream
costs memory only; the total cap bounds that, and the cap per principal keeps one client from taking the
fleet's share. Counted, not timed: nothing runs per stream.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import structlog

log = structlog.get_logger(__name__)

MAX_STREAMS = 20_000
"""Streams one coordinator process holds open at once (each a few KB and a socket's buffers)."""
HELLO_TIMEOUT_S = 10.0
"""How long a worker session may stay open without its hello."""
CREDENTIAL_GRACE_S = 5.0
"""How long past its token's expiry a worker session lives, waiting for a Renew, before it is ended (its leases
go back to the group at once). Clients renew well before expiry; this covers clock skew and a slow rotation."""


class StreamLimits(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Caps the streaming calls open at once: `max_streams` in total, `per_principal` for one principal
    (`principal_of(context)` names it). A call over a cap is refused with RESOURCE_EXHAUSTED."""

    def __init__(
        self,
        max_streams: int,
        per_principal: int,
        principal_of: Callable[[Any], str],
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

    async def _admit(self, method: str, context: Any) -> Callable[[], None]:
        """Count the call in, or refuse it; returns what counts it out (idempotent)."""
        principal = self._principal_of(context)
        refused = self._acquire(principal)
        if refused:
            log.warning("rpc.stream_refused", method=method, principal=principal, reason=refused)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
        released = False

        def release(*_: object) -> None:
            nonlocal released
            if not released:
                released = True
                self._release(principal)

        context.add_done_callback(release)
        return release

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None or not handler.response_streaming:
            return handler
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream
        method = details.method
        if inspect.isasyncgenfunction(behavior):

            async def limited(request: Any, context: Any) -> AsyncIterator[Any]:
                release = await self._admit(method, context)
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    release()

        else:  # a coroutine that writes to the context itself (gRPC's health service)

            async def limited(request: Any, context: Any) -> Any:  # type: ignore[misc]
                release = await self._admit(method, context)
                try:
                    return await behavior(request, context)
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
