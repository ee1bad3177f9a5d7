"""The gRPC side of the coordinator's metrics: every unary call counted by method and status, and timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from streamplane.coordinator.metrics import RPC_SECONDS, RPCS


def _code_of(context: grpc.ServicerContext) -> str:
    code = context.code() if hasattr(context, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "OK"


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts every unary call by method and final status, and times it."""

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                return inner(request, context)
            finally:
                RPC_SECONDS.labels(method).observe(time.perf_counter() - started)
                RPCS.labels(method, _code_of(context)).inc()

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
