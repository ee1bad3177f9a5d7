"""The producer's fast path (`streamplane.client.lanes`): the C extension's Lanes and the Python one hold the
same contract. A routed lane's record, with no headers or a list of them, goes straight to its librdkafka
producer; everything else reaches the general path with the arguments it came with."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streamplane.client import lanes
from streamplane.native._loaded import _native

IMPLEMENTATIONS = {"python": (lanes.PyLanes, lanes.PyLane)}
if _native is not None:
    IMPLEMENTATIONS["native"] = (_native.Lanes, _native.Lane)


class Kafka:
    """Stands in for librdkafka's produce(topic, value, key); raises what it is told to."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.raises: Exception | None = None
        self.polls: list[float] = []

    def produce(self, topic: str, value: Any, key: Any, **headers: Any) -> None:
        if self.raises is not None:
            raise self.raises
        self.sent.append((topic, value, key, *headers.values()))

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def table(request: pytest.FixtureRequest) -> tuple[Any, Any, Kafka, list]:
    make_lanes, make_lane = IMPLEMENTATIONS[request.param]
    general_calls: list = []

    def general(
        stream: str, value: Any, key: Any = None, lane: str = "realtime", headers: Any = None, on_delivery: Any = None
    ) -> str:
        general_calls.append((stream, value, key, lane, headers, on_delivery))
        return "general"

    kafka = Kafka()
    table = make_lanes(general, threading.Lock())
    lane = make_lane(kafka.produce, kafka.poll, "sp.logs.realtime.g1", "route-g1")
    table.set("logs", "realtime", lane)
    return table, lane, kafka, general_calls


def test_a_routed_lanes_plain_records_go_straight_to_its_producer_and_are_counted(table) -> None:
    produce, lane, kafka, general_calls = table
    assert produce("logs", b"a") == "route-g1"
    assert produce("logs", b"b", b"k") == "route-g1"
    assert produce("logs", b"c", key=b"k2", lane="realtime") == "route-g1"
    assert produce("logs", b"d", None, "realtime", None, None) == "route-g1"
    assert kafka.sent == [
        ("sp.logs.realtime.g1", b"a", None),
        ("sp.logs.realtime.g1", b"b", b"k"),
        ("sp.logs.realtime.g1", b"c", b"k2"),
        ("sp.logs.realtime.g1", b"d", None),
    ]
    assert lane.produced == 4 and general_calls == []


def test_a_routed_lanes_records_with_a_list_of_headers_go_straight_to_its_producer_with_them(table) -> None:
    """Observability records mostly carry headers: they take the fast path too (an empty list is none)."""
    produce, lane, kafka, general_calls = table
    assert produce("logs", b"a", b"k", headers=[("service", b"api")]) == "route-g1"
    assert produce("logs", b"b", None, "realtime", [("a", None), ("b", b"2")]) == "route-g1"
    assert produce("logs", b"c", headers=[]) == "route-g1"
    assert kafka.sent == [
        ("sp.logs.realtime.g1", b"a", b"k", [("service", b"api")]),
        ("sp.logs.realtime.g1", b"b", None, [("a", None), ("b", b"2")]),
        ("sp.logs.realtime.g1", b"c", None),
    ]
    assert lane.produced == 3 and general_calls == []


def test_everything_else_takes_the_general_path_with_its_arguments(table) -> None:
    produce, lane, kafka, general_calls = table

    def callback(err: Any, msg: Any) -> None:
        pass

    assert produce("logs", b"h", headers={"a": b"1"}) == "general"
    assert produce("logs", b"cb", on_delivery=callback) == "general"
    assert produce("logs", b"other", lane="dlq") == "general"
    assert produce("metrics", b"unrouted") == "general"
    assert general_calls == [
        ("logs", b"h", None, "realtime", {"a": b"1"}, None),
        ("logs", b"cb", None, "realtime", None, callback),
        ("logs", b"other", None, "dlq", None, None),
        ("metrics", b"unrouted", None, "realtime", None, None),
    ]
    assert kafka.sent == [] and lane.produced == 0
    with pytest.raises(TypeError, match="colour"):
        produce("logs", b"x", colour="red")  # the general path's own error names the argument


def test_a_full_queue_takes_the_general_path_and_other_errors_reach_the_caller(table) -> None:
    produce, lane, kafka, general_calls = table
    kafka.raises = BufferError("Local: Queue full")
    assert produce("logs", b"a", b"k") == "general"  # which waits for room
    assert general_calls == [("logs", b"a", b"k", "realtime", None, None)]
    kafka.raises = TypeError("expected bytes")
    with pytest.raises(TypeError, match="expected bytes"):
        produce("logs", 42)
    assert lane.produced == 0


def test_a_dropped_lane_and_a_cleared_table_take_the_general_path(table) -> None:
    produce, lane, kafka, general_calls = table
    produce.drop("logs", "realtime")
    produce.drop("logs", "never-set")  # nothing to drop: no error
    assert produce("logs", b"a") == "general"
    produce.set("logs", "realtime", lane)
    assert produce("logs", b"b") == "route-g1"
    produce.clear()
    assert produce("logs", b"c") == "general"
    assert [c[1] for c in general_calls] == [b"a", b"c"] and kafka.sent == [("sp.logs.realtime.g1", b"b", None)]


def test_the_fast_path_serves_delivery_reports_every_so_many_records(table) -> None:
    """As a confluent-kafka application polls now and then: the producing thread serves its own reports."""
    produce, lane, kafka, _ = table
    for i in range(lanes.POLL_EVERY - 1):
        produce("logs", b"%d" % i)
    assert kafka.polls == []
    produce("logs", b"last")
    assert kafka.polls == [0]
    for i in range(lanes.POLL_EVERY):
        produce("logs", b"%d" % i)
    assert kafka.polls == [0, 0] and lane.produced == 2 * lanes.POLL_EVERY


@pytest.mark.skipif(_native is None, reason="streamplane._native is not built")
def test_the_c_types_made_without_init_refuse_work_instead_of_crashing() -> None:
    assert _native is not None
    bare = _native.Lanes.__new__(_native.Lanes)
    for call in (lambda: bare("logs", b"x"), lambda: bare.drop("logs", "realtime"), bare.clear):
        with pytest.raises(TypeError):
            call()
    table = _native.Lanes(lambda *a: None, threading.Lock())
    with pytest.raises(TypeError, match="not initialized"):
        table.set("logs", "realtime", _native.Lane.__new__(_native.Lane))
