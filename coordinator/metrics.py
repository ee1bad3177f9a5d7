"""The coordinator's Prometheus metrics and their HTTP endpoint (/metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import Counter, Histogram, start_http_server

RPCS = Counter("streamplane_rpc_total", "gRPC calls handled, by method and status code", ["method", "code"])
RPC_SECONDS = Histogram(
    "streamplane_rpc_seconds",
    "gRPC unary call latency, by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


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


def serve_metrics(host: str, port: int) -> None:
    """Serve /metrics on host:port in a background thread."""
    start_http_server(port, addr=host)
