"""Bugs planted on purpose, each off unless the simulator switches it on, to show that it can fail.

A simulator that finds no bug proves little: `tests/core/test_simulation.py` turns each of these on in turn and
requires `streamplane.sim` to report a violation within a bounded number of seeds. Production
code reads them at the few places they change; nothing else ever sets them.
"""

from __future__ import annotations

STALE_EPOCH = "stale_epoch"
"""check_lease accepts a commit carrying an old epoch of the lease."""
NO_EPOCH_BUMP = "no_epoch_bump"
"""A lease granted again keeps its epoch, so the previous holder is not fenced."""
EARLY_SEAL = "early_seal"
"""A generation is sealed without waiting for the producers that still route by the old topology."""
UNKNOWN_AS_FAILURE = "unknown_as_failure"
"""The store's retry loop runs a body again after a commit_unknown_result that did commit."""

DROP_RETRIES = "drop_retries"
"""Advancing the low watermark drops the partition's retry state, as if compaction swept it away."""

LATE_RELEASE = "late_release"
"""A release trusts its message: it frees the lease it names whoever holds it now and at whatever epoch, so one
delivered late frees the lease granted since."""

REJECT_COUNTED_TWICE = "reject_counted_twice"
"""A reject of an offset that is done already (a commit delivered twice) is counted again."""

COPY_NUMBER_REUSED = "copy_number_reused"
"""A dlq copy is granted without waiting for the copy a previous holder began: a new holder is given that
holder's copy number, so two holders write the same copy of one record."""

EARLY_DRAIN = "early_drain"
"""A sealed generation is marked drained when its groups are within one record of its end offsets."""

ANY_SESSION_HEARTBEAT = "any_session_heartbeat"
"""A heartbeat is taken for the worker's member whatever session sent it, so one that arrives late, from a
session that ended, keeps the worker's next session alive."""

MERGE_DROPS_SLICE = "merge_drops_slice"
"""A merge of a split partition's slices moves its low watermark to the furthest slice's, as if every slice were
as far along: the records of the slices behind are never processed."""

ALL = (
    STALE_EPOCH,
    NO_EPOCH_BUMP,
    EARLY_SEAL,
    UNKNOWN_AS_FAILURE,
    DROP_RETRIES,
    LATE_RELEASE,
    REJECT_COUNTED_TWICE,
    COPY_NUMBER_REUSED,
    EARLY_DRAIN,
    ANY_SESSION_HEARTBEAT,
    MERGE_DROPS_SLICE,
)

active: set[str] = set()
