"""Offsets of the Spark source: positions per lane, generation and partition, and how a micro-batch is planned
over them. Pure functions: no Spark, no network.

An offset is a JSON-able dict that Spark keeps verbatim in its checkpoint:

    {"source": {"coordinator": ..., "stream": ..., "group": ...},
     "positions": {"realtime/1/0": 1200, "realtime/2/0": 35, ...}}

"lane/generation/partition" -> the next offset to read. A failover adds the new generation's partitions (from
their earliest offset); a drained generation drops out once every one of its partitions is read to its end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streamplane.errors import InvalidArgumentError

EARLIEST, LATEST = -2, -1


@dataclass(frozen=True, order=True)
class Part:
    """One partition of one lane generation, ordered oldest generation first."""

    generation: int
    lane: str
    partition: int

    @property
    def key(self) -> str:
        return f"{self.lane}/{self.generation}/{self.partition}"

    @staticmethod
    def parse(key: str) -> Part:
        lane, generation, partition = key.rsplit("/", 2)
        return Part(int(generation), lane, int(partition))


@dataclass(frozen=True)
class PartState:
    """What the topology and the cluster say about a partition now."""

    part: Part
    topic: str
    bootstrap_servers: str
    earliest: int
    latest: int
    """The end to read to: the high watermark, or the sealed end offset."""
    drained: bool = False


def positions_of(offset: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in offset.get("positions", {}).items()}


def make_offset(source: dict[str, str], positions: dict[str, int]) -> dict[str, Any]:
    return {"source": dict(source), "positions": dict(sorted(positions.items()))}


def _per_partition(option: str, raw: Any, what: str, minimum: int, example: str) -> dict[str, int]:
    """{"lane/generation/partition": value} from an option's JSON {"lane/generation": {"partition": value}}."""
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"{option} JSON must be an object like {example}")
    out: dict[str, int] = {}
    for gen_key, parts in raw.items():
        lane, _, gen = str(gen_key).rpartition("/")
        if not lane or not gen.isdigit() or not isinstance(parts, dict):
            raise InvalidArgumentError(
                f'{option}: {gen_key!r} must be "lane/generation" mapped to {{"partition": {what}}}'
            )
        for p, value in parts.items():
            if not str(p).isdigit() or isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidArgumentError(f"{option}: {gen_key}/{p} must map a partition to {what} >= {minimum}")
            out[f"{lane}/{gen}/{p}"] = value
    return out


def parse_starting_offsets(text: str) -> str | dict[str, int]:
    """`earliest`, `latest`, or JSON {"lane/generation": {"partition": offset}} with -2 earliest, -1 latest."""
    value = (text or "earliest").strip()
    if value in ("earliest", "latest"):
        return value
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as err:
        raise InvalidArgumentError(f"startingOffsets is not 'earliest', 'latest' or JSON: {err}") from None
    return _per_partition("startingOffsets", raw, "an offset", EARLIEST, '{"realtime/1": {"0": 42}}')


def parse_starting_timestamps(by_partition: str, everywhere: str) -> int | dict[str, int] | None:
    """startingOffsetsByTimestamp (JSON {"lane/generation": {"partition": unix ms}}, as Spark's Kafka source
    has it per topic) or startingTimestamp (unix ms for every partition); None when neither is given."""
    if by_partition.strip():
        try:
            raw = json.loads(by_partition)
        except json.JSONDecodeError as err:
            raise InvalidArgumentError(f"startingOffsetsByTimestamp is not JSON: {err}") from None
        example = '{"realtime/1": {"0": 1700000000000}}'
        return _per_partition("startingOffsetsByTimestamp", raw, "a unix time in ms", 0, example)
    if everywhere.strip():
        text = everywhere.strip()
        if not text.isdigit():
            raise InvalidArgumentError(f"startingTimestamp must be a unix time in ms, not {everywhere!r}")
        return int(text)
    return None


def initial_positions(states: list[PartState], starting: str | dict[str, int]) -> dict[str, int]:
    """Where a new query starts, for every partition of the live generations."""
    out = {}
    for s in states:
        if s.drained:
            continue
        want = (
            EARLIEST
            if starting == "earliest"
            else LATEST
            if starting == "latest"
            else starting.get(s.part.key, EARLIEST)
        )
        out[s.part.key] = s.earliest if want == EARLIEST else s.latest if want == LATEST else max(want, s.earliest)
    return out


def plan_end(
    start: dict[str, int], states: list[PartState], max_rows: int | None, target: dict[str, int] | None = None
) -> dict[str, int]:
    """The end positions of the next micro-batch.

    Every live partition is in the result: known ones from their start, new ones (a failover's generation)
    from their earliest offset. With `target` (availableNow) nothing goes past it and partitions it does not
    know are not read. With `max_rows`, older generations go first (a draining generation is finished before
    the next one grows), and rows are shared within a generation in proportion to what each partition has.
    A drained generation whose partitions are all read to their end drops out.
    """
    by_key = {s.part.key: s for s in states}
    begin: dict[str, int] = {}
    stop: dict[str, int] = {}
    for s in sorted(states, key=lambda x: x.part):
        key = s.part.key
        pos = start.get(key, s.earliest)
        end = s.latest
        if target is not None:
            end = min(end, target.get(key, pos))
        begin[key], stop[key] = pos, max(pos, end)
    # drop drained generations read to their end (all their partitions)
    done_gens = {
        (s.part.lane, s.part.generation)
        for s in states
        if s.drained
        and all(
            begin[x.part.key] >= x.latest
            for x in states
            if (x.part.lane, x.part.generation) == (s.part.lane, s.part.generation)
        )
    }
    keys = [k for k in begin if (by_key[k].part.lane, by_key[k].part.generation) not in done_gens]
    if max_rows is not None:
        left = max_rows
        gens: dict[tuple[int, str], list[str]] = {}
        for k in keys:
            p = by_key[k].part
            gens.setdefault((p.generation, p.lane), []).append(k)
        for g in sorted(gens):
            members = gens[g]
            want = {k: stop[k] - begin[k] for k in members}
            total = sum(want.values())
            if total <= left:
                left -= total
                continue
            share = {k: (want[k] * left) // total if total else 0 for k in members}
            spare = left - sum(share.values())
            for k in sorted(members, key=lambda k: -(want[k] - share[k])):
                if spare <= 0:
                    break
                if share[k] < want[k]:
                    share[k] += 1
                    spare -= 1
            for k in members:
                stop[k] = begin[k] + share[k]
            left = 0
    return {k: stop[k] for k in keys}


def split(begin: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """[begin, end) cut into up to `pieces` ranges of nearly equal size."""
    pieces = max(1, min(pieces, end - begin))
    step, extra = divmod(end - begin, pieces)
    out, at = [], begin
    for i in range(pieces):
        size = step + (1 if i < extra else 0)
        out.append((at, at + size))
        at += size
    return out
