"""The store interface's contract, run against every driver (embedded always; FoundationDB when configured)."""

from __future__ import annotations

import threading
import time

import pytest

from streamplane.coordinator import keys
from streamplane.coordinator.store import StoreConfig, StoreLimitError, open_store, transactional
from streamplane.coordinator.store.api import MAX_KEY_BYTES, MAX_VALUE_BYTES, Database, Transaction


def _set_all(db: Database, items: dict[bytes, bytes]) -> None:
    def body(tr: Transaction) -> None:
        for k, v in items.items():
            tr.set(k, v)

    db.transact(body)


def test_set_get_clear_round_trip(store: Database, prefix: bytes) -> None:
    _set_all(store, {prefix + b"a": b"1"})
    assert store.transact(lambda tr: tr.get(prefix + b"a")) == b"1"
    assert store.transact(lambda tr: tr.get(prefix + b"missing")) is None
    store.transact(lambda tr: tr.clear(prefix + b"a"))
    assert store.transact(lambda tr: tr.get(prefix + b"a")) is None


def test_reads_see_own_writes_before_commit(store: Database, prefix: bytes) -> None:
    def body(tr: Transaction) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        tr.set(prefix + b"x", b"mine")
        return tr.get(prefix + b"x"), tr.get_range(prefix, prefix + b"\xff")

    value, rows = store.transact(body)
    assert value == b"mine"
    assert rows == [(prefix + b"x", b"mine")]


def test_range_reads_merge_this_transactions_writes_clears_and_limits(store: Database, prefix: bytes) -> None:
    """Reads inside a transaction see its own sets, clears and cleared ranges over what was stored, in order
    and within the limit, and a set after a clear of its range survives the commit."""
    _set_all(store, {prefix + bytes([i]): b"old" for i in (1, 3, 5, 7, 9)})
    end = prefix + b"\xff"

    def body(tr: Transaction) -> list[object]:
        tr.clear_range(prefix + b"\x03", prefix + b"\x06")  # 3 and 5
        tr.set(prefix + b"\x04", b"new")  # inside the cleared range
        tr.set(prefix + b"\x08", b"new")
        tr.clear(prefix + b"\x09")
        tr.set(prefix + b"\x01", b"changed")
        return [
            tr.get_range(prefix, end),
            tr.get_range(prefix, end, limit=2),
            tr.get_range(prefix, end, limit=2, reverse=True),
            tr.get(prefix + b"\x03"),
            tr.get(prefix + b"\x04"),
        ]

    whole, first_two, last_two, three, four = store.transact(body)
    expected = [
        (prefix + b"\x01", b"changed"),
        (prefix + b"\x04", b"new"),
        (prefix + b"\x07", b"old"),
        (prefix + b"\x08", b"new"),
    ]
    assert whole == expected
    assert first_two == expected[:2]
    assert last_two == expected[::-1][:2]
    assert (three, four) == (None, b"new")
    assert store.transact(lambda tr: tr.get_range(prefix, end)) == expected  # and so it was committed


def test_prefetched_reads_answer_exactly_as_reads_do(store: Database, prefix: bytes) -> None:
    """`prefetch` (a batch of keys and whole ranges read at once) changes no answer: absent keys, this
    transaction's own writes and clears, limits and reverse order inside a prefetched range, and a second read
    of a key, all as without it. `run_alone` changes none either."""
    a, b = prefix + b"a/", prefix + b"b/"
    _set_all(store, {a + b"1": b"1", a + b"2": b"2", a + b"3": b"3", a + b"4": b"4", b + b"1": b"x"})

    def reads(prefetching: bool) -> list[object]:
        def body(tr: Transaction) -> list[object]:
            tr.run_alone()
            tr.set(a + b"2", b"two")
            tr.clear(a + b"4")
            tr.clear_range(b, b + b"\xff")
            if prefetching:
                tr.prefetch([a + b"1", a + b"9", b + b"1", a + b"2"], [(a, a + b"\xff"), (b, b + b"\xff")])
            tr.set(a + b"5", b"five")  # a write after the prefetch
            return [
                tr.get(a + b"1"),
                tr.get(a + b"1"),
                tr.get(a + b"9"),
                tr.get(a + b"3"),
                tr.get(a + b"2"),
                tr.get(a + b"4"),
                tr.get(b + b"1"),
                tr.get(a + b"0"),
                tr.get_range(a, a + b"\xff"),
                tr.get_range(a, a + b"\xff", limit=2, reverse=True),
                tr.get_range(a + b"2", a + b"4"),
                tr.get_range(b, b + b"\xff"),
            ]

        return store.transact(body)

    plain = reads(False)
    assert plain[:8] == [b"1", b"1", None, b"3", b"two", None, None, None]
    assert plain[8] == [(a + b"1", b"1"), (a + b"2", b"two"), (a + b"3", b"3"), (a + b"5", b"five")]
    assert reads(True) == plain


def test_range_reads_forward_reverse_and_limit(store: Database, prefix: bytes) -> None:
    items = {prefix + bytes([i]): bytes([i]) * 3 for i in (5, 1, 9, 3, 7)}
    _set_all(store, items)
    ordered = sorted(items.items())
    end = prefix + b"\xff"
    assert store.transact(lambda tr: tr.get_range(prefix, end)) == ordered
    assert store.transact(lambda tr: tr.get_range(prefix, end, reverse=True)) == ordered[::-1]
    assert store.transact(lambda tr: tr.get_range(prefix, end, limit=2)) == ordered[:2]
    assert store.transact(lambda tr: tr.get_range(prefix, end, limit=2, reverse=True)) == ordered[::-1][:2]
    # begin is inclusive, end exclusive
    assert store.transact(lambda tr: tr.get_range(prefix + b"\x03", prefix + b"\x07")) == ordered[1:3]


def test_range_order_is_bytewise(store: Database, prefix: bytes) -> None:
    raw = [prefix + k for k in (b"\x00", b"\x00\x00", b"\x01", b"a", b"ab", b"b", b"\xfe")]
    _set_all(store, {k: b"" for k in raw})
    assert [k for k, _ in store.transact(lambda tr: tr.get_range(prefix, prefix + b"\xff"))] == sorted(raw)


def test_clear_range(store: Database, prefix: bytes) -> None:
    _set_all(store, {prefix + bytes([i]): b"v" for i in range(10)})
    store.transact(lambda tr: tr.clear_range(prefix + b"\x02", prefix + b"\x08"))
    left = [k[-1] for k, _ in store.transact(lambda tr: tr.get_range(prefix, prefix + b"\xff"))]
    assert left == [0, 1, 8, 9]


def test_atomic_add_and_max(store: Database, prefix: bytes) -> None:
    counter, high = prefix + b"counter", prefix + b"high"
    store.transact(lambda tr: tr.add(counter, 5))
    store.transact(lambda tr: tr.add(counter, -2))
    assert int.from_bytes(store.transact(lambda tr: tr.get(counter)), "little", signed=True) == 3
    for value in (7, 3, 11, 10):
        store.transact(lambda tr, v=value: tr.max(high, v))
    assert int.from_bytes(store.transact(lambda tr: tr.get(high)), "little") == 11


def test_failed_transaction_writes_nothing(store: Database, prefix: bytes) -> None:
    def body(tr: Transaction) -> None:
        tr.set(prefix + b"a", b"1")
        tr.set(prefix + b"b", b"2")
        raise RuntimeError("boom in the middle")

    with pytest.raises(RuntimeError):
        store.transact(body)
    assert store.transact(lambda tr: tr.get_range(prefix, prefix + b"\xff")) == []


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda p: {p + b"k" * MAX_KEY_BYTES: b"v"}, "key"),
        (lambda p: {p + b"k": b"v" * (MAX_VALUE_BYTES + 1)}, "value"),
        (lambda p: {p + b"%06d" % i: b"v" * 90_000 for i in range(120)}, "transaction"),
    ],
)
def test_limits_refuse_the_whole_transaction(store: Database, prefix: bytes, make, what: str) -> None:
    items = {prefix + b"first": b"ok", **make(prefix)}
    with pytest.raises(StoreLimitError, match=what):
        _set_all(store, items)
    assert store.transact(lambda tr: tr.get(prefix + b"first")) is None


def test_values_at_the_limits_are_accepted(store: Database, prefix: bytes) -> None:
    key = prefix + b"k" * (MAX_KEY_BYTES - len(prefix) - 1)
    _set_all(store, {key: b"v" * MAX_VALUE_BYTES})
    assert len(store.transact(lambda tr: tr.get(key))) == MAX_VALUE_BYTES


def _append_stamped(db: Database, prefix_tuple: tuple, count: int) -> None:
    for i in range(count):

        def body(tr: Transaction, i: int = i) -> None:
            tr.set_versionstamped_key(
                keys.ROOT.pack_with_versionstamp((*prefix_tuple, keys.Versionstamp(user_version=0))), b"%d" % i
            )

        db.transact(body)


def test_versionstamped_keys_are_ordered_by_commit(store: Database, prefix: bytes) -> None:
    tag = ("vs-test", prefix.hex())
    _append_stamped(store, tag, 5)
    r = keys.ROOT.range(tag)
    rows = store.transact(lambda tr: tr.get_range(r.start, r.stop))
    assert [v for _, v in rows] == [b"0", b"1", b"2", b"3", b"4"]
    stamps = [keys.ROOT.unpack(k)[-1] for k, _ in rows]
    assert all(s.is_complete() for s in stamps)
    assert stamps == sorted(stamps) and len(set(stamps)) == 5


def test_versionstamp_is_readable_after_commit(store: Database, prefix: bytes) -> None:
    holder: dict[str, Transaction] = {}

    def body(tr: Transaction) -> None:
        holder["tr"] = tr
        tr.set(prefix + b"x", b"1")

    store.transact(body)
    first = holder["tr"].get_versionstamp().wait()
    store.transact(body)
    assert len(first) == 10
    assert holder["tr"].get_versionstamp().wait() > first


def test_versionstamps_stay_monotonic_across_restart(tmp_path) -> None:
    config = StoreConfig(driver="embedded", data_dir=tmp_path)
    db = open_store(config)
    _append_stamped(db, ("vs",), 3)
    db.close()
    db = open_store(config)
    _append_stamped(db, ("vs",), 3)
    r = keys.ROOT.range(("vs",))
    rows = db.transact(lambda tr: tr.get_range(r.start, r.stop))
    db.close()
    assert [v for _, v in rows] == [b"0", b"1", b"2", b"0", b"1", b"2"]


def test_watch_fires_after_a_commit_changes_the_key(store: Database, prefix: bytes) -> None:
    key = prefix + b"watched"
    watch = store.transact(lambda tr: tr.watch(key))
    assert not watch.wait(0.2)
    store.transact(lambda tr: tr.set(prefix + b"other", b"1"))
    assert not watch.wait(0.2), "a write to another key must not fire the watch"
    started = time.monotonic()
    store.transact(lambda tr: tr.set(key, b"1"))
    assert watch.wait(5)
    assert time.monotonic() - started < 1


def test_watch_fires_on_clear_range(store: Database, prefix: bytes) -> None:
    key = prefix + b"w"
    store.transact(lambda tr: tr.set(key, b"1"))
    watch = store.transact(lambda tr: tr.watch(key))
    store.transact(lambda tr: tr.clear_range(prefix, prefix + b"\xff"))
    assert watch.wait(5)


def test_watch_calls_back_once_when_it_fires_and_never_once_cancelled(store: Database, prefix: bytes) -> None:
    """An event loop follows watches through `on_fire` (no thread waits on each): the callback comes once after
    the commit, at once when the watch has already fired, and never for a cancelled watch."""
    calls: list[str] = []
    fired = threading.Event()
    key = prefix + b"cb"
    watch = store.transact(lambda tr: tr.watch(key))
    watch.on_fire(lambda: (calls.append("first"), fired.set()))
    store.transact(lambda tr: tr.set(prefix + b"other", b"1"))
    assert not fired.wait(0.2)
    store.transact(lambda tr: tr.set(key, b"1"))
    assert fired.wait(5)
    watch.on_fire(lambda: calls.append("late"))  # already fired: called at once
    assert calls == ["first", "late"]
    cancelled = store.transact(lambda tr: tr.watch(key))
    cancelled.on_fire(lambda: calls.append("cancelled"))
    cancelled.cancel()
    store.transact(lambda tr: tr.set(key, b"2"))
    time.sleep(0.3)  # time for a cancelled watch to fire, which it must not
    assert calls == ["first", "late"]


def test_concurrent_read_modify_write_is_serializable(store: Database, prefix: bytes) -> None:
    """16 threads increment one counter with plain get/set: no increment may be lost."""
    key = prefix + b"rmw"

    @transactional
    def increment(tr: Transaction) -> None:
        current = int(tr.get(key) or b"0")
        tr.set(key, b"%d" % (current + 1))

    def worker() -> None:
        for _ in range(50):
            increment(store)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(store.transact(lambda tr: tr.get(key))) == 16 * 50


def test_transactional_functions_compose(store: Database, prefix: bytes) -> None:
    @transactional
    def put(tr: Transaction, k: bytes) -> None:
        tr.set(prefix + k, b"1")

    @transactional
    def put_two_then_fail(tr: Transaction) -> None:
        put(tr, b"a")
        put(tr, b"b")
        raise ValueError("abort both")

    put(store, b"alone")
    with pytest.raises(ValueError):
        put_two_then_fail(store)
    assert [k for k, _ in store.transact(lambda tr: tr.get_range(prefix, prefix + b"\xff"))] == [prefix + b"alone"]


def test_read_only_open_sees_commits_and_refuses_writes(tmp_path) -> None:
    config = StoreConfig(driver="embedded", data_dir=tmp_path)
    writer = open_store(config)
    reader = open_store(config, read_only=True)
    writer.transact(lambda tr: tr.set(b"k", b"1"))
    assert reader.transact(lambda tr: tr.get(b"k")) == b"1"
    with pytest.raises(Exception, match="read-only"):
        reader.transact(lambda tr: tr.set(b"k", b"2"))
    assert writer.transact(lambda tr: tr.get(b"k")) == b"1"
    reader.close()
    writer.close()


def test_closed_store_refuses_calls(tmp_path) -> None:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    db.close()
    with pytest.raises(Exception, match="closed"):
        db.transact(lambda tr: tr.get(b"k"))


def test_a_store_in_memory_is_never_read_only() -> None:
    from streamplane.coordinator.store.embedded import EmbeddedDatabase

    with pytest.raises(ValueError, match="in memory"):
        EmbeddedDatabase(None, read_only=True)
