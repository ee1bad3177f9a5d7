"""Partitions granted together start together: a worker handed many partitions with records waiting (a rewind,
a failover, a rebalance, a restart) handles the first records of every one of them before it works off any
one's backlog, so no partition's time lag stands still behind the others'."""

from __future__ import annotations

import threading
import time

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.client.flow import ByPriority
from tests.helpers import register_local_clusters, wait_until

PARTITIONS, EACH = 32, 200


def test_every_partition_granted_together_has_its_first_record_handled_before_any_backlog_is_worked_off(
    coordinator, local_cluster
) -> None:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east",))
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("turns", PARTITIONS, cluster="east")
    with Producer(coordinator.address, **{"linger.ms": 20}) as producer:
        for i in range(PARTITIONS * EACH):
            producer.produce("turns", b"%d" % i, key=b"%d" % i)
        assert producer.flush() == 0

    order: list[int] = []
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        time.sleep(0.0002)  # stands for the handler's work: the brokers' responses arrive while it works
        with lock:
            order.append(msg.partition)

    stop = threading.Event()
    with Consumer(coordinator.address, group="turns-g", stream="turns", concurrency=1) as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
        runner.start()
        wait_until(lambda: len(order) == PARTITIONS * EACH, timeout=60, what=lambda: f"{len(order)} handled")
        stop.set()
        runner.join()
    first = {}
    for i, partition in enumerate(order):
        first.setdefault(partition, i)
    last_to_start = max(first.values())
    print(f"{PARTITIONS} partitions of {EACH} records: the last began after {last_to_start:,} records")
    assert len(first) == PARTITIONS
    # in arrival order it began after the 31 partitions before it in the responses (about 6,200 records)
    assert last_to_start < PARTITIONS * EACH // 4, f"a partition waited for {last_to_start:,} records of the others"


def test_the_work_queue_takes_priorities_first_then_owners_by_turns_each_in_arrival_order() -> None:
    work = ByPriority(lambda item: (item[0], item[1]))
    for n in range(4):  # owner a's backlog came first
        work.put((0, "a", n))
    for n in range(2):
        work.put((0, "b", n))
    work.put((5, "top", 0))
    work.put((0, "c", 0))
    taken = [work.get_nowait() for _ in range(work.qsize())]
    assert taken == [
        (5, "top", 0),
        (0, "a", 0),
        (0, "b", 0),
        (0, "c", 0),
        (0, "a", 1),
        (0, "b", 1),
        (0, "a", 2),
        (0, "a", 3),
    ]


def test_a_queue_that_saw_many_owners_remembers_only_about_those_with_work_queued() -> None:
    work = ByPriority(lambda item: (0, item))
    for owner in range(10_000):  # a worker that held many leases over time, each handing over a chunk or two
        work.put(owner)
        work.put(owner)
        assert work.get_nowait() == owner
        assert work.get_nowait() == owner
    assert len(work._next_turn) <= 2 * ByPriority.PRUNE_AT + 1
