"""The client's Prometheus metrics: off unless a Consumer or Producer is given `metrics_port`.

They live in their own registry, so a process that also runs a coordinator keeps both sets apart.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)

RECORDS_IN = Counter(
    "streamplane_client_records_in", "Records fetched by consumers", ["group", "stream", "lane"], registry=REGISTRY
)
RECORDS_OUT = Counter("streamplane_client_records_out", "Records produced", ["stream", "lane"], registry=REGISTRY)
ACKS = Counter("streamplane_client_acks", "Records acked", ["group", "stream", "lane"], registry=REGISTRY)
RETRIES = Counter("streamplane_client_retries", "Records sent to retry", ["group", "stream", "lane"], registry=REGISTRY)
REJECTS = Counter(
    "streamplane_client_rejects",
    "Records rejected (copied to the dlq lane)",
    ["group", "stream", "lane"],
    registry=REGISTRY,
)
FILTERED = Counter(
    "streamplane_client_filtered_records",
    "Records a consumer's where predicate left out in the decoder (done without reaching the handler)",
    ["group", "stream", "lane"],
    registry=REGISTRY,
)
FETCH_BYTES = Counter(
    "streamplane_client_fetch_bytes",
    "Record-set bytes fetched from Kafka",
    ["group", "stream", "lane"],
    registry=REGISTRY,
)
DECODE_ERRORS = Counter(
    "streamplane_client_decode_errors",
    "Batches that could not be decoded and were rejected, by reason: corrupt, or too_large (a batch over the "
    "decompression limit: a zstd bomb)",
    ["group", "stream", "lane", "reason"],
    registry=REGISTRY,
)
DLQ_COPY_FAILURES = Counter(
    "streamplane_client_dlq_copy_failures",
    "Dlq copies of rejected records that could not be written (the dlq lane's cluster down, a timeout); each is "
    "made again at the next retry check",
    ["group", "stream"],
    registry=REGISTRY,
)
COMMIT_FAILURES = Counter(
    "streamplane_client_commit_failures",
    "Batched commit calls that failed (their outcomes are kept and committed again); a worker whose credential is "
    "refused for good ends instead (streamplane_client_ended)",
    ["group"],
    registry=REGISTRY,
)
ENDED = Counter(
    "streamplane_client_ended",
    "Consumers and producers that ended on their own for an error no retry heals, by kind of error",
    ["kind"],
    registry=REGISTRY,
)
PRODUCER_FENCED = Counter(
    "streamplane_client_producer_fenced",
    "Times a producer stopped writing because no coordinator replica had answered its heartbeats for half its "
    "session's TTL (its records waited until one did)",
    registry=REGISTRY,
)
PRODUCER_SWITCH = Histogram(
    "streamplane_client_producer_switch_seconds",
    "From a failover's commit to the producer writing to the new generation",
    ["stream", "lane"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
    registry=REGISTRY,
)
TIME_LAG = Gauge(
    "streamplane_client_time_lag_seconds",
    "Now minus the ingestion time of the oldest record not yet processed, by lease",
    ["group", "lease"],
    registry=REGISTRY,
)

_served: set[int] = set()
_lock = threading.Lock()


def serve(port: int, host: str = "0.0.0.0") -> None:
    """Serve the client's metrics on host:port/metrics (once per port per process)."""
    with _lock:
        if port not in _served:
            start_http_server(port, host, registry=REGISTRY)
            _served.add(port)
