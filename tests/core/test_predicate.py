"""Record predicates (issue 39, first part): the grammar, an error sentence naming the column for every way a
predicate can be wrong, and the Python reference evaluator, checked on examples and on random predicates
that print and parse back to themselves."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane import predicate as pr
from streamplane.errors import InvalidArgumentError

RECORD = {
    "key": b"us-east-17",
    "value": b'{"level":"error","msg":"disk full"}',
    "timestamp": 1_700_000_000_500,
    "partition": 3,
    "headers": [("service", b"api"), ("env", b"prod"), ("service", b"web"), ("trace", None)],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("header(service) = 'api'", True),
        ("header(service) = 'web'", True),  # any header of that name
        ("header(service) = 'db'", False),
        ("header(service) != 'db'", True),
        ("header('service') ^= 'ap'", True),
        ("header(service) in ('db', 'api')", True),
        ("header(trace) exists", True),  # a header with a null value is there
        ("header(missing) exists", False),
        ("not header(missing) exists", True),
        ("key = 'us-east-17'", True),
        ("key ^= 'us-'", True),
        ("key ^= 'eu-'", False),
        ("key in ('a', 'us-east-17')", True),
        ("key exists", True),
        ("value ^= '{\"level\"'", True),
        ("value contains 'disk full'", True),
        ("value contains 'DISK'", False),
        ("timestamp >= 1700000000000 and timestamp < 1700000001000", True),
        ("timestamp > 1700000000500", False),
        ("timestamp <= 1700000000500", True),
        ("partition in (1, 3, 5)", True),
        ("partition = 2", False),
        ("partition != 2", True),
        ("header(service) = 'db' or key ^= 'us-'", True),
        ("header(service) = 'api' and key ^= 'us-' and not value contains 'ok'", True),
        ("NOT (header(env) = 'prod' OR partition = 0)", False),
        ("key = 'it''s'", False),
        ("value contains '\\x7b'", True),  # { as a byte escape
        (f"slice = {zlib.crc32(b'us-east-17')}", True),  # the key's CRC-32
        (f"slice < {zlib.crc32(b'us-east-17')}", False),
        ("slice >= 0 and slice < 4294967296", True),  # every key falls in the whole space
    ],
)
def test_examples(text: str, expected: bool) -> None:
    assert pr.matches(pr.parse(text), **RECORD) is expected  # type: ignore[arg-type]


def test_a_keys_slice_is_its_crc32_and_a_keyless_records_is_its_offsets() -> None:
    """The same key falls in the same slice on every client and at every offset; records without a key spread
    by offset. Equal ranges of the space take about equal shares of keys."""
    assert pr.slice_hash(b"a", 0) == pr.slice_hash(b"a", 99) == 0xE8B7BE43  # zlib's CRC-32 of b"a"
    assert pr.slice_hash(None, 7) == zlib.crc32((7).to_bytes(8, "big"))
    assert pr.slice_hash(None, 7) != pr.slice_hash(None, 8)
    quarter = pr.SLICE_SPACE // 4
    shares = [0] * 4
    for i in range(4000):
        shares[pr.slice_hash(b"tenant-%d" % i, 0) // quarter] += 1
    assert all(800 < n < 1200 for n in shares), shares
    first = pr.parse(f"slice < {quarter}")
    assert pr.matches(first, key=None, value=None, timestamp=0, partition=0, offset=7) == (
        pr.slice_hash(None, 7) < quarter
    )


def test_a_null_key_does_not_exist_and_matches_no_value() -> None:
    p = pr.parse("key exists or key = '' or key ^= ''")
    assert not pr.matches(p, key=None, value=b"", timestamp=0, partition=0)
    assert pr.matches(pr.parse("key != 'x'"), key=None, value=b"", timestamp=0, partition=0)


@pytest.mark.parametrize(
    ("text", "column", "sentence"),
    [
        ("", 1, "the predicate is empty"),
        ("   ", 1, "the predicate is empty"),
        ("key = 'api", 7, "a string is not closed"),
        ("key = 'a' ;", 11, "unexpected ';'"),
        ("tenant = 'a'", 1, "expected a test on key, value, timestamp, partition, slice, header; found 'tenant'"),
        ("slice ^= 'a'", 7, "slice takes != < <= = > >= in, not ^="),
        ("slice < 'half'", 9, "expected a number, found \"'half'\""),
        ("key 'a'", 5, "expected an operator"),
        ("value = 'a'", 7, "value takes ^= contains, not ="),
        ("timestamp ^= 5", 11, "timestamp takes"),
        ("partition contains 'x'", 11, "partition takes != = in, not contains"),
        ("header service = 'a'", 8, "expected '(' and a header name"),
        ("header(5) = 'a'", 8, "expected a header name, found '5'"),
        ("header(service = 'a'", 16, "expected ')' after the header name"),
        ("timestamp > 'now'", 13, "expected a number, found \"'now'\""),
        ("key = 5", 7, "expected a quoted string"),
        ("key = '\\xZ1'", 8, "\\x takes two hex digits"),
        ("key = 'a' 'b'", 11, "expected 'and', 'or' or the end, found \"'b'\""),
        ("(key = 'a'", 11, "expected ')' to close '('"),
        ("key in 'a'", 8, "expected '(' and a list after in"),
        ("key in ('a' 'b')", 13, "expected ')' to close the list"),
        ("key = 'a' and", 14, "expected a test on"),
        ("partition = 99999999999999999999", 13, "does not fit in 64 bits"),
        ("key = 'a\ud800'", 9, "a string holds a character that is not text"),
        ("not " * 33 + "key exists", 129, "parentheses and not nest at most 32 deep"),
        ("(" * 33 + "key exists" + ")" * 33, 33, "parentheses and not nest at most 32 deep"),
    ],
)
def test_every_error_is_one_sentence_naming_its_column(text: str, column: int, sentence: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        pr.parse(text)
    message = err.value.message
    assert message.startswith(f"where, column {column}: "), message
    assert sentence in message, message


def test_size_limits_are_refused_with_a_sentence() -> None:
    with pytest.raises(InvalidArgumentError, match="at most 4096"):
        pr.parse("key = '" + "a" * 5000 + "'")
    with pytest.raises(InvalidArgumentError, match=f"at most {pr.MAX_TERMS} tests"):
        pr.parse(" or ".join(f"partition = {i}" for i in range(pr.MAX_TERMS + 1)))
    with pytest.raises(InvalidArgumentError, match=f"at most {pr.MAX_IN} values"):
        pr.parse("partition in (" + ", ".join(str(i) for i in range(pr.MAX_IN + 2)) + ")")


BYTES = st.binary(max_size=6)
TESTS = st.one_of(
    st.builds(pr.Test, st.just(pr.Subject.KEY), st.sampled_from([pr.Op.EQ, pr.Op.NE, pr.Op.PREFIX]), st.tuples(BYTES)),
    st.builds(pr.Test, st.just(pr.Subject.KEY), st.just(pr.Op.IN), st.lists(BYTES, min_size=1, max_size=3).map(tuple)),
    st.builds(pr.Test, st.just(pr.Subject.KEY), st.just(pr.Op.EXISTS)),
    st.builds(
        pr.Test,
        st.just(pr.Subject.HEADER),
        st.sampled_from([pr.Op.EQ, pr.Op.PREFIX, pr.Op.EXISTS]),
        st.tuples(BYTES),
        st.sampled_from(["service", "env", "x-y"]),
    ).map(lambda t: pr.Test(t.subject, t.op, () if t.op == pr.Op.EXISTS else t.values, t.name)),
    st.builds(pr.Test, st.just(pr.Subject.VALUE), st.sampled_from([pr.Op.PREFIX, pr.Op.CONTAINS]), st.tuples(BYTES)),
    st.builds(
        pr.Test,
        st.just(pr.Subject.TIMESTAMP),
        st.sampled_from([pr.Op.LT, pr.Op.LE, pr.Op.GT, pr.Op.GE, pr.Op.EQ]),
        st.tuples(st.integers(0, 20)),
    ),
    st.builds(
        pr.Test,
        st.just(pr.Subject.PARTITION),
        st.just(pr.Op.IN),
        st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    ),
    st.builds(
        pr.Test,
        st.just(pr.Subject.SLICE),
        st.sampled_from([pr.Op.LT, pr.Op.GE, pr.Op.EQ, pr.Op.NE]),
        st.tuples(st.integers(0, pr.SLICE_SPACE)),
    ),
)
PREDICATES = st.recursive(
    TESTS,
    lambda inner: st.one_of(
        inner.map(pr.Not),
        st.lists(inner, min_size=2, max_size=3).map(lambda t: pr.AllOf(tuple(t))),
        st.lists(inner, min_size=2, max_size=3).map(lambda t: pr.AnyOf(tuple(t))),
    ),
    max_leaves=8,
)
RECORDS = st.fixed_dictionaries(
    {
        "key": st.one_of(st.none(), BYTES),
        "value": BYTES,
        "timestamp": st.integers(0, 20),
        "partition": st.integers(0, 4),
        "offset": st.integers(0, 2**40),
        "headers": st.lists(
            st.tuples(st.sampled_from(["service", "env", "x-y"]), st.one_of(st.none(), BYTES)), max_size=3
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(p=PREDICATES, record=RECORDS)
def test_random_predicates_print_and_parse_back_to_themselves_and_evaluate_alike(p: pr.Predicate, record: dict) -> None:
    text = pr.render(p)
    again = pr.parse(text)
    assert again == p, text
    assert pr.matches(again, **record) == pr.matches(p, **record), text
