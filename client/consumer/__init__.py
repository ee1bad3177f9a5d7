"""The consumer: a group member that reads its leased partitions straight from Kafka and processes records in
parallel, each ending as ack, retry or reject.

Iterator:

    with Consumer("127.0.0.1:7400", group="billing", stream="orders") as consumer:
        for msg in consumer:
            handle(msg.value)
            msg.ack()

Handler (`concurrency` threads; an exception is a retry, and after the group's max attempts a reject):

    def handle(msg: Message) -> None:
        charge(json.loads(msg.value))      # returning acks the record

    Consumer("127.0.0.1:7400", group="billing", stream="orders", concurrency=8).run(handle)

The consumer holds the group session (rejoining with backoff when the coordinator goes away), keeps one
ledger per lease and reads every lease through one fetch loop (one connection per broker, whatever the lease
count), commits every lease that changed in one call about every `commit_interval_s`, each with its epoch,
and copies rejected records to the stream's `dlq` lane with their origin in headers before marking them
rejected. Decoded data held is capped by `max_buffered_bytes`; fetching pauses at `max_in_flight` records.

The package, by part: `facade` (Consumer), `membership`, `fetch_loop`, `ledger` and `message`, `committer`
and `dlq`, `dispatch`.
"""

from streamplane.client.config import ConsumerConfig
from streamplane.client.consumer.dlq import ATTEMPT_HEADER, COPY_HEADER, ORIGIN_HEADERS, REASON_HEADER
from streamplane.client.consumer.facade import Consumer
from streamplane.client.consumer.message import BatchOutcome, Message, OutcomeError

__all__ = [
    "ATTEMPT_HEADER",
    "COPY_HEADER",
    "ORIGIN_HEADERS",
    "REASON_HEADER",
    "BatchOutcome",
    "Consumer",
    "ConsumerConfig",
    "Message",
    "OutcomeError",
]
