"""The committed generated code matches what scripts/genproto.py makes from the .proto files today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import REPO

GENERATED = REPO / "proto" / "streamplane" / "v1"


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "genproto.py"), "--out", str(tmp_path)], check=True, capture_output=True
    )
    fresh = {
        p.relative_to(tmp_path / "streamplane" / "v1"): p.read_bytes()
        for p in (tmp_path / "streamplane" / "v1").glob("*_pb2*.py*")
    }
    committed = {p.relative_to(GENERATED): p.read_bytes() for p in GENERATED.glob("*_pb2*.py*")}
    assert fresh, "protoc generated nothing"
    stale = sorted(str(name) for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert not stale, f"generated code is stale, run `python scripts/genproto.py`: {stale}"


def test_a_batch_of_session_events_reads_back_in_order_and_nothing_else_hides_in_it() -> None:
    """What one change means for a worker travels in one EventBatch; reading it gives the events in their
    order. A welcome or a batch inside a batch (which no coordinator sends) carries no event; one event alone
    travels as itself."""
    from streamplane import model as m
    from streamplane.v1 import assigner_pb2 as apb
    from streamplane.v1 import convert

    ref = m.PartitionRef("s", "realtime", 1, 0)
    grant = m.Grant("s/realtime/g1/p0", ref, 3, "t", "c", "b:9092", 10, -1, clean=True)
    sealed, revoke = m.Sealed("s/realtime/g1/p0", ref, 40), m.Revoke("s/realtime/g1/p0", 3)
    events: list[m.SessionEvent] = [m.Expect(2000), grant, sealed, revoke]
    message = convert.session_events_to_pb(events)
    assert message.WhichOneof("kind") == "batch"
    assert convert.session_events_from_pb(message) == events
    assert convert.session_events_to_pb([grant]).WhichOneof("kind") == "grant"
    assert convert.session_events_from_pb(convert.session_events_to_pb([m.Expect(0)])) == [m.Expect(0)]
    message.batch.events.append(apb.AssignerMessage(batch=apb.EventBatch(events=[message.batch.events[0]])))
    message.batch.events.append(apb.AssignerMessage(welcome=apb.Welcome(session_id="x")))
    assert convert.session_events_from_pb(message) == events


def test_a_slice_grant_and_a_slice_lease_read_back_with_their_slice() -> None:
    """A slice's grant carries which slice of how many (a worker that lost it would read the whole partition),
    and a described group's slice leases say theirs."""
    from streamplane import model as m
    from streamplane.v1 import convert

    ref = m.PartitionRef("s", "realtime", 1, 0)
    piece = m.Slice(1, 4)
    grant = m.Grant(m.slice_lease_id(ref, piece), ref, 3, "t", "c", "b:9092", 10, -1, slice=piece)
    assert convert.session_events_from_pb(convert.session_events_to_pb([grant])) == [grant]
    whole = m.Grant(ref.lease_id, ref, 3, "t", "c", "b:9092", 10, -1)
    assert convert.session_events_from_pb(convert.session_events_to_pb([whole])) == [whole]
    described = m.GroupDescription("g", leases=(m.LeaseInfo(ref, 3, "granted", "w1", slice=piece),))
    back = convert.group_from_pb(convert.group_to_pb(described))
    assert back.leases[0].slice == piece and back.leases[0].lease_id == "s/realtime/g1/p0/s1of4"


def _rejected_records() -> Any:
    from streamplane import model as m

    dlq = st.one_of(
        st.none(),
        st.builds(
            m.DlqLocation,
            st.just("s"),
            st.sampled_from(["dlq", "dlq-b"]),
            st.integers(0, 2),
            st.integers(0, 3),
            st.integers(0, 10**12),
        ),
    )
    record = st.builds(
        m.RejectedRecord,
        partition=st.builds(
            m.PartitionRef, st.just("s"), st.sampled_from(["realtime", "bulk"]), st.integers(1, 2), st.integers(0, 2)
        ),
        offset=st.integers(0, 2**62),
        reason=st.text(max_size=5),
        dlq=dlq,
        group=st.just("billing"),
    )
    return st.lists(record, max_size=40, unique_by=lambda r: (r.partition, r.offset)).map(tuple)


@settings(max_examples=80, deadline=None)
@given(records=_rejected_records(), packed=st.booleans())
def test_a_redrive_claim_reads_back_the_same_rejects_packed_or_a_message_each(records: Any, packed: bool) -> None:
    """A client that asks for the batch packed gets runs of packed arrays; one from before (or not asking) gets
    a message a record, as before. Either reads back as the same rejects, each with where its copy is (none
    for a copy not recorded, or recorded at generation 0)."""
    from streamplane import model as m
    from streamplane.client.redrive import claimed
    from streamplane.v1 import commitlog_pb2 as cpb
    from streamplane.v1 import convert

    claim = m.RedriveClaim(records, None, "c", batch_id=4)
    wire = convert.redrive_claim_to_pb(claim, packed=packed)
    assert (len(wire.runs) > 0, len(wire.batch) > 0) == ((packed and bool(records)), (not packed and bool(records)))
    back = convert.redrive_claim_from_pb(cpb.ClaimRedriveResponse.FromString(wire.SerializeToString()))
    assert back.size == len(records) and back.batch_id == 4 and back.cursor == "c"

    def where(r: m.RejectedRecord) -> tuple[str, int, int, int]:
        d = r.dlq
        return (d.lane, d.generation, d.partition, d.offset) if d is not None and d.generation > 0 else ("", 0, 0, 0)

    assert sorted(claimed(back), key=repr) == sorted(((r.partition, r.offset, *where(r)) for r in records), key=repr)
