"""One local Kafka-protocol cluster: librdkafka's mock cluster, loaded from the confluent-kafka wheel by ctypes.

Run as its own process (`python -m streamplane.devstack.mockcluster`). It serves the real Kafka protocol on
loopback ports chosen by librdkafka and a small HTTP/JSON control channel for what the Kafka protocol of the
mock cannot do: topic creation, broker down/up, leader moves. It prints one JSON line with its bootstrap
servers and control endpoint once ready, and exits on SIGTERM/SIGINT or when its parent dies.

The mock API has no ABI promise, which is why pyproject pins confluent-kafka.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from streamplane.devstack.cluster_control import JsonHandler
from streamplane.process import block_stop_signals, die_with_parent, wait_for_stop

RD_KAFKA_PRODUCER = 0
RESP_ERR_TOPIC_ALREADY_EXISTS = 36


def _load_librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    libdir = os.path.join(os.path.dirname(confluent_kafka.__file__), os.pardir, "confluent_kafka.libs")
    candidates = sorted(glob.glob(os.path.join(libdir, "librdkafka*.so*")))
    if not candidates:
        raise RuntimeError(f"librdkafka not found beside confluent_kafka in {os.path.abspath(libdir)}")
    lib = ctypes.CDLL(candidates[0])
    c_void_p, c_char_p, c_int, c_int32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (c_void_p, []),
        "rd_kafka_conf_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, ctypes.c_size_t]),
        "rd_kafka_new": (c_void_p, [c_int, c_void_p, c_char_p, ctypes.c_size_t]),
        "rd_kafka_destroy": (None, [c_void_p]),
        "rd_kafka_err2name": (c_char_p, [c_int]),
        "rd_kafka_mock_cluster_new": (c_void_p, [c_void_p, c_int]),
        "rd_kafka_mock_cluster_destroy": (None, [c_void_p]),
        "rd_kafka_mock_cluster_bootstraps": (c_char_p, [c_void_p]),
        "rd_kafka_mock_topic_create": (c_int, [c_void_p, c_char_p, c_int, c_int]),
        "rd_kafka_mock_broker_set_down": (c_int, [c_void_p, c_int32]),
        "rd_kafka_mock_broker_set_up": (c_int, [c_void_p, c_int32]),
        "rd_kafka_mock_partition_set_leader": (c_int, [c_void_p, c_char_p, c_int32, c_int32]),
        "rd_kafka_mock_partition_set_follower": (c_int, [c_void_p, c_char_p, c_int32, c_int32]),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [c_void_p, c_int32]),
        "rd_kafka_mock_set_group_consumer_session_timeout_ms": (None, [c_void_p, c_int]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class MockCluster:
    """A running librdkafka mock cluster of `brokers` brokers (ids 1..brokers)."""

    def __init__(self, brokers: int = 3) -> None:
        if not 1 <= brokers <= 16:
            raise ValueError(f"brokers must be between 1 and 16, not {brokers}")
        self.brokers = brokers
        self._lib = _load_librdkafka()
        self._lock = threading.Lock()
        errstr = ctypes.create_string_buffer(512)
        conf = self._lib.rd_kafka_conf_new()
        self._lib.rd_kafka_conf_set(conf, b"log_level", b"4", errstr, len(errstr))  # hide "no bootstrap.servers"
        self._rk = self._lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))  # takes the conf
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._mc = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self._lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._mc, 0)
        self.bootstrap_servers = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()
        self.topics: dict[str, int] = {}

    def _check(self, err: int, what: str) -> None:
        if err:
            raise ValueError(f"{what}: {self._lib.rd_kafka_err2name(err).decode()}")

    def create_topic(self, name: str, partitions: int) -> bool:
        """Create a topic replicated on every broker (up to 3); False if it existed with that many partitions."""
        with self._lock:
            if name in self.topics:
                if self.topics[name] != partitions:
                    raise ValueError(f"topic {name} exists with {self.topics[name]} partitions, not {partitions}")
                return False
            err = self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions, min(3, self.brokers))
            if err == RESP_ERR_TOPIC_ALREADY_EXISTS:
                raise ValueError(f"topic {name} already exists (created outside the control channel)")
            self._check(err, f"create topic {name}")
            self.topics[name] = partitions
            return True

    def broker_down(self, broker: int) -> None:
        with self._lock:
            self._check(self._lib.rd_kafka_mock_broker_set_down(self._mc, broker), f"broker {broker} down")

    def broker_up(self, broker: int) -> None:
        with self._lock:
            self._check(self._lib.rd_kafka_mock_broker_set_up(self._mc, broker), f"broker {broker} up")

    def set_leader(self, topic: str, partition: int, broker: int) -> None:
        with self._lock:
            self._check(
                self._lib.rd_kafka_mock_partition_set_leader(self._mc, topic.encode(), partition, broker),
                f"leader of {topic}/{partition}",
            )

    def set_follower(self, topic: str, partition: int, broker: int) -> None:
        """The replica a leader names to consumers that give a rack (KIP-392's preferred read replica)."""
        with self._lock:
            self._check(
                self._lib.rd_kafka_mock_partition_set_follower(self._mc, topic.encode(), partition, broker),
                f"follower of {topic}/{partition}",
            )

    def set_consumer_session_timeout(self, ms: int) -> None:
        """The broker-side session timeout of KIP-848 consumer groups (group.protocol=consumer)."""
        if not 1 <= ms <= 3_600_000:
            raise ValueError(f"session timeout must be between 1 ms and 1 h, not {ms}")
        with self._lock:
            self._lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self._mc, ms)

    def close(self) -> None:
        """Destroy the mock cluster before its handle, as librdkafka requires."""
        with self._lock:
            if self._mc:
                self._lib.rd_kafka_mock_cluster_destroy(self._mc)
                self._lib.rd_kafka_destroy(self._rk)
                self._mc = self._rk = None


def _handler(cluster: MockCluster) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
            if self.path == "/info":
                self._reply(
                    200,
                    {
                        "bootstrap_servers": cluster.bootstrap_servers,
                        "brokers": cluster.brokers,
                        "topics": cluster.topics,
                    },
                )
            else:
                self._reply(404, {"error": f"no such resource {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > 65536:
                    raise ValueError("request body too large")
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/topics":
                    created = cluster.create_topic(str(body["name"]), int(body["partitions"]))
                    self._reply(200, {"created": created})
                elif self.path == "/brokers/down":
                    cluster.broker_down(int(body["broker"]))
                    self._reply(200, {})
                elif self.path == "/brokers/up":
                    cluster.broker_up(int(body["broker"]))
                    self._reply(200, {})
                elif self.path == "/groups/consumer-session-timeout":
                    cluster.set_consumer_session_timeout(int(body["ms"]))
                    self._reply(200, {})
                elif self.path == "/leader":
                    cluster.set_leader(str(body["topic"]), int(body["partition"]), int(body["broker"]))
                    self._reply(200, {})
                else:
                    self._reply(404, {"error": f"no such resource {self.path}"})
            except (KeyError, ValueError, TypeError) as err:
                self._reply(400, {"error": str(err) if not isinstance(err, KeyError) else f"missing field {err}"})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one local Kafka-protocol cluster with a control channel.")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--name", default="local")
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    args = parser.parse_args(argv)
    block_stop_signals()  # before librdkafka and the control server start their threads
    if not die_with_parent(args.parent_pid):
        return 1  # parent died before prctl took effect
    cluster = MockCluster(args.brokers)
    server = ThreadingHTTPServer(("127.0.0.1", args.control_port), _handler(cluster))
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    print(
        json.dumps(
            {
                "name": args.name,
                "bootstrap_servers": cluster.bootstrap_servers,
                "control_endpoint": f"127.0.0.1:{server.server_address[1]}",
            }
        ),
        flush=True,
    )
    wait_for_stop(lambda: bool(args.parent_pid) and os.getppid() != args.parent_pid)
    server.shutdown()
    cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
