"""Listing streams, clusters and lag at fleet size: pages in name order, a prefix, a filter (a cluster for
streams, a health state for clusters, a group, stream and lane for lag) and a count on the first page; no
request reads the whole topology. A hypothesis model holds the pages to the plain sorted, filtered list; the
CLI prints page after page with the count."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane import model
from streamplane.client import CoordinatorClient
from streamplane.coordinator.store.embedded import EmbeddedDatabase
from streamplane.coordinator.topology import pages as topology_pages
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import InvalidArgumentError
from streamplane.model import Cluster
from tests.helpers import Domain, cli

names_st = st.lists(st.from_regex(r"[a-c][a-c0-9-]{0,3}", fullmatch=True), min_size=0, max_size=30, unique=True)


P = TypeVar("P", model.StreamPage, model.ClusterPage, model.Lag)


def _every_page(fetch: Callable[[str], P]) -> list[P]:
    """`fetch(token)` from the first page ("") to the last (the one with no next token)."""
    pages, token = [], ""
    for _ in range(1000):
        page = fetch(token)
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages
    raise AssertionError("paging never ended")


def _pages(t: Topology, **kw: object) -> list[model.StreamPage]:
    return _every_page(lambda token: t.stream_page(page_token=token, **kw))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    names=names_st,
    on_west=st.sets(st.integers(0, 29)),
    page_size=st.integers(1, 7),
    prefix=st.sampled_from(["", "a", "b1", "c-", "ab"]),
    by_cluster=st.booleans(),
)
def test_pages_give_exactly_the_sorted_filtered_streams_once_each(
    names: list[str], on_west: set[int], page_size: int, prefix: str, by_cluster: bool
) -> None:
    domain = Domain()
    db, t = domain.db, domain.topology
    try:
        for c in ("east", "west"):
            t.register_cluster(Cluster(c, f"{c}:9092"))
        west = set()
        for i, name in enumerate(names):
            t.create_stream(name, 1, "west" if i in on_west else "east")
            if i in on_west:
                west.add(name)
        kw = {"prefix": prefix, "page_size": page_size, "cluster": "west" if by_cluster else ""}
        pages = _pages(t, **kw)
        got = [s.name for p in pages for s in p.streams]
        wanted = sorted(n for n in names if n.startswith(prefix) and (not by_cluster or n in west))
        assert got == wanted
        assert all(len(p.streams) <= page_size for p in pages)
        assert pages[0].total == sum(n.startswith(prefix) for n in names), "counted on the first page"
        assert all(p.total == 0 for p in pages[1:]), "and only there"
        if not by_cluster:
            assert all(len(p.streams) == page_size for p in pages[:-1]), "only the last page is short"
    finally:
        db.close()


def _cluster_pages(t: Topology, **kw: object) -> list[model.ClusterPage]:
    return _every_page(lambda token: t.cluster_page(page_token=token, **kw))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    names=names_st,
    sick=st.sets(st.integers(0, 29)),
    page_size=st.integers(1, 7),
    prefix=st.sampled_from(["", "a", "b1", "c-", "ab"]),
    health=st.sampled_from(["", "healthy", "unhealthy", "degraded"]),
)
def test_cluster_pages_give_exactly_the_sorted_filtered_clusters_once_each(
    names: list[str], sick: set[int], page_size: int, prefix: str, health: str
) -> None:
    domain = Domain()
    db, t = domain.db, domain.topology
    try:
        state = {}
        for i, name in enumerate(names):
            t.register_cluster(Cluster(name, f"host-{i}:9092"))
            state[name] = "healthy"
            if i in sick:
                t.record_health(name, "unhealthy", ["down"], actor="test")
                state[name] = "unhealthy"
        pages = _cluster_pages(t, prefix=prefix, page_size=page_size, health=health)
        got = [c.name for p in pages for c in p.clusters]
        assert got == sorted(n for n in names if n.startswith(prefix) and (not health or state[n] == health))
        assert all(len(p.clusters) <= page_size for p in pages)
        assert pages[0].total == sum(n.startswith(prefix) for n in names) and all(p.total == 0 for p in pages[1:])
        if not health:
            assert all(len(p.clusters) == page_size for p in pages[:-1]), "only the last page is short"
    finally:
        db.close()


def test_a_cluster_filter_pages_the_streams_on_it_whatever_the_fleet_holds(tmp_path: Path, monkeypatch) -> None:
    """A page with a cluster filter reads the index by cluster: one matching nothing is empty at once, with no
    token (it used to scan names in bounded, empty pages); one matching a few streams among many pages them."""
    monkeypatch.setattr(topology_pages, "PAGE_SIZE", 5)
    domain = Domain(tmp_path)
    db, t = domain.db, domain.topology
    try:
        for c in ("east", "west"):
            t.register_cluster(Cluster(c, f"{c}:9092"))
        for i in range(120):
            t.create_stream(f"s{i:03d}", 1, "west" if i % 17 == 0 else "east")
        first = t.stream_page(cluster="nowhere")
        assert first.streams == [] and first.next_page_token == ""
        pages = list(_pages(t, cluster="west"))
        assert [[s.name for s in p.streams] for p in pages] == [
            ["s000", "s017", "s034", "s051", "s068"],
            ["s085", "s102", "s119"],
        ]
    finally:
        db.close()


def test_bad_paging_arguments_say_why(tmp_path: Path) -> None:
    domain = Domain()
    db, t = domain.db, domain.topology
    try:
        for bad, kw in (
            ("prefix", {"prefix": "A!"}),
            ("page_token", {"page_token": "x" * 100}),
            ("is not from a page with prefix", {"prefix": "b", "page_token": "a1"}),
            ("cluster", {"cluster": "no such"}),
        ):
            with pytest.raises(InvalidArgumentError, match=bad):
                t.stream_page(**kw)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="health must be one of healthy, degraded, unhealthy, unknown"):
            t.cluster_page(health="sick")
        with pytest.raises(InvalidArgumentError, match="is not from a page with prefix"):
            t.cluster_page(prefix="b", page_token="a1")
    finally:
        db.close()


def test_the_cli_lists_page_after_page_with_a_count(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    with CoordinatorClient(coordinator.address) as c:
        c.register_cluster(Cluster("pg-home", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint))
        for i in range(12):
            c.create_stream(f"pg-{i:02d}", 1, cluster="pg-home")
        c.create_stream("other-1", 1, cluster="pg-home")
    done = cli("stream", "list", "--prefix", "pg-", "--page-size", "5", coordinator=coordinator.address)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["STREAM", "LANES", "ACTIVE", "GENERATIONS"] and lines.count(lines[0]) == 1
    assert [line.split()[0] for line in lines[1:]] == [f"pg-{i:02d}" for i in range(12)]
    assert "12 shown of 12 stream(s) starting with 'pg-'" in done.stderr
    done = cli("stream", "list", "--prefix", "pg-", "--limit", "3", coordinator=coordinator.address)
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == ["pg-00", "pg-01", "pg-02"]
    assert "3 shown of 12" in done.stderr
    done = cli("stream", "list", "--prefix", "zz", coordinator=coordinator.address)
    assert done.returncode == 0 and "(none)" in done.stdout and "0 shown of 0" in done.stderr
    done = cli("stream", "list", "--prefix", "BAD", coordinator=coordinator.address)
    assert done.returncode == 2 and "prefix 'BAD' is not a valid name" in done.stderr


def test_the_cli_lists_clusters_page_after_page_with_a_count_and_a_health_filter(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    with CoordinatorClient(coordinator.address) as c:
        for i in range(7):
            c.register_cluster(
                Cluster(f"cl-{i}", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
        assert [x.name for x in c.list_clusters(prefix="cl-")] == [f"cl-{i}" for i in range(7)]
    done = cli("cluster", "list", "--prefix", "cl-", "--page-size", "3", coordinator=coordinator.address)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[0] == "NAME" and lines.count(lines[0]) == 1, "one header over every page"
    assert [line.split()[0] for line in lines[1:]] == [f"cl-{i}" for i in range(7)]
    assert "7 shown of 7 cluster(s) starting with 'cl-'" in done.stderr
    done = cli("cluster", "list", "--prefix", "cl-", "--limit", "2", coordinator=coordinator.address)
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == ["cl-0", "cl-1"]
    assert "2 shown of 7" in done.stderr
    done = cli("cluster", "list", "--prefix", "cl-", "--state", "unhealthy", coordinator=coordinator.address)
    assert done.returncode == 0 and "(none)" in done.stdout and "0 shown of 7 cluster(s)" in done.stderr
    done = cli("cluster", "list", "--state", "sick", coordinator=coordinator.address)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_the_count_is_kept_by_creates_and_deletes_and_counted_in_a_store_from_before_it() -> None:
    from streamplane.coordinator import keys
    from streamplane.coordinator.topology.lifecycle import delete_stream

    domain = Domain()
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        for i in range(3):
            t.create_stream(f"n{i}", 1, "east")
        db.transact(lambda tr: tr.clear(keys.STREAM_COUNT))  # a store written before the count was kept
        assert t.stream_page().total == 3, "counted by a scan"
        t.create_stream("n3", 1, "east")
        assert db.transact(lambda tr: tr.get(keys.STREAM_COUNT)) == (4).to_bytes(8, "little")
        delete_stream(t, "n0")
        delete_stream(t, "n1")
        assert t.stream_page().total == 2 and [s.name for s in t.stream_page().streams] == ["n2", "n3"]
        assert t.stream_page(prefix="n3").total == 1
    finally:
        db.close()


@settings(max_examples=30, deadline=None)
@given(
    commits=st.lists(
        st.tuples(
            st.sampled_from(["ga", "gb", "gc"]),
            st.sampled_from(["s1", "s2"]),
            st.sampled_from(["realtime", "dlq"]),
            st.integers(0, 2),
        ),
        max_size=25,
        unique=True,
    ),
    page_size=st.integers(1, 5),
    group=st.sampled_from(["", "ga", "gb"]),
    stream=st.sampled_from(["", "s1"]),
    lane=st.sampled_from(["", "realtime"]),
)
def test_lag_pages_give_every_partition_once_in_order(
    commits: list[tuple[str, str, str, int]], page_size: int, group: str, stream: str, lane: str
) -> None:
    """Pages of lag, of one group or of every group, filtered or not, are the one-answer lag cut in pages."""
    from streamplane.coordinator.commitlog import log as commitlog

    domain = Domain()
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        for name in ("s1", "s2"):
            t.create_stream(name, 3, "east")
        for g, s, la, p in commits:
            done = model.Commit(acked=[(0, 1)], high_watermark=5)
            commitlog.commit(db, g, f"{s}/{la}/g1/p{p}", 0, done, now_ms=1000)
        if group:
            whole = commitlog.lag(db, group, stream=stream, lane=lane, now_ms=2000)
        else:
            whole = commitlog.lag_of_every_group(db, stream=stream, lane=lane, now_ms=2000)
        pages = _every_page(
            lambda token: commitlog.lag_page(
                db, group, stream=stream, lane=lane, now_ms=2000, page_size=page_size, page_token=token
            )
        )
        assert [x for p in pages for x in p.partitions] == list(whole.partitions)
        assert all(len(p.partitions) <= page_size and not p.lanes for p in pages)
    finally:
        db.close()


def test_the_cli_prints_a_groups_lag_per_partition_page_after_page(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    with CoordinatorClient(coordinator.address) as c:
        c.register_cluster(Cluster("lp-home", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint))
        c.create_stream("lp-s", 4, cluster="lp-home")
        for p in range(4):
            lease = model.LeaseCommit(f"lp-s/realtime/g1/p{p}", 0, model.Commit(acked=[(0, p + 1)], high_watermark=10))
            c.commit("lp-g", lease)
        pages = list(c.lag_pages("lp-g", page_size=3))
        assert [len(p.partitions) for p in pages] == [3, 1] and pages[0].next_page_token == "lp-g lp-s/realtime/g1/p2"
        assert c.lag("lp-g", partitions=False).partitions == () and c.lag("lp-g", partitions=False).offset_lag == 30
    done = cli("lag", "lp-g", "--partitions", coordinator=coordinator.address)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "group lp-g: offset lag 30" in lines[0]
    assert [line.split()[0] for line in lines if line.startswith("lp-s/")] == [
        f"lp-s/realtime/g1/p{p}" for p in range(4)
    ]
    assert "4 partition(s)" in done.stderr
    done = cli("lag", "--partitions", "--stream", "lp-s", coordinator=coordinator.address)
    assert done.returncode == 0 and "GROUP" in done.stdout and "lp-g" in done.stdout, done.stderr


def test_bad_lag_page_tokens_say_why() -> None:
    from streamplane.coordinator.commitlog import log as commitlog

    db = EmbeddedDatabase(None)
    try:
        for bad, token in (
            ("is not from a page of group 'ga'", "gb s1/realtime/g1/p0"),
            ("lease_id 'nope' is not of the form", "ga nope"),
            ("page_token's group", "BAD! s1/realtime/g1/p0"),
        ):
            with pytest.raises(InvalidArgumentError, match=bad):
                commitlog.lag_page(db, "ga", page_size=1, page_token=token, now_ms=0)
    finally:
        db.close()


def test_a_stream_whose_records_do_not_decode_is_left_out_of_pages_and_described_in_one_sentence(
    tmp_path: Path,
) -> None:
    """Bad data already in the store: a torn generation record of one stream and a torn lane record of
    another. Pages go on with the rest (with and without a cluster filter), and describing either says why in
    one sentence (FailedPreconditionError) instead of failing the call with a decode error."""
    from streamplane.coordinator import keys
    from streamplane.errors import FailedPreconditionError

    domain = Domain(tmp_path)
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        for name in ("a", "b", "c", "d"):
            t.create_stream(name, 1, "east")

        def poison(tr) -> None:  # type: ignore[no-untyped-def]
            tr.set(keys.generation_key("b", "realtime", 1), b"{torn")
            tr.set(keys.lane_key("c", "realtime"), b"[1, 2")

        db.transact(poison)
        for kw in ({}, {"cluster": "east"}, {"page_size": 1}):
            pages = _pages(t, **kw)
            assert [s.name for p in pages for s in p.streams] == ["a", "d"], kw
            assert [n for p in pages for n in p.unreadable] == ["b", "c"], "named, not silently gone"
        for name in ("b", "c"):
            with pytest.raises(FailedPreconditionError, match=f"stream '{name}': a record the store holds for it"):
                t.describe_stream(name)
    finally:
        db.close()
