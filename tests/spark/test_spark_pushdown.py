"""Which of Spark's filters the batch reader pushes into the decoder, and as what (no Spark session needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, Not, StringStartsWith

from streamplane.predicate import MAX_IN, MAX_TERMS, Op, Subject, Test
from streamplane.spark.batch import PushdownBatchReader, as_test
from streamplane.spark.options import SourceOptions


def test_key_partition_and_timestamp_comparisons_become_tests() -> None:
    at = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    ms = int(at.timestamp() * 1000)
    assert as_test(EqualTo(("key",), b"us-1")) == Test(Subject.KEY, Op.EQ, (b"us-1",))
    assert as_test(In(("key",), (b"a", bytearray(b"b")))) == Test(Subject.KEY, Op.IN, (b"a", b"b"))
    assert as_test(IsNotNull(("key",))) == Test(Subject.KEY, Op.EXISTS)
    assert as_test(In(("partition",), (1, 3))) == Test(Subject.PARTITION, Op.IN, (1, 3))
    assert as_test(GreaterThanOrEqual(("timestamp",), at)) == Test(Subject.TIMESTAMP, Op.GE, (ms,))
    plus_one = at.astimezone(timezone(timedelta(hours=1)))
    assert as_test(LessThan(("timestamp",), plus_one)) == Test(Subject.TIMESTAMP, Op.LT, (ms,))
    assert as_test(LessThan(("timestamp",), at.replace(tzinfo=None))) == Test(Subject.TIMESTAMP, Op.LT, (ms,))


def test_what_the_decoder_cannot_evaluate_stays_with_spark() -> None:
    assert as_test(EqualTo(("key",), "text")) is None, "a string is not the binary key"
    assert as_test(In(("key",), tuple(b"%d" % i for i in range(MAX_IN + 1)))) is None, "too long a list"
    assert as_test(EqualTo(("partition",), True)) is None
    assert as_test(GreaterThanOrEqual(("partition",), 2)) is None, "the grammar has no range on partitions"
    assert as_test(StringStartsWith(("value",), "GET")) is None
    assert as_test(EqualTo(("headers", "key"), b"x")) is None, "a nested column"
    assert as_test(Not(EqualTo(("key",), b"x"))) is None


def test_pushing_stops_at_the_grammars_limit_and_slices_are_chosen_by_generation() -> None:
    reader = PushdownBatchReader(SourceOptions.parse({"stream": "s"}))
    filters = [EqualTo(("partition",), i) for i in range(MAX_TERMS + 3)] + [EqualTo(("generation",), 2)]
    left = list(reader.pushFilters(filters))
    assert len(reader.pushed) == MAX_TERMS and left == filters[MAX_TERMS:-1]
    assert reader.slicing == [filters[-1]]
    where = reader.where()
    assert where is not None and where.text.count("partition = ") == MAX_TERMS
