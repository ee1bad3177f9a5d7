"""The coordinator's Prometheus metrics and their HTTP endpoint (/metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from streamplane.model import Lag

RPCS = Counter("streamplane_rpc_total", "gRPC calls handled, by method and status code", ["method", "code"])
RPC_SECONDS = Histogram(
    "streamplane_rpc_seconds",
    "gRPC unary call latency, by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


COMMITS = Counter("streamplane_commits_total", "Commits applied to the commit log, by group", ["group"])
ACKED = Counter("streamplane_acked_offsets_total", "Offsets newly done (acked or rejected), by group", ["group"])
RETRIES = Counter("streamplane_retries_total", "Retry entries in commits, by group", ["group"])
REJECTS = Counter("streamplane_rejects_total", "Reject entries in commits, by group", ["group"])
STALE_EPOCH = Counter(
    "streamplane_stale_epoch_refusals_total", "Calls refused for a stale lease epoch, by group", ["group"]
)


class LagCollector:
    """Time and offset lag per group, stream and lane, read from the commit log at scrape time."""

    def __init__(self) -> None:
        self.source: Callable[[], Lag] | None = None

    def collect(self) -> Any:
        time_lag = GaugeMetricFamily(
            "streamplane_time_lag_seconds",
            "Now minus the ingestion time of the oldest record not yet processed",
            labels=["group", "stream", "lane"],
        )
        offset_lag = GaugeMetricFamily(
            "streamplane_offset_lag", "Records not yet processed", labels=["group", "stream", "lane"]
        )
        lag = self.source() if self.source else None
        for lane in lag.lanes if lag else ():
            time_lag.add_metric([lane.group, lane.stream, lane.lane], lane.time_lag_ms / 1000)
            offset_lag.add_metric([lane.group, lane.stream, lane.lane], lane.offset_lag)
        yield time_lag
        yield offset_lag


LAG = LagCollector()
REGISTRY.register(LAG)


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
