"""The batch reader: `spark.read.format("streamplane")` over a window of a stream (startingTimestamp or
startingOffsets, to endingTimestamp or to what is there now), planned as a streaming query's first
availableNow batch is, on every generation that holds part of it.

With filter pushdown on (the default; `streamplane.spark.register` turns Spark's
spark.sql.python.filterPushdown.enabled on), the comparisons Spark hands over on `key`, `timestamp` and
`partition` become a record predicate that the native decoder evaluates, so rows that do not match are never
built; comparisons on `stream`, `lane` and `generation` leave whole partitions unread. What cannot be pushed
stays with Spark. `explain()` lists what was pushed (PushedFilters). `.option("pushdown", "false")` reads
without it (the same rows: Spark filters them itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streamplane.native.where import Where, compile_tree
from streamplane.predicate import MAX_IN, MAX_TERMS, AllOf, Op, Predicate, Subject, Test, parse
from streamplane.spark.options import SourceOptions
from streamplane.spark.reader import Slice, StreamReader, Task, read_task

_OPS: dict[type, Op] = {
    EqualTo: Op.EQ,
    GreaterThan: Op.GT,
    GreaterThanOrEqual: Op.GE,
    LessThan: Op.LT,
    LessThanOrEqual: Op.LE,
    In: Op.IN,
}
_SLICE_FIELDS = {"stream", "lane", "generation"}


def _ms(value: Any) -> int | None:
    """A timestamp filter's value in unix ms (Spark hands a datetime; a naive one is UTC)."""
    if not isinstance(value, datetime):
        return None
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _column(f: Filter) -> str:
    """The top-level column a filter compares ("" for a nested one, or a filter on none)."""
    path: tuple[str, ...] = getattr(f, "attribute", ())
    return str(path[0]) if len(path) == 1 else ""


def as_test(f: Filter) -> Test | None:
    """The record predicate test one Spark filter is, or None when the decoder cannot evaluate it."""
    column = _column(f)
    if column == "key":
        if isinstance(f, IsNotNull):
            return Test(Subject.KEY, Op.EXISTS)
        values = f.value if isinstance(f, In) else (getattr(f, "value", None),)
        fits = 0 < len(values) <= MAX_IN  # a longer list stays with Spark (each record would scan it)
        if type(f) in (EqualTo, In) and fits and all(isinstance(v, bytes | bytearray) for v in values):
            return Test(Subject.KEY, _OPS[type(f)], tuple(bytes(v) for v in values))
        return None
    if column == "partition" and type(f) in (EqualTo, In):
        values = f.value if isinstance(f, In) else (f.value,)  # type: ignore[attr-defined]
        if 0 < len(values) <= MAX_IN and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return Test(Subject.PARTITION, _OPS[type(f)], tuple(values))
        return None
    if column == "timestamp" and type(f) in _OPS and not isinstance(f, In):
        ms = _ms(f.value)  # type: ignore[attr-defined]
        return Test(Subject.TIMESTAMP, _OPS[type(f)], (ms,)) if ms is not None else None
    return None


def _keeps(f: Filter, s: Slice) -> bool | None:
    """Whether a filter on stream, lane or generation keeps a slice (None: not such a filter)."""
    column = _column(f)
    if column not in _SLICE_FIELDS or type(f) not in (EqualTo, In):
        return None
    values = f.value if isinstance(f, In) else (f.value,)  # type: ignore[attr-defined]
    return getattr(s, column) in values


class BatchReader(DataSourceReader):
    """A window of a stream as one batch, without filter pushdown."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.pushed: list[Test] = []
        self.slicing: list[Filter] = []

    def where(self) -> Where | None:
        """The record predicate the decoder evaluates: the where option's and the pushed filters', and-ed."""
        parts: list[Predicate] = ([parse(self.opts.where)] if self.opts.where else []) + list(self.pushed)
        if not parts:
            return None
        return compile_tree(parts[0] if len(parts) == 1 else AllOf(tuple(parts)))

    def partitions(self) -> list[Task]:
        planner = StreamReader(self.opts)
        try:
            planner.prepareForTriggerAvailableNow()
            start = planner.initialOffset()
            end = planner.latestOffset(start, ReadAllAvailable())
            slices = planner.slices(start, end)
            return planner.tasks([s for s in slices if all(_keeps(f, s) is not False for f in self.slicing)])
        finally:
            planner.stop()

    def read(self, partition: Task) -> Iterator[Any]:  # type: ignore[override]
        if not isinstance(partition, Task):
            return  # Spark reads one empty partition of its own when the window holds none
        yield from read_task(partition, self.opts, self.where())


class PushdownBatchReader(BatchReader):
    """A window of a stream as one batch, with the filters Spark hands over pushed into the decoder."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            test = as_test(f) if len(self.pushed) < MAX_TERMS else None
            if test is not None:
                self.pushed.append(test)
            elif _keeps(f, Slice("", "", 0, 0, "", "", 0, 0)) is not None:
                self.slicing.append(f)
            else:
                yield f
