"""Redrives: a group's rejected records produced again into a lane, once each, however often the run is killed.

The records travel client-side (the dlq copies are read from Kafka and produced straight back; nothing passes
through the coordinator); the commit log keeps what makes the run exact. A run claims one batch at a time
(`claim`): the batch, where the next one starts, and the target lane's end offsets at that moment, under a
claim that lasts CLAIM_MS and is renewed by every step. Once the batch is produced, `complete` marks its
rejects redriven (or the run's next claim does, first, in its transaction: one call a batch). A run killed
between the two leaves its batch *in doubt*: the next run's claim hands it back with the offsets the target
had before it, and the run looks there for the records' provenance headers to produce only those that did not
land. A second run on the same group and stream waits while the first one's claim holds.

A claimed batch records how many times a rewind or a purge had changed the group's marks on the stream
(`commitlog.reject_changes`); its completion, finding the count unchanged, sets the batch's redriven bits
without reading its marks again.

A run may claim its next batch while it produces one (MAX_FLIGHTS batches in flight), so that the commit
log's work and Kafka's overlap. Each batch has an id its completion names; a claim says how many batches the
run holds, which tells a retried claim (its answer was lost: the batch is handed back) from a new one. A
walk passes over the rejects of batches in flight, and a run that takes over a killed one's claim gets all of
its batches as one, in doubt, with the target's offsets from before the first of them.
"""

from __future__ import annotations

from typing import Any

import orjson

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups.leases import parse_lease_id
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.records import get_cluster, get_stream
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, StreamplaneError
from streamplane.model import (
    PartitionRef,
    RedriveClaim,
    RedriveTarget,
    RejectedRecord,
    RejectRun,
    RunRow,
    pack_runs,
    run_row,
)
from streamplane.names import check_lane_name, check_object_name

CLAIM_MS = 10_000
"""How long a run's claim holds without a step: a killed run's batch can be taken over after this."""
MAX_BATCH = 5000
"""Rejects one claim hands out at most (its claim value stays under 50 KB; its completion writes 5,000 marks,
about 1 MB, in one transaction)."""
MAX_FLIGHTS = 2
"""Batches one run holds claimed and not completed at most: the one it produces and the next one."""
MAX_LEFT = MAX_BATCH * MAX_FLIGHTS
"""Records a completion may name as left (unreadable) at most: the most one batch holds, a killed run's
batches taken over as one included. A call naming more is refused before anything is read."""


def check_left(left: int) -> None:
    """InvalidArgumentError for a completion naming more records left than any batch holds."""
    if left > MAX_LEFT:
        raise InvalidArgumentError(f"left: a batch holds at most {MAX_LEFT} records, not {left}")


def _read(tr: Transaction, group: str, stream: str) -> dict[str, Any] | None:
    """The running redrive's claim; None for none, and for one that does not decode, whole or in any field it
    holds: it is nobody's, taken over by the next run, which walks its batches' rejects (still pending) again."""
    raw = tr.get(keys.redrive_key(group, stream))
    if raw is None:
        return None
    try:
        intent = orjson.loads(raw)
        if not isinstance(intent, dict) or not isinstance(intent.get("flights", []), list):
            return None
        _check_fields(intent)
        return intent
    except (ValueError, TypeError, KeyError, AttributeError, StreamplaneError):  # orjson's errors are ValueErrors
        return None


def _check_fields(intent: dict[str, Any]) -> None:
    """Raise (ValueError, TypeError, KeyError, AttributeError, InvalidArgumentError) where a stored claim's field
    is not what a claim stores, so that no claim or completion meets it half way."""
    int(intent.get("until_ms", 0))
    int(intent.get("next_id", 1))
    for f in _flights(intent):
        int(f["id"])
        int(f.get("changes", 0))
        _target(f["target"])
        for lease_id, offsets in f["batch"].items():
            parse_lease_id(lease_id)
            [int(o) for o in offsets]


def _write(tr: Transaction, group: str, stream: str, intent: dict[str, Any]) -> None:
    """Store a claim (a claim written before batches had ids kept its one batch under "batch": now a flight)."""
    kept = {k: v for k, v in intent.items() if k not in ("batch", "target")}
    tr.set(keys.redrive_key(group, stream), orjson.dumps(kept, option=orjson.OPT_SORT_KEYS))


def _held_by_another(intent: dict[str, Any] | None, owner: str, now_ms: int) -> int:
    """How long (ms) another run's claim holds yet; 0 when none does."""
    if intent is not None and intent.get("owner") != owner:
        return max(0, int(intent.get("until_ms", 0)) - now_ms)
    return 0


Taken = tuple[PartitionRef, int, Any]
"""A pending reject a claim's walk took: its partition, offset and decoded mark."""


def _runs(taken: list[Taken]) -> tuple[RejectRun, ...]:
    """The taken rejects as the claim's packed runs (`pack_runs`), straight from their decoded marks; one whose
    dlq copy is not a copy's shape is left out, as `rejected_record` leaves it out."""
    return pack_runs(row for ref, offset, mark in taken if (row := _run_row(ref, offset, mark)) is not None)


def _run_row(ref: PartitionRef, offset: int, mark: Any) -> RunRow | None:
    """A decoded mark as a run's row; None for a dlq copy that is not a copy's shape."""
    dlq = mark.get("dlq") or None
    if dlq is None:
        return run_row(ref, offset)
    try:
        generation, partition, at, lane = int(dlq["generation"]), int(dlq["partition"]), int(dlq["offset"]), dlq["lane"]
        stream = str(dlq["stream"])
    except (ValueError, TypeError, KeyError):
        return None
    return run_row(ref, offset, stream, str(lane) if lane else "", generation, partition, at)


def _marks(
    tr: Transaction, group: str, batch: Any, *, decode: bool = True
) -> list[tuple[bytes, dict[str, Any], PartitionRef, int]]:
    """The reject marks a stored batch names that are still pending (one purged meanwhile is left out): (key,
    stored mark, partition, offset) each, one range read per partition. Without `decode`, a mark that cannot
    say anything but pending (a JSON object naming no other state) is not decoded, and comes as {}: the claim
    that took it into the batch found it pending, and only a purge or a redrive changes that."""
    out: list[tuple[bytes, dict[str, Any], PartitionRef, int]] = []
    bits = commitlog.RedrivenBits(tr)
    for lease_id, offsets in (batch or {}).items() if isinstance(batch, dict) else ():
        ref, wanted, pending = parse_lease_id(lease_id), {int(o) for o in offsets}, commitlog.PENDING_REJECT
        if not wanted:
            continue
        prefix = keys.reject_prefix(group, ref)
        first, last = keys.reject_key(group, ref, min(wanted)), keys.reject_key(group, ref, max(wanted))
        for key, raw in tr.get_range(first, last + b"\x00"):
            offset = keys.offset_in(key, prefix)
            if offset not in wanted:
                continue
            if not decode and raw[:1] == b"{" and raw[-1:] == b"}" and b"purged" not in raw and b"redriven" not in raw:
                if not bits.has(group, ref, offset):
                    out.append((key, {}, ref, offset))
                continue
            try:
                mark = commitlog.mark_of(raw)
            except ValueError:
                continue  # a mark that does not decode is left as it is
            if isinstance(mark, dict) and commitlog.reject_state(mark, bits.has(group, ref, offset)) == pending:
                out.append((key, mark, ref, offset))
    return out


def _records(tr: Transaction, group: str, batch: Any) -> list[RejectedRecord]:
    """The pending rejects a stored batch names, as the model's records."""
    records = (commitlog.rejected_record(group, ref, offset, mark) for _, mark, ref, offset in _marks(tr, group, batch))
    return [r for r in records if r is not None]


def _flights(intent: dict[str, Any]) -> list[dict[str, Any]]:
    """The batches a claim holds in flight, oldest first: {"id", "batch", "target"} each. A claim written
    before batches had ids holds at most one, under "batch", completed by id 0."""
    if "flights" in intent:
        return list(intent["flights"])
    return [{"id": 0, "batch": intent["batch"], "target": intent.get("target")}] if intent.get("batch") else []


def _target(stored: Any) -> RedriveTarget:
    """A flight's target as stored, as the model's."""
    return RedriveTarget(**{**stored, "from_offsets": tuple(stored["from_offsets"])})


def _merged(flights: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The batches of `flights` as one: {lease id: offsets}."""
    out: dict[str, list[int]] = {}
    for f in flights:
        for lease_id, offsets in f["batch"].items():
            out.setdefault(lease_id, []).extend(offsets)
    return out


def check_window(since_ms: int, until_ms: int, lane: str) -> None:
    if since_ms < 0 or until_ms < 0:
        raise InvalidArgumentError("since and until must be times in unix ms (0: no bound)")
    if until_ms and since_ms >= until_ms:
        raise InvalidArgumentError("since must be before until: the window would be empty")
    check_lane_name("to_lane", lane)
    if lane == "dlq":
        raise InvalidArgumentError("a redrive produces into a lane its group reads: not the dlq lane")


@transactional
def claim(
    tr: Transaction,
    stream: str,
    group: str,
    owner: str,
    *,
    target: RedriveTarget,
    since_ms: int = 0,
    until_ms: int = 0,
    cursor: str = "",
    batch_size: int = MAX_BATCH,
    in_flight: int = 0,
    packed: bool = False,
    complete_batch_id: int = 0,
    left: frozenset[tuple[PartitionRef, int]] = frozenset(),
    now_ms: int,
) -> RedriveClaim:
    """The next batch of the group's pending rejects on `stream`, rejected in [since_ms, until_ms) (0: no
    bound), for run `owner`, after `cursor`; or the batches a killed run left in doubt, as one; or, while
    another run's claim holds, nothing but how long it holds yet. `target` is the lane to produce into, as it
    is now (its end offsets read before this transaction). `in_flight`: the batches this run holds claimed
    and not completed; fewer than the commit log holds for it means this claim is a retry whose answer was
    lost, and its batch is handed back in doubt. `packed`: a new batch comes as `runs`, no record built for
    each of its rejects (what a run asks for; a batch in doubt comes as records either way).
    `complete_batch_id`: a batch of this run it has produced, completed first, as `complete` completes it (less
    those `left`), so that a run makes one call a batch; `in_flight` counts what it holds after that one."""
    check_object_name("group", group)
    check_window(since_ms, until_ms, target.lane)
    if not owner:
        raise InvalidArgumentError("a redrive run needs an owner id")
    if not 0 <= in_flight < MAX_FLIGHTS:
        raise InvalidArgumentError(f"a redrive run holds at most {MAX_FLIGHTS} batches, not {in_flight + 1}")
    if complete_batch_id:
        _complete(tr, stream, group, owner, left, complete_batch_id, now_ms)
        if tr.get(keys.redrive_key(group, stream)) is None:  # the walk had ended: its last batch released the claim
            return RedriveClaim((), target, "", done=True)
    intent = _read(tr, group, stream) or {}
    if wait_ms := _held_by_another(intent, owner, now_ms):
        return RedriveClaim((), None, "", wait_ms=wait_ms)
    flights = _flights(intent)
    ours = intent.get("owner") == owner
    if flights and not (ours and in_flight == len(flights)):
        if ours and in_flight > len(flights):
            raise FailedPreconditionError(
                f"this run of the redrive of group {group!r} on {stream} holds batches the commit log does not: "
                "run it again"
            )
        # the run's own last claim, asked again; or a killed run's batches, taken over as one
        held = flights[-1:] if ours else flights
        records = _records(tr, group, _merged(held))
        kept = flights if ours else [{"id": flights[-1]["id"], "batch": _merged(flights), "target": held[0]["target"]}]
        # the run that left them goes on from its cursor; another one walks from the start once they are done
        # (what was redriven is passed over; a reject recorded meanwhile before the cursor is not)
        resume = str(intent.get("cursor", "")) if ours else ""
        _write(
            tr,
            group,
            stream,
            {**intent, "owner": owner, "until_ms": now_ms + CLAIM_MS, "flights": kept, "cursor": resume},
        )
        return RedriveClaim(
            tuple(records), _target(held[0]["target"]), resume, in_doubt=True, batch_id=int(kept[-1]["id"])
        )
    size = max(1, min(batch_size, MAX_BATCH))
    flying = {(parse_lease_id(lease_id), int(o)) for lease_id, offsets in _merged(flights).items() for o in offsets}
    bits = commitlog.RedrivenBits(tr)

    def take(_: str, key: bytes, ref: PartitionRef, offset: int, raw: bytes) -> Taken | None:
        """A pending reject in the window, not in a batch in flight: the mark decoded, no record built."""
        if flying and (ref, offset) in flying:
            return None
        try:
            mark = commitlog.mark_of(raw)
            at = int(mark.get("time_ms", 0))
        except (ValueError, TypeError, AttributeError):
            return None  # a mark that does not decode is left out
        if at < since_ms or (until_ms and at >= until_ms):
            return None
        pending = commitlog.reject_state(mark, bits.has(group, ref, offset)) == commitlog.PENDING_REJECT
        return (ref, offset, mark) if pending else None

    found, token = commitlog.walk_marks(
        tr,
        stream,
        group=group,
        size=size,
        budget=size * commitlog.REJECT_SCAN_PAGES,
        page_token=cursor,
        take=take,
    )
    runs = _runs(found) if packed else ()
    records = [] if packed else [r for r in (commitlog.rejected_record(group, *t) for t in found) if r is not None]
    batch: dict[str, list[int]] = {}
    for run in runs:
        batch.setdefault(run.partition.lease_id, []).extend(run.offsets)
    for r in records:
        batch.setdefault(r.partition.lease_id, []).append(r.offset)
    if not batch and not token:
        if not flights:
            tr.clear(keys.redrive_key(group, stream))
        else:  # released once the batches in flight are completed
            _write(tr, group, stream, {**intent, "until_ms": now_ms + CLAIM_MS, "cursor": "", "ended": True})
        return RedriveClaim((), target, "", done=True)
    batch_id = int(intent.get("next_id", 1))
    flight = {
        "id": batch_id,
        "batch": batch,
        "target": {**target.__dict__, "from_offsets": list(target.from_offsets)},
        "changes": commitlog.reject_changes(tr, group, stream),
    }
    claimed = {
        "owner": owner,
        "until_ms": now_ms + CLAIM_MS,
        "cursor": token,
        "flights": [*flights, flight],
        "next_id": batch_id + 1,
    }
    if not token:  # the walk's last batch: the run ends with it, and its completion releases the claim
        claimed["ended"] = True
    _write(tr, group, stream, claimed)
    return RedriveClaim(tuple(records), target, token, batch_id=batch_id, last=not token, runs=runs)


@transactional
def complete(
    tr: Transaction,
    stream: str,
    group: str,
    owner: str,
    *,
    left: frozenset[tuple[PartitionRef, int]] = frozenset(),
    batch_id: int = 0,
    now_ms: int,
) -> int:
    """See `_complete`: in a transaction of its own."""
    check_object_name("group", group)
    return _complete(tr, stream, group, owner, left, batch_id, now_ms)


def _complete(
    tr: Transaction,
    stream: str,
    group: str,
    owner: str,
    left: frozenset[tuple[PartitionRef, int]],
    batch_id: int,
    now_ms: int,
) -> int:
    """The run's batch `batch_id` (0: its oldest) is in the target lane: mark its rejects redriven (one purged
    meanwhile stays purged, and those `left`, which the run could not read, stay pending), keep the claim for
    the next batch (or release it, once the walk has ended and nothing is in flight). Returns how many were
    marked: 0 for a batch completed already (a retried completion). The marks are not written: their redriven
    bits are set, a chunk of a partition at a time. Nor are they read, unless a rewind or a purge changed the
    group's marks on the stream since the batch was claimed (the count the claim recorded has moved): the claim
    took pending marks only, and nothing else changes one (a batch taken over from a killed run, which records
    no count, is read too)."""
    intent = _read(tr, group, stream)
    if intent is None or intent.get("owner") != owner:
        raise FailedPreconditionError(
            f"this run's claim on the redrive of group {group!r} on {stream} was taken over by another run: stop"
        )
    flights = _flights(intent)
    done = next((f for f in flights if not batch_id or f.get("id") == batch_id), None)
    by_partition: dict[PartitionRef, list[int]] = {}
    changes = done.get("changes") if done is not None else None
    if done is not None and type(changes) is int and changes == commitlog.reject_changes(tr, group, stream):
        # no rewind or purge since the claim, which took pending marks only: they are pending still
        for lease_id, offsets in done["batch"].items():
            ref = parse_lease_id(lease_id)
            by_partition[ref] = [o for o in offsets if (ref, o) not in left] if left else offsets
    else:
        for _, _, ref, offset in _marks(tr, group, done["batch"] if done else None, decode=False):
            if (ref, offset) not in left:
                by_partition.setdefault(ref, []).append(offset)
    bits, moved = commitlog.RedrivenBits(tr), []
    for ref, offsets in by_partition.items():
        moved += [(ref, commitlog.PENDING_REJECT, commitlog.REDRIVEN)] * bits.add(group, ref, offsets)
    commitlog.count_state_changes(tr, group, moved)
    rest = [f for f in flights if f is not done]
    if not rest and intent.get("ended"):
        tr.clear(keys.redrive_key(group, stream))
    else:
        _write(tr, group, stream, {**intent, "flights": rest, "until_ms": now_ms + CLAIM_MS})
    return len(moved)


def target_of(db: Database, admin: ClusterAdmin, stream: str, lane: str) -> RedriveTarget:
    """The lane a redrive produces into, as it is now: its active generation and each partition's end offset
    (UnavailableError when its cluster does not answer)."""
    check_lane_name("to_lane", lane)
    gen = get_stream(db, stream).require_lane(lane).active
    cluster = get_cluster(db, gen.cluster)
    ends = tuple(admin.end_offsets(cluster, gen.topic, gen.partitions))  # one request a leader, leaders kept
    return RedriveTarget(stream, lane, gen.number, gen.topic, cluster.bootstrap_servers, ends)
