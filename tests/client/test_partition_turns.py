"""Partitions granted together start together: a worker handed many partitions with records waiting (a rewind,
a failover, a rebalance, a restart) handles the first records of every one of them before it works off any
one's backlog, so no partition's time lag stands still behind the others'."""

from __future__ import annotations

import threading
import time

from hypothesis import given
from hypothesis import strategies as st

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


BURSTS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12), st.integers(0, 12)), max_size=30).map(
    lambda bursts: [x for owner, puts, takes in bursts for x in [owner] * puts + [None] * takes]
)
"""Histories of bursts: an owner (a lease) hands over some chunks, then the handlers take some."""


@given(BURSTS)
def test_any_history_of_puts_and_takes_keeps_priorities_and_each_owners_order(ops: list[int | None]) -> None:
    """Owners are leases, each of one lane: owners 1 and 3 of the higher priority here."""
    work = ByPriority(lambda item: (item[0], item[1]))
    queued: list[tuple[int, int, int]] = []
    taken: list[tuple[int, int, int]] = []
    for n, owner in enumerate(ops):
        if owner is not None:
            priority = owner % 2
            work.put((priority, owner, n))
            queued.append((priority, owner, n))
        elif queued:
            item = work.get_nowait()
            assert item[0] == max(p for p, _, _ in queued), "a lower lane's work went before a higher one's"
            queued.remove(item)
            taken.append(item)
    for owner in range(5):
        mine = [n for _, o, n in taken if o == owner]
        assert mine == sorted(mine), "an owner's work was taken out of its order"


@given(BURSTS)
def test_in_any_history_no_owner_takes_more_than_its_turns_ahead_of_another(ops: list[int | None]) -> None:
    """Within a priority: while an item waits behind k items of its own owner, each other owner of that priority
    has at most k + 2 items taken (its turns are consecutive from at most one past the latest turn taken), however
    much of a higher priority's work (owner 4's here) is taken meanwhile."""
    top = 4
    work = ByPriority(lambda item: (int(item[0] == top), item[0]))
    queued: list[tuple[int, int]] = []
    waiting: dict[tuple[int, int], tuple[int, dict[int, int]]] = {}  # item: (own queued ahead, others taken)
    for n, owner in enumerate(ops):
        if owner is not None:
            ahead = sum(1 for o, _ in queued if o == owner)
            work.put((owner, n))
            queued.append((owner, n))
            waiting[(owner, n)] = (ahead, {})
        elif queued:
            item = work.get_nowait()
            queued.remove(item)
            ahead, others = waiting.pop(item)
            assert all(count <= ahead + 2 for count in others.values()), (item, ahead, others)
            for key, (_, seen) in waiting.items():
                if key[0] != item[0] and top not in (key[0], item[0]):
                    seen[item[0]] = seen.get(item[0], 0) + 1
