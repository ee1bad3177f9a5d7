"""The producer's fast path: a table of each lane's librdkafka producer, topic and route.

`Producer.produce` is called once a record, millions of times a second, so its common case (headers none or a
list, no `on_delivery`, a lane already routed) is one table lookup and one call into librdkafka's binding. The C
extension's `Lanes` does that with no Python frame of ours (measured: 0.1 us a record against 0.5 us for the
same lookup in Python, where librdkafka's own call costs about 0.75 us); this module's `Lanes` is the same
contract in Python, used when the extension is not built or STREAMPLANE_PURE_PYTHON=1 is set. Anything else
(a lane not routed yet, headers as a dict, `on_delivery`, librdkafka's full queue, a closed producer) goes to
the general path given at construction, with the arguments as they came.

A route switch drops its lane from the table under the producer's lock, and the heartbeat reports what is
in flight under it. A record is therefore either in the old generation's librdkafka queue before the
switch, and reported in flight, or sent on the general path to the new one. The Python version holds that
lock around the lookup and the call; the C version needs no lock, because nothing between its lookup and
confluent-kafka's produce (which does not release the GIL) lets another thread run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from streamplane.native._loaded import USE_NATIVE, _native

POLL_EVERY = 1024
"""Every this many records the fast path serves its producer's delivery reports (poll(0)), as a
confluent-kafka application does: in the producing thread they cost only the reports themselves, where the
producer's background thread has to take the GIL from that thread once a record (measured: 0.80 of
confluent-kafka's rate without it, 0.93 with it, on the mock cluster and on a real broker). The C version
uses the same number."""


class PyLane:
    """Where the fast path sends one lane's records: librdkafka's `produce(topic, value, key)` and `poll`, the
    topic of the lane's active generation, and the route `Producer.produce` returns; `produced` counts them."""

    __slots__ = ("poll", "produce", "produced", "route", "topic")

    def __init__(self, produce: Callable[..., Any], poll: Callable[[float], Any], topic: str, route: Any) -> None:
        self.produce, self.poll, self.topic, self.route, self.produced = produce, poll, topic, route, 0


class PyLanes:
    """{stream: {lane: Lane}}, called as `produce(stream, value, key=None, lane="realtime", headers=None,
    on_delivery=None)`: through the lane's Lane, else `general(...)` with the same arguments."""

    def __init__(self, general: Callable[..., Any], lock: threading.Lock) -> None:
        self._general, self._lock = general, lock
        self._streams: dict[str, dict[str, PyLane]] = {}

    def __call__(
        self,
        stream: str,
        value: Any,
        key: Any = None,
        lane: str = "realtime",
        headers: Any = None,
        on_delivery: Any = None,
    ) -> Any:
        if (headers is None or type(headers) is list) and on_delivery is None:
            with self._lock:
                to = self._streams.get(stream, {}).get(lane)
                if to is not None:
                    try:
                        if headers:
                            to.produce(to.topic, value, key, headers=headers)
                        else:
                            to.produce(to.topic, value, key)
                    except BufferError:
                        to = None  # librdkafka's queue is full: the general path waits for room
                    else:
                        to.produced += 1
                        due = to.produced % POLL_EVERY == 0
            if to is not None:
                if due:
                    to.poll(0)  # outside the lock: a delivery callback takes it
                return to.route
        return self._general(stream, value, key, lane, headers, on_delivery)

    def set(self, stream: str, lane: str, to: PyLane) -> None:
        self._streams.setdefault(stream, {})[lane] = to

    def drop(self, stream: str, lane: str) -> None:
        self._streams.get(stream, {}).pop(lane, None)

    def clear(self) -> None:
        self._streams.clear()


Lane: type[PyLane] = _native.Lane if USE_NATIVE else PyLane
Lanes: type[PyLanes] = _native.Lanes if USE_NATIVE else PyLanes
"""The implementations `Producer` uses: the C extension's (the same contract, held to it by the tests) when it
is built and not turned off."""
