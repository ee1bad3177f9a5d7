"""Pages of streams and clusters: every list is paged, in name order, with a prefix and a bounded amount of
work per page (a filter looks at no more than FILTER_SCAN_PAGES pages' worth of names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology.cluster_index import (
    streams_on,
)
from streamplane.coordinator.topology.records import (
    UNDECODABLE,
    decoded_cluster,
    load_lanes_of,
    readable_streams,
)
from streamplane.errors import (
    InvalidArgumentError,
    quoted,
)
from streamplane.model import (
    Cluster,
    ClusterHealth,
    ClusterPage,
    Stream,
    StreamPage,
)
from streamplane.names import check_object_name

T = TypeVar("T")

PAGE_SIZE = 500
"""Streams or clusters a page holds by default."""
MAX_PAGE_SIZE = 1000
"""Streams or clusters a page holds at most."""
FILTER_SCAN_PAGES = 10
"""A filtered page looks at no more than this many pages' worth of names (it may come back short)."""
COUNT_LIMIT = 100_000
"""A first page's `total` counts matching names up to this (counting is a key scan)."""


def _check_page_args(prefix: str, page_size: int, page_token: str) -> int:
    """A page's size, once its prefix and token are checked (InvalidArgumentError otherwise)."""
    if prefix:
        check_object_name("prefix", prefix)  # every start of a valid name is one
    if page_token:
        check_object_name("page_token", page_token)
        if not page_token.startswith(prefix):
            raise InvalidArgumentError(f"page_token {quoted(page_token)} is not from a page with prefix {prefix!r}")
    return min(page_size or PAGE_SIZE, MAX_PAGE_SIZE)


def page_window(
    tr: Transaction,
    space: Any,
    key_of: Callable[[str], bytes],
    *,
    prefix: str,
    page_size: int,
    page_token: str,
    filtered: bool,
) -> tuple[int, list[tuple[str, bytes]], bool]:
    """The names a page of `space` may take, in name order from after `page_token`: (the page's size,
    [(name, stored value)] to look at, whether names are left after them). Bounded: a page's size, or
    FILTER_SCAN_PAGES of them when a filter may drop some."""
    size = _check_page_args(prefix, page_size, page_token)
    named = keys.names_starting(space, prefix)
    start = key_of(page_token) + b"\x00" if page_token else named.start
    scan = size * FILTER_SCAN_PAGES if filtered else size
    rows = tr.get_range(start, named.stop, limit=scan + 1, snapshot=True)
    return size, [(space.unpack(key)[0], raw) for key, raw in rows[:scan]], len(rows) > scan


def _fill(size: int, window: list[tuple[str, bytes]], more: bool, items: Iterable[T | None]) -> tuple[list[T], str]:
    """The page: up to `size` of `items` (one per name of the window, None where the filter drops it), and
    the token of the next page ("" when no name is left after the last one looked at)."""
    kept: list[T] = []
    looked = 0
    for item in items:
        looked += 1
        if item is not None:
            kept.append(item)
            if len(kept) == size:
                break
    left = more or looked < len(window)
    return kept, window[looked - 1][0] if left and looked else ""


@transactional
def stream_page(
    tr: Transaction, *, prefix: str = "", page_size: int = 0, page_token: str = "", cluster: str = ""
) -> StreamPage:
    """One page of streams in name order, from after `page_token`: those whose name starts with `prefix`
    and, with `cluster`, that have a generation there (read through the index by cluster: a page costs its own
    streams, however few of the fleet's are there). Bounded work (see `page_window`); `total` counts the streams
    with the prefix, on the first page only (later ones say 0)."""
    if cluster:
        check_object_name("cluster", cluster)
        return _stream_page_on(tr, cluster, prefix, page_size, page_token)
    size, window, more = page_window(
        tr,
        keys.STREAMS,
        keys.stream_key,
        prefix=prefix,
        page_size=page_size,
        page_token=page_token,
        filtered=bool(cluster),
    )
    lanes, unreadable = load_lanes_of(tr, window[0][0], window[-1][0]) if window else ({}, set())

    def items() -> Iterator[Stream | None]:
        for name, raw in window:
            try:
                stream = replace(Stream.from_json(raw), lanes=lanes.get(name, []))
            except UNDECODABLE:
                unreadable.add(name)
            if name in unreadable:
                yield None  # its records do not decode: left out of the page (describe says why)
                continue
            on = not cluster or any(g.cluster == cluster for lane in stream.lanes for g in lane.generations)
            yield stream if on else None

    streams, token = _fill(size, window, more, items())
    total = 0 if page_token else count_streams(tr, prefix, snapshot=True)
    return StreamPage(streams, token, total, sorted(unreadable))


def _stream_page_on(tr: Transaction, cluster: str, prefix: str, page_size: int, page_token: str) -> StreamPage:
    """`stream_page` with `cluster`, through the index by cluster: a page costs its own streams."""
    size = _check_page_args(prefix, page_size, page_token)
    names, more = streams_on(tr, cluster, prefix, page_token, size)
    streams, unreadable = readable_streams(tr, names)
    token = names[-1] if more and names else ""
    return StreamPage(streams, token, 0 if page_token else count_streams(tr, prefix, snapshot=True), unreadable)


@transactional
def cluster_page(
    tr: Transaction, *, prefix: str = "", page_size: int = 0, page_token: str = "", health: str = ""
) -> ClusterPage:
    """One page of clusters in name order, from after `page_token`: those whose name starts with `prefix`
    and, with `health`, in that state. Bounded work (see `page_window`); `total` counts the clusters with the
    prefix on the first page only (later ones say 0)."""
    if health and health not in set(ClusterHealth):
        raise InvalidArgumentError(
            f"health must be one of {', '.join(h.value for h in ClusterHealth)}, not {quoted(health)}"
        )
    size, window, more = page_window(
        tr,
        keys.CLUSTERS,
        keys.cluster_key,
        prefix=prefix,
        page_size=page_size,
        page_token=page_token,
        filtered=bool(health),
    )

    def items() -> Iterator[Cluster | None]:
        for _, raw in window:
            found = decoded_cluster(raw)  # one that does not decode is left out; the health monitor names it
            yield found if found is not None and (not health or found.health == health) else None

    clusters, token = _fill(size, window, more, items())
    total = 0 if page_token else _count_names(tr, keys.CLUSTERS, prefix)
    return ClusterPage(clusters, token, total)


def _count_names(tr: Transaction, space: Any, prefix: str, *, snapshot: bool = True) -> int:
    """Names in `space` that start with `prefix`, up to COUNT_LIMIT (a key scan)."""
    r = keys.names_starting(space, prefix)
    return len(tr.get_range(r.start, r.stop, limit=COUNT_LIMIT, snapshot=snapshot))


def count_streams(tr: Transaction, prefix: str = "", *, snapshot: bool = False) -> int:
    """Streams whose name starts with `prefix`: the kept count for all of them, else (or in a store from
    before the count) a key scan, up to COUNT_LIMIT."""
    if not prefix:
        raw = tr.get(keys.STREAM_COUNT)
        if raw is not None:
            return int.from_bytes(raw, "little", signed=True)
    return _count_names(tr, keys.STREAMS, prefix, snapshot=snapshot)


def count_stream(tr: Transaction, delta: int) -> None:
    """Keep the count of streams after a create (+1) or a delete (-1) in this transaction; the first one after
    an upgrade writes it whole (the stream it creates or deletes is already in, or out of, the scan)."""
    if tr.get(keys.STREAM_COUNT) is None:
        tr.set(keys.STREAM_COUNT, count_streams(tr).to_bytes(8, "little", signed=True))
    else:
        tr.add(keys.STREAM_COUNT, delta)
