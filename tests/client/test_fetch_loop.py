"""The worker's fetch loop against a local cluster: one connection per broker and one Fetch per broker for
all of its partitions, a bomb in one partition of a shared response, protocol version negotiation; and the
pure parts beside it: fetch sessions (KIP-227) and SCRAM (RFC 7677's test vector)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as KafkaProducer

from streamplane.client.consumer.fetch_loop import FetchLoop, Read, _Link
from streamplane.client.flow import Budget
from streamplane.client.kafka import ConnectionConfig, KafkaConnection, codec, fetch
from streamplane.client.kafka.sasl import Scram
from streamplane.client.records import Fetched
from streamplane.devstack.mockcluster import MockCluster
from streamplane.errors import DecodeLimitExceeded, StreamplaneError, UnavailableError
from tests.helpers import wait_until


class Collect:
    """A receiver that keeps what it is given, and the loop's request count when it came."""

    def __init__(self, loop: FetchLoop) -> None:
        self.loop = loop
        self.values: list[bytes] = []
        self.skipped: list = []
        self.at_request: list[int] = []
        self.errors: list[StreamplaneError] = []

    def fetchable(self) -> bool:
        return True

    def received(self, fetched: Fetched) -> tuple[int, int]:
        if fetched.batch is not None and fetched.batch.count:
            self.values += [r.value for r in fetched.batch.records()]
            self.at_request.append(self.loop.requests)
        if fetched.skipped:
            self.skipped += fetched.skipped
            self.at_request.append(self.loop.requests)
        return 0, 0

    def failed(self, error: StreamplaneError) -> None:
        self.errors.append(error)


@pytest.fixture
def one_broker() -> Iterator[MockCluster]:
    cluster = MockCluster(1)
    yield cluster
    cluster.close()


def make_loop(*, start: bool = True, **kwargs: object) -> FetchLoop:
    loop = FetchLoop(budget=Budget(100_000, 1 << 30), max_decompressed=4 << 20, **kwargs)  # type: ignore[arg-type]
    if start:
        loop.start()
    return loop


def test_a_bomb_in_one_partition_never_holds_up_the_others_in_the_same_response(one_broker: MockCluster) -> None:
    one_broker.create_topic("mixed", 4)
    raw = KafkaProducer(
        {"bootstrap.servers": one_broker.bootstrap_servers, "compression.type": "zstd", "message.max.bytes": 64 << 20}
    )
    raw.produce("mixed", b"\0" * (32 << 20), partition=0)  # 32 MiB of zeros: a few KB as zstd
    for p in (1, 2, 3):
        for i in range(50):
            raw.produce("mixed", b"p%d-%d" % (p, i), partition=p)
    assert raw.flush(10) == 0
    loop = make_loop(start=False)
    try:
        got = [Collect(loop) for _ in range(4)]
        for p, receiver in enumerate(got):
            loop.add(f"mixed/{p}", one_broker.bootstrap_servers, "mixed", p, -1, receiver)
        loop.start()  # all four join before the first round, so one Fetch carries them all
        wait_until(lambda: all(len(r.values) == 50 for r in got[1:]) and got[0].skipped, timeout=10)
        assert isinstance(got[0].skipped[0].error, DecodeLimitExceeded)
        assert got[0].values == []
        first = {r.at_request[0] for r in got}
        assert len(first) == 1, "the bomb and the good partitions came in one Fetch response"
        assert loop.connections == 1
    finally:
        loop.close()


class Holding(Collect):
    """A receiver whose records stay in flight (counted against the budget) until the test lets them go."""

    def received(self, fetched: Fetched) -> tuple[int, int]:
        super().received(fetched)
        return 0, fetched.batch.count if fetched.batch is not None else 0


def _numbered(cluster: MockCluster, topic: str, partitions: int, records: int) -> None:
    """A topic whose partition p holds records b"p<p>-<i>", i from 0 to `records` - 1."""
    cluster.create_topic(topic, partitions)
    raw = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers})
    for p in range(partitions):
        for i in range(records):
            raw.produce(topic, b"p%d-%d" % (p, i), partition=p)
    assert raw.flush(10) == 0


def test_what_is_read_while_the_budget_is_full_waits_undecoded_and_is_never_read_twice(
    one_broker: MockCluster,
) -> None:
    _numbered(one_broker, "full", 4, 50)
    budget = Budget(60, 1 << 30)  # room for two partitions' records in flight, not four
    loop = FetchLoop(budget=budget, max_decompressed=4 << 20)
    got = [Holding(loop) for _ in range(4)]
    for p, receiver in enumerate(got):
        # added before the loop starts, so that its first Fetch asks for all four at once: one response then
        # holds more than the budget allows (added one by one, two responses of one partition each could fill
        # the budget with nothing left over to keep waiting)
        loop.add(f"full/{p}", one_broker.bootstrap_servers, "full", p, -1, receiver)
    loop.start()
    try:
        wait_until(lambda: budget.records >= 60)
        wait_until(lambda: bool(loop._parked), what=lambda: "nothing read was kept waiting")
        parked = {p.key for p in loop._parked}
        assert all(not got[int(key.split("/")[1])].values for key in parked), "the budget stops decoding"
        requests = loop.requests  # nothing is sent while the budget is full
        budget.release(budget.records, 0)  # the handlers end what they hold
        wait_until(lambda: all(len(r.values) == 50 for r in got) or budget.records >= 60, timeout=10)
        budget.release(budget.records, 0)
        wait_until(lambda: all(len(r.values) == 50 for r in got), timeout=10)
        assert [r.values for r in got] == [[b"p%d-%d" % (p, i) for i in range(50)] for p in range(4)], "once each"
        late = [got[int(key.split("/")[1])] for key in parked]
        assert all(r.at_request[0] == requests for r in late), "decoded from the response read earlier"
    finally:
        loop.close()


def test_partitions_added_together_to_a_running_loop_are_all_asked_in_its_next_fetch(one_broker: MockCluster) -> None:
    """A worker granted many leases at once: the running loop starts reading them all in one step, so one
    Fetch asks for every one and brings all their first records (added one by one, the loop could send a Fetch
    for the first few and leave the rest waiting for its response and its decoding)."""
    _numbered(one_broker, "together", 24, 5)
    loop = make_loop(fetch_ahead=False)
    try:
        got = [Collect(loop) for _ in range(24)]
        loop.add_many(
            [Read(f"together/{p}", one_broker.bootstrap_servers, "together", p, -1, r) for p, r in enumerate(got)]
        )
        wait_until(lambda: all(len(r.values) == 5 for r in got), timeout=10)
        assert len({r.at_request[0] for r in got}) == 1, "every partition's first records came in one Fetch"
    finally:
        loop.close()


def test_one_connection_per_broker_and_one_fetch_per_broker_whatever_the_partition_count(local_cluster) -> None:
    bootstrap, control = local_cluster
    control.create_topic("wide", 256)
    loop = make_loop(max_wait_ms=200)
    try:
        receivers = [Collect(loop) for _ in range(256)]
        for p, r in enumerate(receivers):
            loop.add(f"wide/{p}", bootstrap, "wide", p, -1, r)
        wait_until(lambda: loop.connections == 3, timeout=10)
        before = loop.requests
        threading.Event().wait(1.0)  # idle: each broker holds a Fetch open up to max_wait_ms
        per_second = loop.requests - before
        assert loop.connections == 3, "one connection per broker of the cluster"
        assert per_second <= 3 * (1000 / 200) + 3, f"{per_second} Fetch requests in 1 s for 256 idle partitions"
        loop.remove("wide/0")
        wait_until(lambda: loop.connections == 3)
    finally:
        loop.close()


def test_versions_are_negotiated_within_what_we_speak(one_broker: MockCluster) -> None:
    with KafkaConnection.connect_any(one_broker.bootstrap_servers) as conn:
        # the mock knows ApiVersions up to v2: our v3 is refused and we fall back, as the protocol prescribes
        assert conn.versions[18][1] < 3
        assert conn.version(fetch.KEY, fetch.VERSIONS) == 11  # it speaks Fetch up to 16; we stop at 11
        with pytest.raises(codec.KafkaProtocolError, match="Fetch versions"):
            conn.version(fetch.KEY, (40, 41))


def test_a_response_is_read_as_it_comes_and_finished_by_receive(one_broker: MockCluster) -> None:
    """`receive_some` reads what has come of the response in flight and never waits: nothing yet (a long poll
    on an empty partition) is False at once; once the broker answers, the response is whole and `receive`
    returns it without reading more. A broker gone meanwhile is one error, raised again by `receive`."""
    one_broker.create_topic("some", 1)
    with KafkaConnection.connect_any(one_broker.bootstrap_servers) as conn:
        v = conn.version(fetch.KEY, fetch.VERSIONS)
        assert not conn.receive_some(), "nothing in flight"
        conn.send(fetch.KEY, v, fetch.encode(v, {("some", 0): pf(0)}, max_wait_ms=1_500))
        began = time.monotonic()
        assert not conn.receive_some() and not conn.received
        assert time.monotonic() - began < 0.5, "it waited for the long poll"
        wait_until(conn.receive_some, timeout=20)  # the long poll's end
        assert conn.received and time.monotonic() - began >= 1.0
        (got,) = fetch.decode(v, conn.receive()).partitions
        assert (got.topic, got.partition, got.error_code, len(got.records)) == ("some", 0, 0, 0)
        assert not conn.received, "the next response starts from nothing"

        conn.send(fetch.KEY, v, fetch.encode(v, {("some", 0): pf(1)}, max_wait_ms=30_000))
        one_broker.close()  # the broker is gone, its connections with it
        with pytest.raises(UnavailableError) as first:
            wait_until(conn.receive_some, timeout=20)
        with pytest.raises(UnavailableError) as again:
            conn.receive()
        assert again.value is first.value


def test_sasl_on_a_listener_without_it_is_one_clear_error(one_broker: MockCluster) -> None:
    config = ConnectionConfig.from_settings(
        {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u"}
    )
    with pytest.raises(codec.KafkaAuthenticationError, match="does not offer SASL"):
        KafkaConnection.connect_any(one_broker.bootstrap_servers, config)
    one_broker.create_topic("auth", 1)
    loop = make_loop(default_config=config)
    try:
        r = Collect(loop)
        loop.add("auth/0", one_broker.bootstrap_servers, "auth", 0, -1, r)
        wait_until(lambda: r.errors, timeout=10)
        assert "does not offer SASL" in r.errors[0].message
    finally:
        loop.close()


def pf(offset: int) -> fetch.PartitionFetch:
    return fetch.PartitionFetch(offset, 1 << 20)


def test_a_fetch_session_lists_only_what_changed() -> None:
    s = fetch.FetchSession()
    wanted = {("t", 0): pf(10), ("t", 1): pf(20)}
    sid, epoch, send, forget = s.next_request(wanted)
    assert (sid, epoch, send, forget) == (0, 0, wanted, [])  # a full request opens the session
    s.handled(fetch.FetchResponse(0, 77, []), send, forget)
    sid, epoch, send, forget = s.next_request(wanted)
    assert (sid, epoch, send, forget) == (77, 1, {}, [])  # steady state: nothing listed
    s.handled(fetch.FetchResponse(0, 77, []), send, forget)
    moved = {("t", 0): pf(15), ("t", 2): pf(0)}
    sid, epoch, send, forget = s.next_request(moved)
    assert epoch == 2 and send == {("t", 0): pf(15), ("t", 2): pf(0)} and forget == [("t", 1)]
    s.handled(fetch.FetchResponse(codec.ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, []), send, forget)
    assert s.next_request(moved) == (0, 0, moved, [])  # the broker lost it: start over with a full fetch


def test_a_broker_without_sessions_gets_full_fetches() -> None:
    s = fetch.FetchSession()
    wanted = {("t", 0): pf(1)}
    _, _, send, forget = s.next_request(wanted)
    s.handled(fetch.FetchResponse(0, 0, []), send, forget)  # session id 0: the broker keeps none
    assert s.next_request(wanted) == (0, 0, wanted, [])


def test_scram_sha_256_matches_rfc_7677() -> None:
    client = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.step(None) == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert client.step(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert client.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None and client.done
    forged = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    forged.step(None)
    forged.step(server_first)
    with pytest.raises(codec.KafkaAuthenticationError, match="signature"):
        forged.step(b"v=AAAA")


def truncation_under_our_position(bootstrap: str, topic: str) -> None:
    """Shared by the mock and the real broker: a partition whose new leader's log ends before where we had
    read (simulated: we believe we read 15 records past its end) is read on from where it diverged, once."""
    raw = KafkaProducer({"bootstrap.servers": bootstrap})
    for i in range(10):
        raw.produce(topic, b"a%d" % i, partition=0)
    assert raw.flush(10) == 0
    loop = FetchLoop(budget=Budget(100_000, 1 << 30), max_decompressed=4 << 20, max_wait_ms=100)
    loop.start()
    try:
        got = Collect(loop)
        loop.add("t/0", bootstrap, topic, 0, -1, got)
        wait_until(lambda: len(got.values) == 10)

        def leader_changed_after_we_read_past_its_log() -> None:
            p = loop._parts["t/0"]
            p.position += 15
            p.validate = True

        loop._do(leader_changed_after_we_read_past_its_log)
        wait_until(lambda: loop.truncations == 1)
        for i in range(5):
            raw.produce(topic, b"b%d" % i, partition=0)
        assert raw.flush(10) == 0
        wait_until(lambda: len(got.values) == 15)
        threading.Event().wait(0.3)
        assert got.values == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(5)], (
            "read on from the divergence: nothing skipped, nothing read twice"
        )
    finally:
        loop.close()


def test_a_log_truncated_under_our_position_is_detected_and_read_on_from_the_divergence(
    one_broker: MockCluster,
) -> None:
    one_broker.create_topic("trunc", 1)
    truncation_under_our_position(one_broker.bootstrap_servers, "trunc")


def test_after_a_leader_move_the_new_leader_is_asked_about_truncation_and_reading_goes_on(local_cluster) -> None:
    bootstrap, control = local_cluster
    control.create_topic("moving", 1)
    raw = KafkaProducer({"bootstrap.servers": bootstrap})
    for i in range(10):
        raw.produce("moving", b"m%d" % i, partition=0)
    assert raw.flush(10) == 0
    loop = make_loop(max_wait_ms=100)
    try:
        got = Collect(loop)
        loop.add("moving/0", bootstrap, "moving", 0, -1, got)
        wait_until(lambda: len(got.values) == 10)
        leader = loop._parts["moving/0"].node
        control.set_leader("moving", 0, 1 + leader % 3)
        for i in range(10, 20):
            raw.produce("moving", b"m%d" % i, partition=0)
        assert raw.flush(10) == 0
        wait_until(lambda: len(got.values) == 20, timeout=15)
        assert loop.epoch_checks >= 1 and loop.truncations == 0
        assert got.values == [b"m%d" % i for i in range(20)]
    finally:
        loop.close()


def test_with_a_rack_the_loop_reads_from_the_replica_the_leader_names() -> None:
    cluster = MockCluster(3)
    try:
        cluster.create_topic("racked", 1)
        cluster.set_leader("racked", 0, 1)
        cluster.set_follower("racked", 0, 2)  # the mock names it to clients that give a rack (KIP-392)
        raw = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(20):
            raw.produce("racked", b"r%d" % i, partition=0)
        assert raw.flush(10) == 0
        loop = make_loop(default_config=ConnectionConfig(rack="myrack"), max_wait_ms=100)
        try:
            got = Collect(loop)
            loop.add("racked/0", cluster.bootstrap_servers, "racked", 0, -1, got)
            wait_until(lambda: len(got.values) == 20)
            assert loop._parts["racked/0"].node == 2, "fetching moved to the follower the leader named"
            assert got.values == [b"r%d" % i for i in range(20)]
        finally:
            loop.close()
    finally:
        cluster.close()


def test_a_partition_added_after_a_metadata_request_is_routed_in_the_next_round(one_broker: MockCluster) -> None:
    """Grants arrive one by one: the pause between metadata requests (for leaders that were lost) must not hold
    a newcomer back, or it misses the Fetch sent next and waits out a long poll (MAX_WAIT_MS) before its first read."""
    one_broker.create_topic("burst", 2)
    loop = make_loop(start=False)
    try:
        got = [Collect(loop) for _ in range(2)]
        loop.add("burst/0", one_broker.bootstrap_servers, "burst", 0, -1, got[0])
        loop._round()  # routes partition 0 (one metadata request) and sends its first Fetch
        loop.add("burst/1", one_broker.bootstrap_servers, "burst", 1, -1, got[1])
        loop._round()
        assert loop._parts["burst/1"].node >= 0, "partition 1 waited for the pause between metadata requests"
    finally:
        loop.close()


def test_a_partition_read_again_from_another_position_asks_no_metadata_first(one_broker: MockCluster) -> None:
    """A rewind grants every partition of a worker again at a new epoch: each is read again from its new position
    through the broker it was read from, without a Metadata request (and a bootstrap connection, while the
    broker's connection waits on its long poll) in front of the first read."""
    one_broker.create_topic("again", 1)
    raw = KafkaProducer({"bootstrap.servers": one_broker.bootstrap_servers})
    for i in range(5):
        raw.produce("again", b"v%d" % i, partition=0)
    assert raw.flush(10) == 0
    loop = make_loop()
    try:
        first = Collect(loop)
        loop.add("again/0", one_broker.bootstrap_servers, "again", 0, -1, first)
        wait_until(lambda: len(first.values) == 5, timeout=10)
        asked: list[list[str]] = []
        metadata = loop._metadata

        def counted(cluster, topics):  # type: ignore[no-untyped-def]
            asked.append(topics)
            return metadata(cluster, topics)

        loop._metadata = counted  # type: ignore[method-assign]
        second = Collect(loop)
        loop.add("again/0", one_broker.bootstrap_servers, "again", 0, 2, second)
        wait_until(lambda: len(second.values) == 3, timeout=10)
        assert second.values == [b"v2", b"v3", b"v4"], "read again from the new position"
        assert asked == [], "the broker it was read from was asked for its metadata again"
    finally:
        loop.close()


def _busy(cluster: MockCluster, topic: str, partitions: int, records: int, **settings: object) -> None:
    """Enough uncompressed bytes in every partition for one response to go to the decode pool (with a small
    `batch.size` in `settings`, batches of a few records: a partition is read over many responses)."""
    cluster.create_topic(topic, partitions)
    raw = KafkaProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, **settings})
    for p in range(partitions):
        for i in range(records):
            raw.produce(topic, b"p%d-%05d-" % (p, i) + b"x" * 1000, partition=p)
    assert raw.flush(10) == 0


def _read_whole_in_order(loop: FetchLoop, cluster: MockCluster, topic: str, partitions: int, records: int) -> None:
    """The loop reads every partition `_busy` wrote: each gets every record, once, in order."""
    got = [Collect(loop) for _ in range(partitions)]
    for p, receiver in enumerate(got):
        loop.add(f"{topic}/{p}", cluster.bootstrap_servers, topic, p, -1, receiver)
    loop.start()
    wait_until(lambda: all(len(r.values) == records for r in got), timeout=20)
    for p, receiver in enumerate(got):
        ids = [b"-".join(v.split(b"-", 2)[:2]) for v in receiver.values]
        assert ids == [b"p%d-%05d" % (p, i) for i in range(records)], "every record once, in order"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_busy_response_is_decoded_on_the_pool_and_each_partition_handed_over_whole_in_order(
    one_broker: MockCluster, threads: int
) -> None:
    """Decoding is most of a busy worker's work: with threads, a response's partitions are decoded at once;
    each partition still gets every record, once, in order. With one, nothing goes to a pool."""
    _busy(one_broker, "busy", 6, 400)
    loop = make_loop(start=False, decode_threads=threads)
    try:
        _read_whole_in_order(loop, one_broker, "busy", 6, 400)
        assert (loop.pooled > 0) == (threads > 1)
        assert threading.active_count() < 40, "a pool per worker, not a thread per partition"
    finally:
        loop.close()


def test_a_response_of_more_partitions_than_worst_cases_fit_in_the_budget_is_decoded_on_the_pool_whole(
    one_broker: MockCluster,
) -> None:
    """Room for a partition's worst case (max_decompressed) is taken by a decode thread when it starts on that
    partition, and given back down to what it decoded: a response of 16 partitions under a budget that holds 4
    worst cases is decoded on the pool, none parked to be decoded one by one on the loop's thread."""
    _busy(one_broker, "wide", 16, 400)
    budget = Budget(100_000, 20 << 20)  # 4 worst cases of 4 MiB (and their fetched bytes)
    loop = FetchLoop(budget=budget, max_decompressed=4 << 20, decode_threads=2)
    try:
        _read_whole_in_order(loop, one_broker, "wide", 16, 400)
        assert loop.pooled > 0 and loop.parks == 0
        assert budget.bytes == 0 and budget.records == 0, "every reservation given back"
    finally:
        loop.close()


def test_a_partition_whose_decode_fails_on_the_pool_holds_back_none_of_the_others(one_broker: MockCluster) -> None:
    """A bug decoding one partition fails that round (logged, the loop goes on); the response's other
    partitions are still handed over and every reservation of the budget is given back."""
    _busy(one_broker, "shaky", 4, 300)
    loop = make_loop(start=False, decode_threads=2)
    decode = loop._decode

    def shaky(p, got, position):  # type: ignore[no-untyped-def]
        if p.partition == 0:
            raise RuntimeError("a decoder bug")
        return decode(p, got, position)

    loop._decode = shaky  # type: ignore[method-assign]
    try:
        got = [Collect(loop) for _ in range(4)]
        for p, receiver in enumerate(got):
            loop.add(f"shaky/{p}", one_broker.bootstrap_servers, "shaky", p, -1, receiver)
        loop.start()
        wait_until(lambda: all(len(r.values) == 300 for r in got[1:]), timeout=20)
        assert loop.pooled > 0 and got[0].values == []
        loop._decode = decode  # type: ignore[method-assign]
        wait_until(lambda: len(got[0].values) == 300, timeout=20)  # read again from where it was
        assert loop.budget.bytes == 0 and loop.budget.records == 0
    finally:
        loop.close()


def test_a_dead_connection_met_while_asking_for_metadata_is_dropped_and_the_next_one_asked() -> None:
    """A broker died while the loop still held a connection to it (the cluster shutting down, a broker lost):
    dropping that connection while walking the connections must not crash the round (it did, with 'dictionary
    changed size during iteration', every round until the loop gave up)."""
    cluster = MockCluster(2)
    try:
        cluster.create_topic("two", 2)
        cluster.set_leader("two", 0, 1)
        cluster.set_leader("two", 1, 2)
        loop = make_loop(start=False)
        try:
            c = loop._cluster(cluster.bootstrap_servers)
            with KafkaConnection.connect_any(cluster.bootstrap_servers) as boot:
                brokers = boot.metadata(["two"]).brokers
            for node in sorted(brokers):  # broker 1's link first: it is the one walked over first
                link = loop._links[(cluster.bootstrap_servers, node)] = _Link(
                    cluster.bootstrap_servers, node, brokers[node].host, brokers[node].port
                )
                assert loop._connect(link)
            cluster.broker_down(1)
            md = loop._metadata(c, ["two"])
            assert {m.partition for m in md.topics["two"]} == {0, 1}
            assert [node for _, node in loop._links] == [2], "the dead broker's connection was dropped"
        finally:
            loop.close()
    finally:
        cluster.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_the_next_fetch_is_with_the_broker_while_a_response_is_decoded(one_broker: MockCluster, ahead: bool) -> None:
    """A busy partition read over many responses: each response's records are handed over once the Fetch after
    it is sent (asked from where its whole batches end), so the broker reads and sends while the loop decodes.
    Every record still comes once, in order; without fetching ahead, the next Fetch waits for the decoding."""
    _busy(one_broker, "ahead", 2, 300, **{"batch.size": 16 << 10})
    loop = make_loop(start=False, partition_max_bytes=32 << 10, fetch_ahead=ahead)
    try:
        got = [Collect(loop) for _ in range(2)]
        for p, receiver in enumerate(got):
            loop.add(f"ahead/{p}", one_broker.bootstrap_servers, "ahead", p, -1, receiver)
        loop.start()
        wait_until(lambda: all(len(r.values) == 300 for r in got), timeout=20)
        for p, receiver in enumerate(got):
            ids = [b"-".join(v.split(b"-", 2)[:2]) for v in receiver.values]
            assert ids == [b"p%d-%05d" % (p, i) for i in range(300)], "every record once, in order"
        handed = sorted(n for r in got for n in r.at_request)
        assert len(handed) >= 16, "read over many responses"
        # The producer's batches differ by partition under load, so one partition may need more responses than
        # the other: count the Fetches that brought records, not the handovers.
        bringing = sorted(set(handed))
        first = 2 if ahead else 1  # with fetching ahead, a response is handed over once the Fetch after it went
        assert bringing == list(range(first, bringing[-1] + 1)), (
            "no Fetch wasted: each, up to the last record, asked from where the decoding ended and brought records"
        )
        if ahead:
            assert loop.sent_ahead >= len(bringing) - 1
            assert all(n > 1 for n in handed), "the first response was handed over after the second Fetch went"
        else:
            assert loop.sent_ahead == 0 and handed[0] == 1
    finally:
        loop.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_while_the_pool_decodes_a_response_the_next_one_is_read_as_it_comes(
    one_broker: MockCluster, ahead: bool
) -> None:
    """A broker sends a response only as fast as it is read, so a response read after the decoding of the one
    before would also arrive after it. While the pool decodes (held here until the test lets it go), the
    response to the Fetch sent ahead is read whole; every record still comes once, in order. Without fetching
    ahead, nothing is in flight to read meanwhile."""
    _busy(one_broker, "early", 4, 400)
    loop = make_loop(start=False, decode_threads=2, partition_max_bytes=128 << 10, fetch_ahead=ahead)
    go = threading.Event()
    decode = loop._decode

    def held(p, got, position):  # type: ignore[no-untyped-def]
        go.wait(30)
        return decode(p, got, position)

    loop._decode = held  # type: ignore[method-assign]
    got = [Collect(loop) for _ in range(4)]
    try:
        for p, receiver in enumerate(got):
            loop.add(f"early/{p}", one_broker.bootstrap_servers, "early", p, -1, receiver)
        loop.start()
        wait_until(lambda: loop.pooled >= 1, timeout=20)
        if ahead:
            wait_until(lambda: loop.read_early >= 1, timeout=20)  # read whole while the decoding is held
            assert loop.sent_ahead >= 1
        assert not any(r.values for r in got), "the decoding is still held"
        go.set()
        wait_until(lambda: all(len(r.values) == 400 for r in got), timeout=20)
        for p, receiver in enumerate(got):
            ids = [b"-".join(v.split(b"-", 2)[:2]) for v in receiver.values]
            assert ids == [b"p%d-%05d" % (p, i) for i in range(400)], "every record once, in order"
        assert (loop.read_early > 0) == ahead
        assert loop.budget.bytes == 0 and loop.budget.records == 0
    finally:
        go.set()
        loop.close()


@pytest.mark.parametrize("engine", ["mock", "kafka"])
def test_a_partition_whose_decoding_ends_before_its_whole_batches_is_asked_again_from_where_it_ended(
    request: pytest.FixtureRequest, engine: str
) -> None:
    """The Fetch sent ahead asks from where the response's whole batches end; a bad batch among them ends the
    decoding earlier. What that Fetch brings for the partition is then not handed over (it was read from
    another position), and the partition is asked again from where it is: the bad batch is skipped once and
    every good record comes once, in order. (A real broker answers with all three batches at once; the local
    engine with one a response, so its decoding always ends where their headers say.)"""
    if engine == "mock":
        bootstrap = request.getfixturevalue("one_broker").bootstrap_servers
        request.getfixturevalue("one_broker").create_topic("bad", 1)
    else:
        from confluent_kafka.admin import AdminClient, NewTopic

        bootstrap = request.getfixturevalue("kafka_bootstrap")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("bad", 1, 1)]).values():
            f.result(30)
    raw = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "message.max.bytes": 64 << 20})
    for i in range(20):
        raw.produce("bad", b"a%d" % i, partition=0)
    assert raw.flush(10) == 0
    raw.produce("bad", b"\0" * (32 << 20), partition=0)  # past the decoder's limit: a bad batch
    assert raw.flush(10) == 0
    for i in range(20):
        raw.produce("bad", b"b%d" % i, partition=0)
    assert raw.flush(10) == 0
    loop = make_loop(start=False)
    try:
        got = Collect(loop)
        loop.add("bad/0", bootstrap, "bad", 0, -1, got)
        loop.start()
        wait_until(lambda: len(got.values) == 40, timeout=20)
        assert got.values == [b"a%d" % i for i in range(20)] + [b"b%d" % i for i in range(20)]
        assert [(s.first_offset, s.next_offset) for s in got.skipped] == [(20, 21)], "skipped once"
        assert loop.sent_ahead >= 1
    finally:
        loop.close()


def test_a_partition_granted_while_its_broker_is_read_ahead_is_read_without_waiting_for_the_others(
    one_broker: MockCluster,
) -> None:
    """A busy partition is read response after response, each next Fetch sent ahead; a partition granted
    meanwhile on the same broker has its position looked up and is read within a few rounds, not after the busy
    one is done."""
    _busy(one_broker, "late", 2, 300, **{"batch.size": 16 << 10})
    loop = make_loop(start=False, partition_max_bytes=16 << 10)  # its rounds are run here, one at a time
    try:
        got = [Collect(loop) for _ in range(2)]
        loop.add("late/0", one_broker.bootstrap_servers, "late", 0, -1, got[0])
        while len(got[0].at_request) < 3:
            loop._round()
        assert loop.sent_ahead > 0
        loop.add("late/1", one_broker.bootstrap_servers, "late", 1, -1, got[1])
        for _ in range(6):
            loop._round()
        assert got[1].values, "the newcomer waited while the busy partition was read ahead"
        assert len(got[0].values) < 300
    finally:
        loop.close()


def test_while_grants_are_on_their_way_long_polls_are_short_then_long_again(one_broker: MockCluster) -> None:
    """Told that grants are coming (a rewind of the group is being applied), the loop asks its brokers with short
    long polls, so that a partition granted meanwhile is read at once rather than after the long poll in flight
    (a broker answers one request of a connection at a time); told 0, or once its time is up, an idle loop
    sends a request a long poll again, not dozens a second."""
    one_broker.create_topic("quiet", 1)
    one_broker.create_topic("granted", 1)
    raw = KafkaProducer({"bootstrap.servers": one_broker.bootstrap_servers})
    for i in range(3):
        raw.produce("granted", b"v%d" % i, partition=0)
    assert raw.flush(10) == 0
    loop = make_loop(max_wait_ms=1000)

    def rate(seconds: float) -> float:
        before = loop.requests
        threading.Event().wait(seconds)  # a rate needs a window
        return (loop.requests - before) / seconds

    try:
        loop.add("quiet/0", one_broker.bootstrap_servers, "quiet", 0, -1, Collect(loop))
        wait_until(lambda: loop.requests >= 2, timeout=10)
        assert rate(1.0) <= 2, "idle: a Fetch every long poll (1 s)"
        loop.hurry(30)
        wait_until(lambda: rate(0.25) >= 20, timeout=10)  # the long poll in flight ends; short ones follow
        granted = Collect(loop)
        began = loop.clock.monotonic()
        loop.add("granted/0", one_broker.bootstrap_servers, "granted", 0, -1, granted)
        wait_until(lambda: len(granted.values) == 3, timeout=10)
        assert loop.clock.monotonic() - began < 0.5, "a partition granted meanwhile waited for a long poll"
        loop.hurry(0)
        wait_until(lambda: rate(0.5) <= 2, timeout=10)
        loop.hurry(1.5)  # outlasts the long poll in flight
        wait_until(lambda: rate(0.25) >= 20, timeout=10)
        wait_until(lambda: rate(0.5) <= 2, timeout=10)  # its time is up
    finally:
        loop.close()
