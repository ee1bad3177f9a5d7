"""The gRPC side of the coordinator's metrics: every unary call counted by method and status, and timed."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc

from streamplane import rpc
from streamplane.coordinator.rpc.metrics import RPC_SECONDS, RPCS


@contextlib.contextmanager
def _counted(method: str) -> Iterator[None]:
    """Count and time one unary call, with the status its handler ended with."""
    started, code = time.perf_counter(), "UNKNOWN"
    rpc.begin_call()
    try:
        yield
        code = rpc.call_status().name
    except BaseException:
        status = rpc.call_status()
        code = status.name if status != grpc.StatusCode.OK else "UNKNOWN"
        raise
    finally:
        RPC_SECONDS.labels(method).observe(time.perf_counter() - started)
        RPCS.labels(method, code).inc()


class MetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Counts every unary call by method and final status, and times it."""

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary

        if inspect.iscoroutinefunction(inner):  # gRPC's own services (health) on the event loop

            async def timed_async(request: Any, context: Any) -> Any:
                with _counted(method):
                    return await inner(request, context)

            timed: Callable[..., Any] = timed_async
        else:

            def timed_sync(request: Any, context: Any) -> Any:
                with _counted(method):
                    return inner(request, context)

            timed = timed_sync

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
