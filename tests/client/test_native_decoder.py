"""The decoder contract, held against both implementations (native C and the pure-Python reference)."""

from __future__ import annotations

import os
import random
import struct
import threading

import pytest

from streamplane import native
from streamplane.errors import (
    CrcMismatchError,
    DecodeError,
    DecodeLimitExceeded,
    DecompressionError,
    MalformedBatchError,
    UnsupportedCodecError,
    UnsupportedMagicError,
)
from streamplane.native import PyRecord as Record
from streamplane.native import decode, reference
from streamplane.native.reference import crc32c as py_crc32c
from tests.recordbatch import CODECS, GZIP, NONE, ZSTD, Rec, build_batch, control_batch

IMPLS = ["native", "python"]


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest) -> str:
    return request.param


def _native_end(data: bytes) -> int:
    from streamplane import _native

    return int(_native.records_end(data))


ENDS = {"native": _native_end, "python": reference.records_end}


def test_native_extension_is_built_and_used_by_default() -> None:
    assert "native" in native.IMPLEMENTATIONS, "streamplane._native did not load: run scripts/bootstrap.sh"
    if not os.environ.get("STREAMPLANE_PURE_PYTHON"):
        assert native.implementation == "native"


def test_crc32c_hardware_software_and_reference_agree() -> None:
    from streamplane import _native

    assert _native.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert _native.crc32c(b"123456789", software=True) == 0xE3069283
    rng = random.Random(7)
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 4099):
        data = rng.randbytes(n)
        assert _native.crc32c(data) == _native.crc32c(data, software=True) == py_crc32c(data)


SAMPLE = [
    Rec(key=b"k0", value=b"v0", headers=[(b"trace", b"abc"), (b"trace", b"again"), (b"empty", b""), (b"null", None)]),
    Rec(key=None, value=None),
    Rec(key=b"", value=b""),
    Rec(key=b"\x00\xff" * 100, value=bytes(range(256)) * 40, timestamp_delta=-5),
    Rec(key=b"big-delta", value=b"x", offset_delta=1_000_000, timestamp_delta=2**40),
]


def _expected(base: int, first_ts: int) -> list[Record]:
    out = []
    for i, r in enumerate(SAMPLE):
        delta = r.offset_delta if r.offset_delta is not None else i
        headers = tuple((k.decode(), v) for k, v in r.headers)
        out.append(Record(base + delta, first_ts + r.timestamp_delta, r.key, r.value, headers))
    return out


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_round_trips_keys_nulls_headers_and_varint_edges(impl: str, codec: str) -> None:
    data = build_batch(SAMPLE, base_offset=42, codec=CODECS[codec], first_timestamp=1_700_000_000_000)
    batch = decode(data, impl=impl)
    assert list(batch.records()) == _expected(42, 1_700_000_000_000)
    assert batch.next_offset == 42 + 1_000_000 + 1
    assert (batch.incomplete, batch.error, batch.consumed) == (False, None, len(data))
    info = batch.batches[0]
    assert (info.base_offset, info.codec_name, info.record_count) == (42, codec, 5)
    assert info.compressed_size == len(data) - 61
    assert info.decompressed_size >= info.compressed_size if codec == "none" else info.decompressed_size > 0


def test_each_batch_is_described_in_order_and_the_last_leader_epoch_read_is_known(impl: str) -> None:
    """The fetch loop checks a log for truncation from the leader epoch of the last batch it read (KIP-320):
    every decoded batch is described, in order, and the last one's epoch is there without building them."""
    data = b"".join(
        build_batch(SAMPLE[:2], base_offset=base, codec=ZSTD, leader_epoch=epoch, producer_id=pid, transactional=tx)
        for base, epoch, pid, tx in ((0, 3, -1, False), (10, 4, 7, True), (20, 6, -1, False))
    )
    batch = decode(data, impl=impl)
    assert [(b.base_offset, b.partition_leader_epoch, b.producer_id, b.transactional) for b in batch.batches] == [
        (0, 3, -1, False),
        (10, 4, 7, True),
        (20, 6, -1, False),
    ]
    assert batch.last_leader_epoch == 6
    assert all(b.codec_name == "zstd" and b.record_count == 2 and not b.control for b in batch.batches)
    empty = decode(b"", impl=impl)
    assert (empty.batches, empty.last_leader_epoch) == ([], -1)


@pytest.mark.parametrize("first", [16, 15, 17, 32])
def test_a_first_batch_that_fills_the_column_buffers_exactly(impl: str, first: int) -> None:
    """Seen against a real broker: a first batch of 16 records made the offset columns (4 bytes each, plus
    their leading zero) one entry longer than reserved; the C core wrote past them (the sanitized run of
    the fuzz corpus holds that input)."""
    raw = build_batch([Rec(key=b"k%d" % i, value=b"v" * 70) for i in range(first)], codec=ZSTD)
    raw += build_batch([Rec(value=b"w%d" % i) for i in range(83)], base_offset=first, codec=ZSTD)
    batch = decode(raw, impl=impl)
    records = list(batch.records())
    assert [r.offset for r in records] == list(range(first + 83))
    assert records[first - 1].key == b"k%d" % (first - 1) and records[-1].value == b"w82"
    assert batch.to_arrow().column("offset").to_pylist() == list(range(first + 83))


def test_snappy_with_java_xerial_framing(impl: str) -> None:
    """Java producers frame snappy as xerial: a 16-byte header, then [int32 length][raw snappy] blocks."""
    import cramjam

    from tests.recordbatch import SNAPPY, encode_record

    raw = b"".join(encode_record(r, i) for i, r in enumerate(SAMPLE[:3]))
    half = len(raw) // 2
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (raw[:half], raw[half:])]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    batch = decode(build_batch(SAMPLE[:3], codec=SNAPPY, records_bytes=framed), impl=impl)
    assert [r.value for r in batch.records()] == [r.value for r in SAMPLE[:3]]
    truncated = framed[:-3]
    with pytest.raises(DecompressionError):
        decode(build_batch(SAMPLE[:3], codec=SNAPPY, records_bytes=truncated), impl=impl)


def test_arrow_batch_matches_records(impl: str) -> None:
    import pyarrow as pa

    batch = decode(build_batch(SAMPLE, codec=ZSTD) + build_batch(SAMPLE, base_offset=2_000_000), impl=impl)
    table = batch.to_arrow()
    assert table.num_rows == 10
    assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    records = list(batch.records())
    assert table.column("offset").to_pylist() == [r.offset for r in records]
    assert table.column("key").to_pylist() == [r.key for r in records]
    assert table.column("value").to_pylist() == [r.value for r in records]
    assert [tuple((h["key"], h["value"]) for h in hs) for hs in table.column("headers").to_pylist()] == [
        r.headers for r in records
    ]
    table.validate(full=True)


def test_header_keys_that_are_not_utf8_are_replaced_not_passed_to_arrow(impl: str) -> None:
    batch = decode(build_batch([Rec(value=b"v", headers=[(b"ok", b"1"), (b"bad\xff\xfe", b"2")])]), impl=impl)
    (record,) = batch.records()
    assert record.headers == (("ok", b"1"), ("bad\ufffd\ufffd", b"2"))
    table = batch.to_arrow()
    table.validate(full=True)
    assert table.column("headers").to_pylist() == [
        [{"key": "ok", "value": b"1"}, {"key": "bad\ufffd\ufffd", "value": b"2"}]
    ]


@pytest.mark.parametrize(
    ("keys", "read"),
    [
        ([b"service", b"zone"], ["service", "zone"]),  # ASCII: taken as they are
        ([b"service", "zöne".encode()], ["service", "zöne"]),  # UTF-8 past ASCII
        ([b"z\xc3", b"ok"], ["z\ufffd", "ok"]),  # a sequence cut short
    ],
)
def test_header_keys_reach_arrow_as_the_strings_records_give(impl: str, keys: list[bytes], read: list[str]) -> None:
    batch = decode(build_batch([Rec(value=b"v", headers=[(k, b"1") for k in keys]), Rec(value=b"w")]), impl=impl)
    table = batch.to_arrow()
    table.validate(full=True)
    assert [[h["key"] for h in hs] for hs in table.column("headers").to_pylist()] == [read, []]
    assert [[k for k, _ in r.headers] for r in batch.records()] == [read, []]


def test_records_in_c_match_records_in_python(impl: str) -> None:
    from streamplane import _native

    batch = decode(build_batch(SAMPLE, codec=ZSTD) + build_batch([], base_offset=2_000_000), impl=impl)
    in_c, in_python = _native.records(batch.columns), list(batch.records_python())
    assert in_c == in_python and len(in_c) == 5
    assert in_c[0].key == b"k0" and in_c[1].value is None and in_c[0].headers[0] == ("trace", b"abc")


def test_empty_input_and_empty_batch(impl: str) -> None:
    assert decode(b"", impl=impl).count == 0
    empty = decode(build_batch([]), impl=impl)
    assert (empty.count, len(empty.batches), empty.to_arrow().num_rows) == (0, 1, 0)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_get_a_clear_error(impl: str, magic: int) -> None:
    data = bytearray(build_batch([Rec(value=b"v")]))
    data[16] = magic
    with pytest.raises(UnsupportedMagicError, match=f"magic {magic}: only RecordBatch v2") as info:
        decode(bytes(data), impl=impl)
    assert info.value.position == 16


def test_crc_mismatch_is_reported_unless_disabled(impl: str) -> None:
    good = build_batch([Rec(value=b"hello")], base_offset=7)
    bad = build_batch([Rec(value=b"hello")], base_offset=7, crc=0xDEADBEEF)
    with pytest.raises(CrcMismatchError, match="base offset 7") as info:
        decode(good + bad if False else bad, impl=impl)
    assert info.value.position == 17 and info.value.base_offset == 7
    assert [r.value for r in decode(bad, verify_crc=False, impl=impl).records()] == [b"hello"]


def test_unknown_codec(impl: str) -> None:
    with pytest.raises(UnsupportedCodecError, match="codec 6"):
        decode(build_batch([Rec(value=b"v")], codec=6, records_bytes=b"\x00" * 8), impl=impl)


def test_truncated_last_batch_is_incomplete_not_an_error(impl: str) -> None:
    first = build_batch([Rec(value=b"a" * 50)] * 3, base_offset=0)
    second = build_batch([Rec(value=b"b" * 50)] * 3, base_offset=3)
    for cut in range(len(second)):
        batch = decode(first + second[:cut], impl=impl)
        assert (batch.count, batch.next_offset, batch.consumed) == (3, 3, len(first)), cut
        assert batch.incomplete == (cut > 0) and batch.error is None
    only_part = decode(second[:40], impl=impl)
    assert (only_part.count, only_part.incomplete, only_part.next_offset) == (0, True, -1)


def test_a_bad_later_batch_ends_the_result_early(impl: str) -> None:
    good = build_batch([Rec(value=b"ok")], base_offset=0)
    bad = build_batch([Rec(value=b"no")], base_offset=1, crc=1)
    batch = decode(good + bad + good, impl=impl)
    assert [r.value for r in batch.records()] == [b"ok"]
    assert isinstance(batch.error, CrcMismatchError) and batch.error.base_offset == 1
    assert batch.next_offset == 1


def test_a_batch_failing_half_way_contributes_no_records(impl: str) -> None:
    good = build_batch([Rec(value=b"ok")], base_offset=0)
    half_bad = bytearray(build_batch([Rec(value=b"first"), Rec(value=b"second")], base_offset=1))
    half_bad[half_bad.rindex(b"second") - 1] = 0x7F  # the second record's value length runs past the batch
    batch = decode(good + bytes(half_bad), verify_crc=False, impl=impl)
    assert [r.value for r in batch.records()] == [b"ok"]
    assert isinstance(batch.error, MalformedBatchError) and batch.error.base_offset == 1
    table = batch.to_arrow()
    table.validate(full=True)
    assert table.column("value").to_pylist() == [b"ok"]


def test_malformed_records_name_the_position(impl: str) -> None:
    data = bytearray(build_batch([Rec(key=b"k", value=b"v")]))
    data[61] = 0x7F  # record length far beyond the batch
    with pytest.raises(MalformedBatchError, match=r"record 0 .* bad record length, at byte 61 of the input"):
        decode(bytes(data), verify_crc=False, impl=impl)
    lying_count = build_batch([Rec(value=b"v")], record_count=10**9)
    with pytest.raises(MalformedBatchError, match="claims 1000000000 records"):
        decode(lying_count, impl=impl)
    short = build_batch([Rec(value=b"v")], record_count=2)
    with pytest.raises(MalformedBatchError):
        decode(short, impl=impl)


def test_control_batches_are_skipped_and_aborted_transactions_dropped(impl: str) -> None:
    pid = 77
    txn = [Rec(value=b"t1"), Rec(value=b"t2")]
    data = (
        build_batch([Rec(value=b"plain")], base_offset=0)
        + build_batch(txn, base_offset=1, producer_id=pid, producer_epoch=0, transactional=True)
        + control_batch(3, pid, commit=False)
        + build_batch([Rec(value=b"t3")], base_offset=4, producer_id=pid, producer_epoch=0, transactional=True)
        + control_batch(5, pid, commit=True)
    )
    read_uncommitted = decode(data, impl=impl)
    assert [r.value for r in read_uncommitted.records()] == [b"plain", b"t1", b"t2", b"t3"]
    assert [b.control for b in read_uncommitted.batches] == [False, False, True, False, True]
    read_committed = decode(data, aborted=[(pid, 1)], impl=impl)
    assert [r.value for r in read_committed.records()] == [b"plain", b"t3"]
    assert [b.aborted for b in read_committed.batches] == [False, True, False, False, False]
    assert read_committed.next_offset == 6


def test_min_offset_leaves_out_the_records_before_it(impl: str) -> None:
    data = build_batch([Rec(value=b"%d" % i) for i in range(10)], base_offset=100, codec=ZSTD)
    batch = decode(data, min_offset=104, impl=impl)
    assert [r.offset for r in batch.records()] == list(range(104, 110))
    assert batch.next_offset == 110 and batch.batches[0].record_count == 10
    assert decode(data, min_offset=500, impl=impl).count == 0


def test_log_append_time_applies_to_every_record(impl: str) -> None:
    data = build_batch(
        [Rec(value=b"a"), Rec(value=b"b", timestamp_delta=50)], log_append_time=True, first_timestamp=1000
    )
    assert [r.timestamp for r in decode(data, impl=impl).records()] == [1050, 1050]


def test_a_small_zstd_frame_with_a_large_window_is_not_over_a_small_limit(impl: str) -> None:
    """librdkafka declares a 2 MiB window for small batches of unknown size: the window is no measure of
    the output, so a 64 KiB limit must still decode them."""
    import zstandard

    from tests.recordbatch import encode_record

    raw = b"".join(encode_record(r, i) for i, r in enumerate(SAMPLE[:3]))
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=21, write_content_size=False)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = cobj.compress(raw) + cobj.flush()
    batch = decode(build_batch(SAMPLE[:3], codec=ZSTD, records_bytes=frame), max_decompressed=64 << 10, impl=impl)
    assert [r.value for r in batch.records()] == [r.value for r in SAMPLE[:3]]


def test_call_budget_stops_before_a_batch_that_does_not_fit(impl: str) -> None:
    a = build_batch([Rec(value=b"a" * 600)], base_offset=0, codec=GZIP)
    b = build_batch([Rec(value=b"b" * 600)], base_offset=1, codec=GZIP)
    batch = decode(a + b, max_decompressed=1000, impl=impl)
    assert (batch.count, batch.budget_exhausted, batch.next_offset, batch.error) == (1, True, 1, None)
    with pytest.raises(DecodeLimitExceeded, match="limit of 500 bytes") as info:
        decode(a, max_decompressed=500, impl=impl)
    assert (info.value.base_offset, info.value.last_offset, info.value.limit) == (0, 0, 500)
    uncompressed = build_batch([Rec(value=b"u" * 600)], codec=NONE)
    with pytest.raises(DecodeLimitExceeded):
        decode(uncompressed, max_decompressed=500, impl=impl)


def test_bad_arguments_are_rejected() -> None:
    from streamplane.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        decode(b"", max_decompressed=0)
    with pytest.raises(InvalidArgumentError, match="impl"):
        decode(b"", impl="java")


# -- differential: both implementations agree on every input ---------------------------------------------------------


def _kind(err: DecodeError) -> str:
    """The error kind compared across implementations.

    A compressed batch that is both corrupt and past the limit may be noticed as either first, depending on
    the codec library's internals (the reference runs python-zstandard's, python-lz4's and zlib's own
    builds, the C core the system libraries): both implementations still stop at that batch, so the two
    kinds compare equal.
    """
    return "inflate" if isinstance(err, DecompressionError | DecodeLimitExceeded) else type(err).__name__


def outcome(impl: str, data: bytes, **kwargs: object) -> tuple:
    """Everything a caller can observe of one decode call."""
    try:
        batch = decode(data, impl=impl, **kwargs)
    except DecodeError as err:
        return ("raised", _kind(err), err.position, err.base_offset, err.last_offset)
    err = batch.error
    # A batch that only overflows what is left of the call's budget stops the call like an inflate error.
    stopped = "inflate" if batch.budget_exhausted else None if err is None else _kind(err)
    return (
        "ok",
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()],
        batch.batches,
        batch.next_offset,
        batch.consumed,
        batch.incomplete,
        stopped,
        None if stopped in (None, "inflate") else (err.position, err.base_offset),
    )


def assert_agree(data: bytes, **kwargs: object) -> None:
    """Both implementations observe the same, with one allowed difference when CRC checks are off.

    Then a damaged compressed payload reaches the codec libraries, and those differ in what damage they
    notice (python-zstandard bundles a newer zstd than the system libzstd the C core links). So one side
    may accept a batch the other refuses with an inflate error; everything before that batch must agree.
    With CRC checks on (the default), the CRC catches the damage first and the outcomes are identical.
    """
    assert _native_end(data) == reference.records_end(data), data
    a, b = outcome("native", data, **kwargs), outcome("python", data, **kwargs)
    if a == b:
        return
    assert kwargs.get("verify_crc", True) is False, (a, b)
    refused = [o for o in (a, b) if (o[0] == "raised" and o[1] == "inflate") or (o[0] == "ok" and o[6] == "inflate")]
    assert refused, (a, b)
    got = [o[1] if o[0] == "ok" else [] for o in (a, b)]
    shorter, longer = sorted(got, key=len)
    assert longer[: len(shorter)] == shorter, (a, b)


def _corpus() -> list[bytes]:
    items = []
    for codec in range(5):
        items.append(build_batch(SAMPLE[:3], base_offset=10, codec=codec))
    items.append(build_batch(SAMPLE, codec=ZSTD) + control_batch(10**6 + 1, 5, commit=True))
    return items


def test_differential_every_single_byte_corruption() -> None:
    """Flip each byte of real-shaped batches (CRC checks off, so the parsers see the damage)."""
    rng = random.Random(11)
    for data in _corpus():
        for pos in range(len(data)):
            mutated = bytearray(data)
            mutated[pos] ^= rng.choice([0x01, 0x80, 0xFF, 0x55])
            m = bytes(mutated)
            assert_agree(m, verify_crc=False)
            assert_agree(m)


def test_differential_random_bytes_and_splices() -> None:
    rng = random.Random(12)
    corpus = _corpus()
    for i in range(1500):
        kind = i % 3
        if kind == 0:
            data = rng.randbytes(rng.randrange(0, 200))
        elif kind == 1:
            data = rng.choice(corpus)[: rng.randrange(0, 400)] + rng.randbytes(rng.randrange(0, 50))
        else:
            base = bytearray(rng.choice(corpus))
            for _ in range(rng.randrange(1, 6)):
                base[rng.randrange(len(base))] = rng.randrange(256)
            data = bytes(base)
        limit = rng.choice([1, 64, 4096, 1 << 20])
        assert_agree(data, verify_crc=False, max_decompressed=limit)
        assert_agree(data, max_decompressed=limit)


def test_differential_hypothesis_records() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    blobs = st.one_of(st.none(), st.binary(max_size=40))
    recs = st.builds(
        Rec,
        key=blobs,
        value=blobs,
        headers=st.lists(st.tuples(st.binary(max_size=8), blobs), max_size=3),
        timestamp_delta=st.integers(-(2**40), 2**40),
    )

    @settings(max_examples=300, deadline=None)
    @given(st.lists(recs, max_size=8), st.sampled_from(range(5)), st.integers(0, 2**40), st.data())
    def check(records: list[Rec], codec: int, base: int, data: st.DataObject) -> None:
        raw = build_batch(records, codec=codec, base_offset=base)
        cut = data.draw(st.integers(0, len(raw)))
        for candidate in (raw, raw[:cut]):
            assert_agree(candidate)
            assert native.records_end(candidate) == decode(candidate).next_offset
        got = list(decode(raw).records())
        assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]

    check()


def test_header_key_must_not_be_null(impl: str) -> None:
    data = bytearray(build_batch([Rec(value=b"v", headers=[(b"k", b"v")])]))
    # the header key length is the byte before b"k"; -1 (zigzag 0x01) makes it null
    at = bytes(data).rindex(b"\x02k")
    data[at] = 0x01
    with pytest.raises(MalformedBatchError, match="bad header key"):
        decode(bytes(data), verify_crc=False, impl=impl)


@pytest.mark.skipif(not native.USE_NATIVE, reason="the C extension is not loaded (STREAMPLANE_PURE_PYTHON=1)")
def test_messages_built_in_bulk_are_the_records_and_leave_nothing_behind() -> None:
    import gc
    import sys

    from streamplane.client.consumer.message import PENDING, Message, messages

    recs = [Rec(b"k%d" % i, b"v%d" % i, [(b"h", b"%d" % i)]) for i in range(300)]
    decoded = decode(build_batch(recs, base_offset=1000), max_decompressed=1 << 20)

    class Reader:
        pass

    reader, held = Reader(), object()
    before = sys.getrefcount(reader)
    built = messages(reader, decoded, held)  # type: ignore[arg-type]
    expected = [Message(reader, r, 1, held) for r in decoded.records_python()]  # type: ignore[arg-type]
    assert [(m.offset, m.timestamp, m.key, m.value, m.headers) for m in built] == [
        (m.offset, m.timestamp, m.key, m.value, m.headers) for m in expected
    ]
    assert all(m._ledger is reader and m._held is held and m._outcome is PENDING and m.attempt == 1 for m in built)
    assert all(isinstance(m, Message) for m in built)
    # a worker makes a million a second: none of them is work for the cycle collector
    assert not any(gc.is_tracked(m) for m in built)
    del built, expected
    gc.collect()
    assert sys.getrefcount(reader) == before, "every message let go of its reader"


@pytest.mark.skipif(not native.USE_NATIVE, reason="the C extension is not loaded (STREAMPLANE_PURE_PYTHON=1)")
def test_ending_messages_in_c_matches_the_python_version() -> None:
    from streamplane.client.consumer.ledger import _end_pending_py
    from streamplane.client.consumer.message import ACKED, PENDING, REJECTED, messages
    from streamplane.native._loaded import _native

    decoded = decode(build_batch([Rec(None, b"v%d" % i) for i in range(40)]), max_decompressed=1 << 20)
    results = []
    for end in (_end_pending_py, lambda msgs, pending: _native.end_pending(msgs, pending, ACKED, PENDING)):
        first, second = object(), object()
        built = messages(None, decoded, first)[:20] + messages(None, decoded, second)[20:]  # type: ignore[arg-type]
        pending = {m.offset: m for m in built if m.offset % 7}  # some dropped with their lease already
        built[3]._outcome = REJECTED  # ended another way before
        ended, holds = end(built, pending)
        results.append(
            (ended, [(h is first, h is second, n) for h, n in holds], sorted(pending), [m.outcome for m in built])
        )
    assert results[0] == results[1]
    ended, holds, left, outcomes = results[0]
    assert ended == [o for o in range(40) if o % 7 and o != 3] and left == [3]
    assert holds == [(True, False, 16), (False, True, 17)]
    assert outcomes == ["acked"] * 3 + ["rejected"] + ["acked"] * 36


def test_where_whole_batches_end_is_read_from_their_headers_and_is_where_decoding_ends(impl: str) -> None:
    """The fetch loop asks for a partition's next records from here before decoding it: it must be where its
    decoding ends whenever nothing in the record set is bad."""
    end = ENDS[impl]
    first = build_batch(SAMPLE[:3], base_offset=10, codec=ZSTD)
    second = build_batch(SAMPLE[3:], base_offset=13)  # the offset delta of 1,000,000 is its last
    marker = control_batch(2_000_000, 5, commit=True)
    whole = first + second + marker
    assert end(b"") == -1
    assert end(first) == decode(first, impl=impl).next_offset == 13
    assert end(first + second) == decode(first + second, impl=impl).next_offset == 1_000_014
    assert end(whole) == decode(whole, impl=impl).next_offset == 2_000_001, "a control batch is read past too"
    for cut in (1, 26, 27, 61, len(second) - 1):
        assert end(first + second[:cut]) == 13, "a batch cut short by the fetch's size is not counted"
        assert end(second[:cut]) == -1
    old = bytearray(second)
    old[16] = 1  # magic 1: decoding stops there
    assert end(first + bytes(old) + marker) == 13
    short = bytearray(second)
    short[8:12] = struct.pack(">i", 10)  # a length shorter than a batch header
    assert end(first + bytes(short)) == 13


@pytest.mark.skipif(not native.USE_NATIVE, reason="the C extension is not loaded (STREAMPLANE_PURE_PYTHON=1)")
def test_threads_decoding_at_once_each_get_their_own_records() -> None:
    """Each thread inflates into a buffer of its own, kept from call to call: threads decoding at once (the
    GIL released for record sets of 64 KiB and more) never read each other's bytes."""
    sets = []
    for t in range(4):
        rng = random.Random(t)
        recs = [Rec(value=rng.randbytes(2000), key=b"t%d-%d" % (t, i)) for i in range(64)]
        codecs = (ZSTD, GZIP, ZSTD, NONE)
        data = b"".join(build_batch(recs[i : i + 16], codec=codecs[i // 16], base_offset=i) for i in range(0, 64, 16))
        assert len(data) >= 64 * 1024
        sets.append((data, [(r.key, r.value) for r in recs]))
    wrong: list[str] = []

    def read(data: bytes, want: list[tuple[bytes, bytes]]) -> None:
        for _ in range(40):
            got = [(r.key, r.value) for r in decode(data, impl="native").records()]
            if got != want:
                wrong.append(f"{want[0][0]!r}: {len(got)} records, not those written")

    threads = [threading.Thread(target=read, args=one) for one in sets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong
