"""Offsets of the Spark source: positions per lane, generation and partition, and how a micro-batch is planned
over them. Pure functions: no Spark, no network.

An offset is a JSON-able dict that Spark keeps verbatim in its checkpoint:

    {"source": {"coordinator": ..., "stream": ..., "group": ...},
     "positions": {"realtime/1/0": 1200, "realtime/2/0": 35, ...},
     "done": ["realtime/1"]}

"lane/generation/partition" -> the next offset to read; "done" lists the generations this query has finished.

The rules the planner keeps, whatever the history of the stream (tests/spark/test_spark_offsets.py holds it to a
model over random histories):

- **Positions never go back, and a key never leaves.** Every key of the start is in the end, at the same
  position or further. So a batch reads [start, end) of each key, and successive batches neither overlap nor
  leave a gap.
- **A generation read to its end is done for this query.** Once it is sealed (its end offsets are fixed) and
  every partition is read to its end, it goes into "done" in the same plan, and no later plan looks at it
  again, whether it has since drained or not, and whatever the topology or its cluster say afterwards.
- **A generation settled (drained or abandoned) before this query first saw it is done at once**: every group
  that read the stream had finished it, so a new query does not start it over. (Checkpoints written before
  "done" existed dropped such generations' keys; they are recognised the same way.) An abandoned generation is
  done even part-read: its operator gave up what was unread.
- **A partition first seen enters at its beginning and advances from the next plan**: its start position is in
  an offset before any of its records is planned, so a range is always [start, end) of two offsets Spark has
  kept, never a guess made again at read time.
- **availableNow reads to a target** taken when the trigger starts; what comes after is left for the next
  run, and the plan becomes stable (the query ends) once the target is reached.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamplane.errors import InvalidArgumentError
from streamplane.model import ABANDONED, DRAINED, SEALED, SETTLED, GenerationState, PartitionRef

EARLIEST, LATEST = -2, -1


def offset_key(ref: PartitionRef) -> str:
    """How an offset names a partition: "lane/generation/partition" (the stream is the source's)."""
    return f"{ref.lane}/{ref.generation}/{ref.partition}"


def parse_offset_key(stream: str, key: str) -> PartitionRef:
    """The partition of `stream` an offset's key names."""
    lane, generation, partition = key.rsplit("/", 2)
    return PartitionRef(stream, lane, int(generation), int(partition))


def generation_of(key: str) -> str:
    """The generation (its "done" name, "lane/generation") an offset's partition key belongs to."""
    return key.rsplit("/", 1)[0]


def oldest_first(ref: PartitionRef) -> tuple[int, str, int]:
    """The order a plan with a row limit serves partitions in: older generations first."""
    return ref.generation, ref.lane, ref.partition


def generation_key(lane: str, generation: int) -> str:
    """How "done" names a generation: "lane/generation"."""
    return f"{lane}/{generation}"


@dataclass(frozen=True)
class PartState:
    """What the topology and the cluster say about a partition now."""

    part: PartitionRef
    topic: str
    bootstrap_servers: str
    earliest: int
    latest: int
    """The end to read to: the high watermark, or the sealed end offset once the generation is sealed."""
    state: GenerationState = GenerationState.ACTIVE

    @property
    def end_fixed(self) -> bool:
        """`latest` is the generation's sealed end: nothing will ever be written past it."""
        return self.state in (SEALED, DRAINED)


@dataclass(frozen=True)
class Offset:
    """A position of the query: the next offset to read per partition, and the generations it has finished."""

    source: Mapping[str, str]
    positions: Mapping[str, int]
    done: frozenset[str] = field(default_factory=frozenset)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark keeps in its checkpoint (sorted, so that an unchanged offset compares equal)."""
        return {
            "source": dict(self.source),
            "positions": dict(sorted(self.positions.items())),
            "done": sorted(self.done),
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Offset:
        """An offset from a checkpoint, including those written before "done" existed."""
        try:
            positions = {str(k): int(v) for k, v in raw.get("positions", {}).items()}
            return Offset(dict(raw.get("source", {})), positions, frozenset(str(g) for g in raw.get("done", ())))
        except (AttributeError, TypeError, ValueError) as err:
            raise InvalidArgumentError(f"the checkpoint holds an offset this source cannot read: {raw!r}") from err


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


def parse_ending_timestamp(text: str) -> int | None:
    """endingTimestamp: unix ms; every partition ends before its first record at or after it."""
    if not text.strip():
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise InvalidArgumentError(f"endingTimestamp must be a unix time in ms, not {text!r}")
    return int(text)


def initial_offset(source: Mapping[str, str], states: Iterable[PartState], starting: str | dict[str, int]) -> Offset:
    """Where a new query starts: every partition of the generations not settled yet, at its starting position.

    Generations settled before the query started are done at once; a sealed generation whose partitions all
    start at their end is done as well."""
    states = list(states)
    positions: dict[str, int] = {}
    settled: set[str] = set()
    for s in states:
        if s.state in SETTLED:
            settled.add(generation_key(s.part.lane, s.part.generation))
            continue
        if isinstance(starting, dict):
            want = starting.get(offset_key(s.part), EARLIEST)
        else:
            want = LATEST if starting == "latest" else EARLIEST
        at = s.earliest if want == EARLIEST else s.latest if want == LATEST else max(want, s.earliest)
        positions[offset_key(s.part)] = at
    done = frozenset(settled)
    return Offset(source, positions, done | _finished(positions, states, done))


def next_offset(
    start: Offset,
    states: Iterable[PartState],
    max_rows: int | None = None,
    target: Mapping[str, int] | None = None,
) -> Offset:
    """The end of the next micro-batch, planned from its start.

    Known partitions advance towards their end (`target`'s with availableNow: partitions it does not know do
    not advance). Partitions first seen enter at their earliest offset without advancing. With `max_rows`,
    older generations go first (a draining generation is finished before the next one grows), and rows are
    shared within a generation in proportion to what each partition has. Done generations are not looked at.
    A plan with nothing new returns an offset equal to its start: Spark then runs no batch.
    """
    live = [s for s in states if generation_key(s.part.lane, s.part.generation) not in start.done]
    known_gens = {generation_of(k) for k in start.positions}
    positions = dict(start.positions)  # a key never leaves; one we cannot look at now keeps its position
    done = set(start.done)
    advance: dict[str, int] = {}
    gen_of: dict[str, tuple[int, str]] = {}
    for s in sorted(live, key=lambda x: oldest_first(x.part)):
        key, gkey = offset_key(s.part), generation_key(s.part.lane, s.part.generation)
        if key not in positions:
            if gkey not in known_gens and s.state in SETTLED:
                done.add(gkey)  # settled before this query first saw it
                continue
            positions[key] = s.earliest  # enters now, advances from the next plan
            continue
        if s.state == ABANDONED:
            done.add(gkey)  # its operator gave up what was unread
            continue
        pos = positions[key]
        end = s.latest if target is None else min(s.latest, target.get(key, pos))
        if end > pos:
            advance[key] = end - pos
            gen_of[key] = (s.part.generation, s.part.lane)
    if max_rows is not None:
        advance = _within(advance, gen_of, max_rows)
    for key, rows in advance.items():
        positions[key] += rows
    done |= _finished(positions, live, frozenset(done))
    return Offset(start.source, positions, frozenset(done))


def _within(want: dict[str, int], gen_of: dict[str, tuple[int, str]], max_rows: int) -> dict[str, int]:
    """`want` cut to at most `max_rows` in all: oldest generations first, shared in proportion within one."""
    gens: dict[tuple[int, str], list[str]] = {}
    for key in want:
        gens.setdefault(gen_of[key], []).append(key)
    out: dict[str, int] = {}
    left = max_rows
    for g in sorted(gens):
        members = gens[g]
        total = sum(want[k] for k in members)
        if total <= left:
            out.update((k, want[k]) for k in members)
            left -= total
            continue
        share = {k: (want[k] * left) // total for k in members}
        spare = left - sum(share.values())
        for k in sorted(members, key=lambda k: -(want[k] - share[k])):
            if spare <= 0:
                break
            if share[k] < want[k]:
                share[k] += 1
                spare -= 1
        out.update((k, n) for k, n in share.items() if n)
        break
    return out


def _finished(positions: Mapping[str, int], states: list[PartState], done: frozenset[str]) -> set[str]:
    """Generations whose end is fixed and whose every partition is at that end."""
    at_end: dict[str, bool] = {}
    for s in states:
        gkey = generation_key(s.part.lane, s.part.generation)
        if gkey in done:
            continue
        ok = s.end_fixed and positions.get(offset_key(s.part), -1) >= s.latest
        at_end[gkey] = at_end.get(gkey, True) and ok
    return {g for g, ok in at_end.items() if ok}


def ranges(start: Offset, end: Offset) -> list[tuple[str, int, int]]:
    """What a batch reads: (key, begin, end) for every partition that advanced from `start` to `end`."""
    out = []
    for key, until in sorted(end.positions.items()):
        frm = start.positions.get(key, until)  # a key first seen in `end` entered there, reading nothing yet
        if until > frm:
            out.append((key, frm, until))
    return out


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
