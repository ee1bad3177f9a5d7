"""Copying rejected records to their stream's `dlq` lane, each saying where it came from.

A reject is marked rejected only once its copy is stored. The commit log decides first whether this holder
may write the copy and which copy number it is (a holder that crashed between writing and recording leaves
the next one to write copy 2); the copy producer is idempotent, so librdkafka's own retries add no copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from streamplane.client import metrics
from streamplane.client.consumer.ledger import LeaseLedger, ToCopy
from streamplane.client.consumer.message import Message
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.credentials import ClientTls
from streamplane.client.producer import Producer
from streamplane.errors import StreamplaneError
from streamplane.model import DLQ_COPY_TIMEOUT_MS, DlqLocation

log = structlog.get_logger(__name__)

ORIGIN_HEADERS = (
    "sp-origin-stream",
    "sp-origin-lane",
    "sp-origin-generation",
    "sp-origin-partition",
    "sp-origin-offset",
)
REASON_HEADER = "sp-reject-reason"
ATTEMPT_HEADER = "sp-dlq-attempt"
"""The attempts the record had when it was rejected."""
COPY_HEADER = "sp-dlq-copy"
"""Which copy of the reject this is: 1, or 2 when a holder crashed between writing its copy and recording it."""


class DlqCopier:
    """Writes dlq copies through one producer, replaced when it ends on its own.

    Args:
        client: the consumer's coordinator client (its credentials are the producer's).
        group: the consumer group (metrics).
        kafka_config: librdkafka settings the consumer was given.
        tls: the coordinator connection's TLS settings.
    """

    def __init__(
        self, client: CoordinatorClient, group: str, kafka_config: dict[str, Any], tls: ClientTls | None
    ) -> None:
        self._client, self._group, self._kafka_config, self._tls = client, group, kafka_config, tls
        self.producer: Producer | None = None
        self._lock = threading.Lock()
        self._copying: dict[int, tuple[LeaseLedger, Message]] = {}
        """Copies handed to the producer and not reported yet (by id of the record): failed, to be made again,
        if that producer ends before it reports them."""

    def send(self, ledger: LeaseLedger, copy: ToCopy) -> None:
        """Copy a rejected record (the commit log counted the copy already); it is marked rejected once the
        copy is stored. StreamplaneError if the copy cannot be handed to a producer now."""
        msg, reason = copy.msg, copy.reason
        origin = (ledger.stream, ledger.lane, str(ledger.generation), str(ledger.partition), str(msg.offset))
        headers = [(k, v) for k, v in msg.headers if not k.startswith(("sp-origin-", "sp-dlq-"))]
        headers += [(name, value.encode()) for name, value in zip(ORIGIN_HEADERS, origin, strict=True)]
        headers += [
            (REASON_HEADER, reason[:1000].encode()),
            ("sp-origin-ingest-ms", str(msg.timestamp).encode()),
            (ATTEMPT_HEADER, str(msg.attempt).encode()),
            (COPY_HEADER, str(copy.copy).encode()),
        ]

        def stored(err: Any, kmsg: Any) -> None:
            with self._lock:
                if self._copying.pop(id(msg), None) is None:
                    return  # its producer was replaced meanwhile: the copy was failed then, and is made again
            if err is not None:
                metrics.DLQ_COPY_FAILURES.labels(self._group, ledger.stream).inc()
                log.error("consumer.dlq_failed", lease=ledger.lease_id, offset=msg.offset, error=str(err))
                ledger.copy_failed(msg)  # copied again at the next retry check here, or by the next holder
                return
            route = producer.route(ledger.stream, "dlq")  # the producer that made the copy
            where = DlqLocation(
                stream=ledger.stream,
                lane="dlq",
                generation=route.generation if route.topic == kmsg.topic() else 0,
                partition=kmsg.partition(),
                offset=kmsg.offset(),
            )
            ledger.rejected(msg, reason, where)

        metrics.REJECTS.labels(*ledger.labels).inc()
        producer = self._producer()
        with self._lock:
            self._copying[id(msg)] = (ledger, msg)
        try:
            producer.produce(ledger.stream, msg.value, key=msg.key, lane="dlq", headers=headers, on_delivery=stored)
        except StreamplaneError:
            with self._lock:
                self._copying.pop(id(msg), None)
            raise

    def check(self, end: Callable[[StreamplaneError], None]) -> None:
        """Replace a producer that ended on its own (its unreported copies are failed, and made again); `end`
        the consumer if its credential is refused for good, as no copy can be made then."""
        if self.producer is None or self.producer.error is None:
            return
        try:
            self._producer()
        except StreamplaneError as err:
            end(err)

    def _producer(self) -> Producer:
        """The copy producer; one that ended on its own is detached under the lock and closed outside it (its
        delivery callbacks take the lock). Raises its error if its credential is refused for good."""
        ended: Producer | None = None
        with self._lock:
            if self.producer is not None and self.producer.error is not None:
                ended, self.producer = self.producer, None
                pending, self._copying = list(self._copying.values()), {}
        if ended is not None and ended.error is not None:
            for ledger, msg in pending:
                ledger.copy_failed(msg)
            ended.close(0)  # its callbacks now find their copies gone: they do nothing
            if self._client.credentials.refused(ended.error):
                raise ended.error
            log.warning("consumer.dlq_producer_replaced", error=ended.error.message)
        with self._lock:
            if self.producer is None:
                config = {
                    "linger.ms": 5,
                    **self._kafka_config,
                    "enable.idempotence": True,
                    "message.timeout.ms": DLQ_COPY_TIMEOUT_MS,  # over by then: see the commit log's copy rule
                }
                self.producer = Producer(self._client.target, token=self._client.credentials, tls=self._tls, **config)
            return self.producer

    def flush(self, timeout_s: float) -> None:
        if self.producer is not None:
            self.producer.flush(timeout_s)

    def close(self, timeout_s: float) -> None:
        if self.producer is not None:
            self.producer.close(timeout_s)
