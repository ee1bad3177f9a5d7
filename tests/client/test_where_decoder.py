"""Record predicates in the decoders (issue 39): the C decoder and the pure-Python reference leave out exactly
the records `predicate.matches` says do not match, count them, and build nothing for them; a hostile program
is refused with a sentence."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamplane import (
    _native,  # type: ignore[attr-defined]
    native,
)
from streamplane.errors import InvalidArgumentError, MalformedBatchError
from streamplane.native.where import compile_where, program
from streamplane.predicate import (
    SLICE_SPACE,
    AllOf,
    AnyOf,
    Not,
    Op,
    Predicate,
    Subject,
    Test,
    matches,
    parse,
    render,
    slice_hash,
)
from tests.recordbatch import CODECS, NONE, ZSTD, Rec, build_batch

IMPLS = ["native", "python"]
FIRST_TS = 1_700_000_000_000

RECORDS = [
    Rec(key=b"us-1", value=b"GET /api", headers=[(b"service", b"api"), (b"region", b"us")]),
    Rec(key=b"eu-1", value=b"GET /web", headers=[(b"service", b"web")], timestamp_delta=10),
    Rec(key=None, value=None, headers=[(b"service", None)], timestamp_delta=20),
    Rec(key=b"us-2", value=b"", headers=[(b"service", b"web"), (b"service", b"api")], timestamp_delta=30),
    Rec(key=b"", value=b"error: api down", headers=[], timestamp_delta=40),
]


def _offsets(data: bytes, where: str, impl: str, partition: int = 3) -> tuple[list[int], int]:
    batch = native.decode(data, where=compile_where(where), partition=partition, impl=impl)
    return [r.offset for r in batch.records()], batch.filtered


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("where", "kept"),
    [
        ("header(service) = 'api'", [0, 3]),  # any of a record's headers of that name
        ("header(service) != 'api'", [1, 2, 4]),
        ("header(service) exists", [0, 1, 2, 3]),  # a null value is still a header
        ("not header(region) exists", [1, 2, 3, 4]),
        ("header(service) in ('web', 'x')", [1, 3]),
        ("header('service') ^= 'a'", [0, 3]),
        ("key ^= 'us-'", [0, 3]),
        ("key = ''", [4]),
        ("key exists", [0, 1, 3, 4]),
        ("key != 'us-1'", [1, 2, 3, 4]),  # a null key is not 'us-1'
        ("key in ('eu-1', 'us-2')", [1, 3]),
        ("value ^= 'GET'", [0, 1]),
        ("value contains 'api'", [0, 4]),
        ("value contains ''", [0, 1, 2, 3, 4]),
        (f"timestamp >= {FIRST_TS + 20}", [2, 3, 4]),
        (f"timestamp < {FIRST_TS + 10} or timestamp = {FIRST_TS + 40}", [0, 4]),
        ("partition = 3", [0, 1, 2, 3, 4]),
        ("partition in (1, 2)", []),
        ("header(service) = 'api' and key ^= 'us-' and not value contains 'x'", [0, 3]),
        (f"slice = {slice_hash(b'eu-1', 0)}", [1]),  # the key's CRC-32
        (f"slice in ({slice_hash(None, 2)}, {slice_hash(b'', 0)})", [2, 4]),  # keyless: its offset's
        (f"slice < {SLICE_SPACE // 2} or slice >= {SLICE_SPACE // 2}", [0, 1, 2, 3, 4]),  # halves cover all
    ],
)
def test_each_test_keeps_what_the_grammar_says(impl: str, where: str, kept: list[int]) -> None:
    data = build_batch(RECORDS, first_timestamp=FIRST_TS, base_offset=0)
    assert _offsets(data, where, impl) == (kept, len(RECORDS) - len(kept))


@pytest.mark.parametrize("impl", IMPLS)
def test_filtered_records_are_never_built_and_the_rest_keep_their_fields(impl: str) -> None:
    data = build_batch(RECORDS, first_timestamp=FIRST_TS, base_offset=100, codec=ZSTD)
    batch = native.decode(data, where=compile_where("header(service) = 'api'"), partition=0, impl=impl)
    assert batch.count == 2 and batch.filtered == 3
    assert [(r.offset, r.key, r.headers) for r in batch.records()] == [
        (100, b"us-1", (("service", b"api"), ("region", b"us"))),
        (103, b"us-2", (("service", b"web"), ("service", b"api"))),
    ]
    assert batch.next_offset == 105, "the fetch goes on after the records left out"
    assert batch.to_arrow().num_rows == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_a_batch_that_fails_half_way_counts_nothing_it_left_out(impl: str) -> None:
    good = build_batch(RECORDS, first_timestamp=FIRST_TS)
    bad = build_batch(RECORDS[2:], base_offset=6, record_count=len(RECORDS))
    tail = build_batch([Rec(key=None)], base_offset=5)  # its run would go on in the failed batch
    batch = native.decode(good + tail + bad, where=compile_where("key exists"), impl=impl)
    assert (batch.count, batch.filtered) == (4, 2)
    assert batch.filtered_ranges == [(2, 3), (5, 6)], "the failed batch extended nothing"
    assert isinstance(batch.error, MalformedBatchError)
    batch = native.decode(good + tail + bad, mine=compile_where("key exists"), impl=impl)
    assert (batch.count, batch.foreign, batch.filtered) == (4, 2, 0)
    assert batch.foreign_ranges == [(2, 3), (5, 6)], "nor another reader's"


def test_a_bad_program_is_refused_with_a_sentence_and_compiles_nothing() -> None:
    cases = {
        b"": "where program, byte 0: a node ends early",
        b"\x09": "unknown node kind",
        b"\x01\x00\x00": "an and / or of nothing",
        b"\x04\x02\x01\x00\x00": "an operator its subject does not take",  # value =
        b"\x04\x01\x06\x01\x00": "a test with the wrong number of values",  # key exists with a value
        b"\x04\x01\x01\x01\x00\xff\xff\xff\xff": "a value ends early",
        b"\x04\x01\x06\x00\x00\x00": "bytes after the predicate",
        b"\x03" * 70 + b"\x04\x01\x06\x00\x00": "nested more than 64 deep",
    }
    for blob, sentence in cases.items():
        with pytest.raises(ValueError, match=r"^where program, byte") as err:
            _native.compile_where(blob)
        assert sentence in str(err.value), blob
    with pytest.raises(TypeError):
        native.decode(build_batch(RECORDS), where=native.Where("x", parse("key exists"), object()), impl="native")


def test_a_bad_predicate_is_refused_before_anything_is_compiled() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^where, column 5: expected an operator"):
        compile_where("key 'x'")
    with pytest.raises(InvalidArgumentError, match=r"^where, column 9: a string holds a character that is not text"):
        compile_where("header('\ud800') exists")


# -- the contract: both decoders, against predicate.matches, on generated predicates and records ----------------

_names = st.sampled_from(["service", "region", "h"])
_bytes = st.sampled_from([b"", b"a", b"ab", b"api", b"us-1", b"x\x00y"])
_tests = st.one_of(
    st.builds(
        lambda op, v: Test(Subject.KEY, op, v), st.sampled_from([Op.EQ, Op.NE, Op.PREFIX]), _bytes.map(lambda b: (b,))
    ),
    st.builds(lambda vs: Test(Subject.KEY, Op.IN, tuple(vs)), st.lists(_bytes, min_size=1, max_size=3)),
    st.just(Test(Subject.KEY, Op.EXISTS)),
    st.builds(
        lambda op, v, n: Test(Subject.HEADER, op, (v,), n), st.sampled_from([Op.EQ, Op.NE, Op.PREFIX]), _bytes, _names
    ),
    st.builds(
        lambda vs, n: Test(Subject.HEADER, Op.IN, tuple(vs), n), st.lists(_bytes, min_size=1, max_size=3), _names
    ),
    st.builds(lambda n: Test(Subject.HEADER, Op.EXISTS, (), n), _names),
    st.builds(lambda op, v: Test(Subject.VALUE, op, (v,)), st.sampled_from([Op.PREFIX, Op.CONTAINS]), _bytes),
    st.builds(
        lambda op, d: Test(Subject.TIMESTAMP, op, (FIRST_TS + d,)),
        st.sampled_from([Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]),
        st.integers(-2, 8),
    ),
    st.builds(
        lambda vs: Test(Subject.PARTITION, Op.IN, tuple(vs)), st.lists(st.integers(0, 3), min_size=1, max_size=3)
    ),
    st.builds(lambda op, v: Test(Subject.PARTITION, op, (v,)), st.sampled_from([Op.EQ, Op.NE]), st.integers(0, 3)),
    st.builds(
        lambda op, v: Test(Subject.SLICE, op, (v,)),
        st.sampled_from([Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]),
        st.one_of(st.integers(0, SLICE_SPACE), _bytes.map(lambda b: slice_hash(b, 0))),
    ),
    st.builds(
        lambda vs: Test(Subject.SLICE, Op.IN, tuple(vs)),
        st.lists(_bytes.map(lambda b: slice_hash(b, 0)), min_size=1, max_size=3),
    ),
)
_predicates: st.SearchStrategy[Predicate] = st.recursive(
    _tests,
    lambda inner: st.one_of(
        inner.map(Not),
        st.lists(inner, min_size=2, max_size=3).map(lambda ts: AllOf(tuple(ts))),
        st.lists(inner, min_size=2, max_size=3).map(lambda ts: AnyOf(tuple(ts))),
    ),
    max_leaves=8,
)
_records = st.builds(
    Rec,
    key=st.one_of(st.none(), _bytes),
    value=st.one_of(st.none(), _bytes, st.just(b"say api here")),
    headers=st.lists(st.tuples(_names.map(str.encode), st.one_of(st.none(), _bytes)), max_size=3),
    timestamp_delta=st.integers(0, 6),
)


def _slice(i: int, n: int) -> Predicate:
    """The i-th of n equal key slices (what a slice holder reads)."""
    lo, hi = i * SLICE_SPACE // n, (i + 1) * SLICE_SPACE // n
    return AllOf((Test(Subject.SLICE, Op.GE, (lo,)), Test(Subject.SLICE, Op.LT, (hi,))))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mine=st.one_of(
        st.tuples(st.integers(1, 4)).flatmap(lambda n: st.integers(0, n[0] - 1).map(lambda i: _slice(i, n[0]))),
        _predicates,
    ),
    where=st.one_of(st.none(), _predicates),
    records=st.lists(_records, max_size=6),
    codec=st.sampled_from(sorted(CODECS.values())),
    base=st.integers(0, 2**40),
)
def test_another_readers_records_are_foreign_not_filtered_and_never_matched_against_where(
    mine: Predicate, where: Predicate | None, records: list[Rec], codec: int, base: int
) -> None:
    """A slice holder's decoder leaves out the records of other slices as foreign (another reader's: not done
    by being left out here) and filters only its own: each offset is exactly one of kept, filtered and
    foreign, in both decoders."""
    data = build_batch(records, first_timestamp=FIRST_TS, codec=codec if records else NONE, base_offset=base)

    def holds(p: Predicate, i: int, r: Rec) -> bool:
        return matches(
            p,
            key=r.key,
            value=r.value,
            timestamp=FIRST_TS + r.timestamp_delta,
            partition=2,
            headers=[(k.decode(), v) for k, v in r.headers],
            offset=base + i,
        )

    foreign = [base + i for i, r in enumerate(records) if not holds(mine, i, r)]
    filtered = [base + i for i, r in enumerate(records) if base + i not in foreign and where and not holds(where, i, r)]
    kept = [base + i for i in range(len(records)) if base + i not in foreign + filtered]
    for impl in IMPLS:
        batch = native.decode(
            data,
            where=None if where is None else compile_where(render(where)),
            mine=compile_where(render(mine)),
            partition=2,
            impl=impl,
        )
        assert [r.offset for r in batch.records()] == kept, impl
        assert (batch.foreign, batch.filtered) == (len(foreign), len(filtered)), impl
        assert [o for a, b in batch.foreign_ranges for o in range(a, b)] == foreign, impl
        assert [o for a, b in batch.filtered_ranges for o in range(a, b)] == filtered, impl


def test_every_key_is_in_exactly_one_of_n_slices() -> None:
    """Slices split a partition's keys between their holders: none is read by two, none by nobody."""
    records = [Rec(key=b"tenant-%d" % i, value=b"v") for i in range(200)] + [Rec(key=None, value=b"v")] * 20
    data = build_batch(records, first_timestamp=FIRST_TS, codec=ZSTD)
    for n in (1, 2, 3, 4):
        read: list[int] = []
        for i in range(n):
            batch = native.decode(data, mine=compile_where(render(_slice(i, n))), partition=0)
            assert batch.count + batch.foreign == len(records) and batch.filtered == 0
            read += [r.offset for r in batch.records()]
        assert sorted(read) == list(range(len(records))), n


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=_predicates,
    records=st.lists(_records, max_size=6),
    partition=st.integers(0, 3),
    codec=st.sampled_from(sorted(CODECS.values())),
    base=st.one_of(st.just(0), st.integers(0, 2**40)),
)
def test_both_decoders_keep_exactly_what_matches_says(
    p: Predicate, records: list[Rec], partition: int, codec: int, base: int
) -> None:
    text = render(p)
    assert parse(text) == p, "what a predicate renders to parses back to it"
    where = compile_where(text)
    data = build_batch(records, first_timestamp=FIRST_TS, codec=codec if records else NONE, base_offset=base)
    want = [
        base + i
        for i, r in enumerate(records)
        if matches(
            p,
            key=r.key,
            value=r.value,
            timestamp=FIRST_TS + r.timestamp_delta,
            partition=partition,
            headers=[(k.decode(), v) for k, v in r.headers],
            offset=base + i,
        )
    ]
    got = {impl: native.decode(data, where=where, partition=partition, impl=impl) for impl in IMPLS}
    left_out = [base + i for i in range(len(records)) if base + i not in want]
    for impl, batch in got.items():
        assert [r.offset for r in batch.records()] == want, impl
        assert batch.filtered == len(records) - len(want), impl
        assert [o for s, e in batch.filtered_ranges for o in range(s, e)] == left_out, impl
        assert all(a[1] < b[0] for a, b in zip(batch.filtered_ranges, batch.filtered_ranges[1:], strict=False)), (
            "runs merged"
        )
    for column in ("offsets", "timestamps", "keys", "values", "hkeys", "hvalues", "hvalue_valid"):
        assert bytes(got["native"].columns[column]) == bytes(got["python"].columns[column]), column
    assert program(p) == program(where.tree)
