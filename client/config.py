"""The consumer's settings: one frozen dataclass, a docstring per field, validated at construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from streamplane.client.credentials import ClientTls, TokenSource
from streamplane.errors import InvalidArgumentError
from streamplane.native import DEFAULT_MAX_DECOMPRESSED


def _positive(name: str, value: Any, *, integer: bool = True) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (integer and value != int(value))
    ):
        raise InvalidArgumentError(f"{name} must be a positive {'integer' if integer else 'number'}, not {value!r}")


@dataclass(frozen=True)
class ConsumerConfig:
    """How a Consumer reads, processes and commits."""

    concurrency: int = 4
    """Handler threads of `run()`."""
    ordering: str = "none"
    """"none": records of a partition may finish in any order; "key": records with the same key are handled
    one at a time, in offset order (`run()` only)."""
    max_decompressed: int = 16 << 20
    """The decoder's limit for one batch; a bigger batch is rejected (a zstd bomb)."""
    max_in_flight: int = 50_000
    """Records delivered and not yet ended above which fetching pauses."""
    max_buffered_bytes: int = 256 << 20
    """The decoded data the consumer may hold, a hard cap."""
    partition_max_bytes: int = 1 << 20
    """How much one Fetch asks for per partition."""
    retry_backoff_s: float = 1.0
    """Default wait before a retried record is tried again."""
    commit_interval_s: float = 0.1
    """How often what changed is committed (one call for every lease that changed)."""
    start: str = "earliest"
    """Where a partition with no progress starts: "earliest" or "latest"."""
    isolation_level: str = "read_uncommitted"
    """"read_committed" leaves out records of aborted transactions and stops at the last stable offset."""
    worker_id: str = ""
    """This member's id in the group (default host-pid-random)."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port (off by default)."""
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    """librdkafka-named settings for the connections to Kafka (security.protocol, ssl.*, sasl.*, client.rack)
    and for the dlq producer."""
    token: TokenSource = field(default=None, repr=False)
    """The coordinator credential (default: found as `streamplane.client.credentials` says)."""
    tls: ClientTls | None = None
    """TLS to the coordinator (default: from the environment)."""
    where: str = ""
    """A record predicate (see `streamplane.predicate`): records it does not match are left out in the decoder,
    never handed to the handler, iterator or batches, and committed as done. "" reads every record."""

    def __post_init__(self) -> None:
        _positive("concurrency", self.concurrency)
        if not isinstance(self.where, str):
            raise InvalidArgumentError(f"where must be a string, not {type(self.where).__name__}")
        if self.ordering not in ("none", "key"):
            raise InvalidArgumentError(f"ordering must be 'none' or 'key', not {self.ordering!r}")
        _positive("max_decompressed", self.max_decompressed)
        if self.max_decompressed > DEFAULT_MAX_DECOMPRESSED:
            raise InvalidArgumentError(
                f"max_decompressed must be at most {DEFAULT_MAX_DECOMPRESSED}, not {self.max_decompressed}"
            )
        _positive("max_in_flight", self.max_in_flight)
        _positive("max_buffered_bytes", self.max_buffered_bytes)
        _positive("partition_max_bytes", self.partition_max_bytes)
        floor = 2 * (self.max_decompressed + self.partition_max_bytes)
        if self.max_buffered_bytes < floor:
            raise InvalidArgumentError(
                f"max_buffered_bytes ({self.max_buffered_bytes}) must be at least twice max_decompressed plus "
                f"partition_max_bytes ({floor})"
            )
        if self.retry_backoff_s:
            _positive("retry_backoff_s", self.retry_backoff_s, integer=False)
        _positive("commit_interval_s", self.commit_interval_s, integer=False)
        if self.start not in ("earliest", "latest"):
            raise InvalidArgumentError(f"start must be 'earliest' or 'latest', not {self.start!r}")
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidArgumentError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', not {self.isolation_level!r}"
            )
        if self.metrics_port is not None and not 0 < self.metrics_port < 65536:
            raise InvalidArgumentError(f"metrics_port must be between 1 and 65535, not {self.metrics_port}")

    @classmethod
    def build(cls, base: ConsumerConfig | None, settings: Mapping[str, Any]) -> ConsumerConfig:
        """`base` (or the defaults) with `settings` applied; an unknown setting is named."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InvalidArgumentError(f"unknown consumer setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return replace(base or cls(), **settings)
