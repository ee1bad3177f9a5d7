"""The source's and the sink's options, checked once with errors that name the option.

Names follow Spark's own Kafka source where they mean the same (startingOffsets, maxOffsetsPerTrigger,
minPartitions, failOnDataLoss, includeHeaders); `maxRecordsPerTrigger` is accepted as another name for
maxOffsetsPerTrigger. `where` takes a record predicate (streamplane.predicate) evaluated in the decoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.credentials import ClientTls
from streamplane.client.kafka.config import ConnectionConfig
from streamplane.errors import InvalidArgumentError
from streamplane.native import DEFAULT_MAX_DECOMPRESSED, compile_where
from streamplane.spark.offsets import parse_ending_timestamp, parse_starting_offsets, parse_starting_timestamps

RECORDS_PER_TASK = 1_000_000
"""Ranges are packed into tasks of about this many records (`recordsPerTask`), as Spark packs small files into
splits of 128 MB: Spark's own cost for each task of a Python data source (about 70 ms on our machines) then
stays small beside its reading, and a read of many small partitions is not one task each."""


def _get(options: Any, name: str, default: str | None = None) -> str | None:
    # Spark hands options over case-insensitively (keys may arrive lower-cased)
    for key in (name, name.lower()):
        if key in options:
            return str(options[key])
    return default


def _int(options: Any, name: str, default: int | None, *, minimum: int) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be at least {minimum}, not {value}")
    return value


def _bool(options: Any, name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, not {raw!r}")
    return raw.lower() == "true"


def _max_decompressed(options: Any) -> int:
    value = _int(options, "maxDecompressedBytes", DEFAULT_MAX_DECOMPRESSED, minimum=1024)
    assert value is not None
    if value > DEFAULT_MAX_DECOMPRESSED:
        raise InvalidArgumentError(
            f"option maxDecompressedBytes must be at most {DEFAULT_MAX_DECOMPRESSED}, not {value}"
        )
    return value


def _is_kafka(key: Any) -> bool:
    return str(key).lower().startswith("kafka.")


@dataclass(frozen=True)
class Access:
    """How to reach the coordinator: options coordinator, token, tls.ca, tls.cert and tls.key (each defaults as
    the Python client's does: STREAMPLANE_COORDINATOR, STREAMPLANE_TOKEN, STREAMPLANE_TLS_*). The progress
    listener runs in the driver's own process and finds its credentials the same way, from the environment."""

    coordinator: str = ""
    token: str | None = field(default=None, repr=False)
    tls: ClientTls | None = None
    kafka: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """librdkafka-named settings of the connections to Kafka, from the options `kafka.<setting>` (as Spark's own
    Kafka source takes them): `kafka.security.protocol`, `kafka.sasl.mechanism`, `kafka.sasl.username`,
    `kafka.sasl.password`, `kafka.ssl.ca.location`, ... for clusters behind TLS or SASL."""

    @staticmethod
    def parse(options: Any) -> Access:
        kafka = tuple(sorted((str(k)[len("kafka.") :], str(v)) for k, v in options.items() if _is_kafka(k)))
        try:
            ConnectionConfig.from_settings(dict(kafka))  # checked now: bad settings fail the query's load
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"option kafka.*: {err.message}") from err
        return Access(
            _get(options, "coordinator", "") or "",
            _get(options, "token") or None,
            ClientTls.find(_get(options, "tls.ca"), _get(options, "tls.cert"), _get(options, "tls.key")),
            kafka,
        )

    def kafka_settings(self) -> dict[str, Any]:
        """The `kafka.*` options as librdkafka settings (for a Producer)."""
        return dict(self.kafka)

    def connection(self, timeout_s: float = 30.0) -> ConnectionConfig:
        """The `kafka.*` options as our wire client's connection settings, with `timeout_s`."""
        return replace(ConnectionConfig.from_settings(self.kafka_settings()), timeout_s=timeout_s)

    def client(self, *, retries: int = 3) -> CoordinatorClient:
        return CoordinatorClient(self.coordinator or None, retries=retries, token=self.token, tls=self.tls)


@dataclass(frozen=True)
class SourceOptions:
    coordinator: str
    stream: str
    lanes: tuple[str, ...]
    """Empty: every lane but dlq."""
    group: str
    """Empty: derived from the query's name (or id) by the progress listener."""
    starting: str | dict[str, int]
    starting_timestamps: int | dict[str, int] | None
    """startingTimestamp or startingOffsetsByTimestamp: they take precedence over startingOffsets where given."""
    ending_timestamp: int | None
    """endingTimestamp: each partition ends before its first record at or after it (None: no end)."""
    max_rows: int | None
    min_partitions: int | None
    records_per_task: int
    """Ranges are packed into tasks of about this many records (0: one range a task)."""
    fail_on_data_loss: bool
    include_headers: bool
    max_decompressed: int
    access: Access = Access()
    where: str = ""
    """A record predicate (streamplane.predicate's grammar): rows it does not match are left out in the decoder,
    before any Arrow row is built ("" reads every record)."""
    pushdown: bool = True
    """The batch reader takes Spark's filters on key, timestamp and partition into the decoder (false: Spark
    filters every row itself)."""

    @staticmethod
    def parse(options: Any) -> SourceOptions:
        stream = _get(options, "stream")
        if not stream:
            raise InvalidArgumentError("option stream is required: .option('stream', 'logs')")
        max_rows = _int(options, "maxOffsetsPerTrigger", None, minimum=1)
        max_rows = _int(options, "maxRecordsPerTrigger", max_rows, minimum=1)
        return SourceOptions(
            coordinator=_get(options, "coordinator", "") or "",
            stream=stream,
            lanes=tuple(x.strip() for x in (_get(options, "lanes", "") or "").split(",") if x.strip()),
            group=_get(options, "group", "") or "",
            starting=parse_starting_offsets(_get(options, "startingOffsets", "earliest") or "earliest"),
            starting_timestamps=parse_starting_timestamps(
                _get(options, "startingOffsetsByTimestamp", "") or "", _get(options, "startingTimestamp", "") or ""
            ),
            ending_timestamp=parse_ending_timestamp(_get(options, "endingTimestamp", "") or ""),
            max_rows=max_rows,
            min_partitions=_int(options, "minPartitions", None, minimum=1),
            records_per_task=_int(options, "recordsPerTask", RECORDS_PER_TASK, minimum=0) or 0,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            max_decompressed=_max_decompressed(options),
            access=Access.parse(options),
            where=_where(options),
            pushdown=_bool(options, "pushdown", True),
        )


def _where(options: Any) -> str:
    """The where option, checked now (a bad predicate fails the query's load with the column of its error)."""
    text = _get(options, "where", "") or ""
    if text:
        compile_where(text)
    return text


@dataclass(frozen=True)
class SinkOptions:
    coordinator: str
    stream: str
    lane: str
    access: Access = Access()

    @staticmethod
    def parse(options: Any) -> SinkOptions:
        stream = _get(options, "stream")
        if not stream:
            raise InvalidArgumentError("option stream is required: .option('stream', 'logs')")
        return SinkOptions(
            _get(options, "coordinator", "") or "",
            stream,
            _get(options, "lane", "realtime") or "realtime",
            Access.parse(options),
        )
