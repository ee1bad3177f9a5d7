"""The index by cluster: each cluster's generations and its count of active ones, kept by `write_generation`.

It makes the fleet's questions cost what they are about: which streams a dead cluster holds (an evacuation),
active generations per cluster (a failover target), generations per state (metrics), a page of streams on
one cluster.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology.records import (
    ACTIVE_STATE,
    decoded_generation,
    readable_streams,
)
from streamplane.model import (
    ACTIVE,
    Stream,
)


@dataclass(frozen=True)
class ActiveStreams:
    """What `streams_active_on` found: the streams, and the names of those whose records do not decode."""

    streams: list[Stream]
    unreadable: list[str]


def index_clusters(tr: Transaction) -> None:
    """Build the index by cluster once, for a store written before it existed: every generation's entry and
    every cluster's count of active ones, from the generations themselves (what writes kept meanwhile is
    replaced). Readers of the index call this first; afterwards it costs one read."""
    if tr.get(keys.CLUSTER_INDEXED) is not None:
        return
    for space in (keys.CLUSTER_GENERATIONS, keys.CLUSTER_ACTIVE):
        r = space.range()
        tr.clear_range(r.start, r.stop)
    active: dict[str, int] = {}
    r = keys.GENERATIONS.range()
    for key, raw in tr.get_range(r.start, r.stop):
        stream, lane, number = keys.GENERATIONS.unpack(key)
        gen = decoded_generation(raw)
        if gen is None:
            continue  # a torn record has no cluster to index it by: the index is built for the others
        tr.set(keys.cluster_generation_key(gen.cluster, stream, lane, number), gen.state.value.encode())
        if gen.state == ACTIVE:
            active[gen.cluster] = active.get(gen.cluster, 0) + 1
    for cluster, count in active.items():
        tr.set(keys.cluster_active_key(cluster), count.to_bytes(8, "little", signed=True))
    tr.set(keys.CLUSTER_INDEXED, b"1")


@transactional
def read_active_load(tr: Transaction) -> dict[str, int]:
    """Active generations per cluster (what a failover target is chosen by): one read per cluster."""
    index_clusters(tr)
    r = keys.CLUSTER_ACTIVE.range()
    load = {}
    for key, raw in tr.get_range(r.start, r.stop, snapshot=True):
        count = int.from_bytes(raw, "little", signed=True)
        if count:
            load[keys.CLUSTER_ACTIVE.unpack(key)[0]] = count
    return load


@transactional
def streams_active_on(tr: Transaction, clusters: Collection[str]) -> ActiveStreams:
    """The streams with a lane whose active generation is on one of `clusters` (what an evacuation moves), in
    name order: reads those clusters' own generations, not the fleet's. A stream whose stored records do not
    decode is named in `unreadable` instead: one bad record never holds back the others' evacuation."""
    index_clusters(tr)
    names: set[str] = set()
    for cluster in sorted(set(clusters)):
        r = keys.CLUSTER_GENERATIONS.range((cluster,))
        for key, state in tr.get_range(r.start, r.stop, snapshot=True):
            if state == ACTIVE_STATE:
                names.add(keys.CLUSTER_GENERATIONS.unpack(key)[1])
    return ActiveStreams(*readable_streams(tr, sorted(names)))


@transactional
def generation_counts(tr: Transaction) -> dict[tuple[str, str], int]:
    """Generations per (cluster, state), from the index by cluster: its entries only, no stream is read."""
    index_clusters(tr)
    r = keys.CLUSTER_GENERATIONS.range()
    counts: dict[tuple[str, str], int] = {}
    for key, state in tr.get_range(r.start, r.stop, snapshot=True):
        try:
            at = (keys.CLUSTER_GENERATIONS.unpack(key)[0], state.decode())
        except UnicodeDecodeError:
            continue  # a torn entry (never written so by this code) is not counted: the scrape goes on
        counts[at] = counts.get(at, 0) + 1
    return counts


def streams_on(tr: Transaction, cluster: str, prefix: str, page_token: str, size: int) -> tuple[list[str], bool]:
    """Up to `size` names of streams with a generation on `cluster` (any state), in name order after
    `page_token`, starting with `prefix`; and whether more are left. Reads those streams' entries only."""
    index_clusters(tr)
    r = keys.cluster_streams_starting(cluster, prefix)
    start = keys.cluster_stream_end(cluster, page_token) if page_token else r.start
    names: list[str] = []
    while True:
        rows = tr.get_range(start, r.stop, limit=4 * size + 1, snapshot=True)
        for key, _ in rows:
            name = keys.CLUSTER_GENERATIONS.unpack(key)[1]
            if not names or names[-1] != name:
                if len(names) == size:
                    return names, True
                names.append(name)
        if len(rows) <= 4 * size:
            return names, False
        start = rows[-1][0] + b"\x00"
