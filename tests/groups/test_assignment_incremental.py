"""The Balancer (incremental assignment) against the pure `assign()`: over random sequences of joins, deaths,
load reports and generations opened and drained, every step gives the holders and proposals `assign()` gives
for the same partitions, workers and previous holders, and reports exactly the holders that changed.

Loads are multiples of 1/8 (sums are exact in floating point, so the two paths may not differ by rounding:
the comparison is exact); the balance bound with arbitrary loads is checked separately."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamplane.coordinator.groups.assignment import (
    DEFAULT_THRESHOLD,
    Balancer,
    PartitionSpec,
    WorkerSpec,
    assign,
)

eighths = st.integers(1, 8000).map(lambda n: n / 8)


def worker(draw, i: int, capped: bool) -> WorkerSpec:
    cap = draw(st.sampled_from([0.0, 0.0, 40.0, 400.0])) if capped else 0.0
    return WorkerSpec(f"w{i}", capacity=draw(st.sampled_from([0.5, 1.0, 1.0, 2.0])), max_load=cap)


@st.composite
def histories(draw, capped: bool = False):
    """A list of operations: ("join", spec) ("die", id) ("load", key, load) ("base", id, load) ("open", [specs])
    ("drain", [keys]) ("step", proposed-mode). A base load is what the slices a worker holds carry."""
    ops: list[tuple] = []
    n_workers = draw(st.integers(1, 6))
    next_worker = n_workers
    live = [f"w{i}" for i in range(n_workers)]
    ops += [("join", worker(draw, i, capped)) for i in range(n_workers)]
    generation = 0
    keys: list[tuple[int, int]] = []

    def open_generation() -> None:
        nonlocal generation
        generation += 1
        prio = draw(st.sampled_from([100, 50]))
        specs = [
            PartitionSpec((generation, p), priority=prio, load=draw(eighths)) for p in range(draw(st.integers(1, 24)))
        ]
        keys.extend(s.key for s in specs)
        ops.append(("open", specs))

    open_generation()
    ops.append(("step", None))
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["join", "die", "load", "load", "base", "open", "drain", "step", "step"]))
        if kind == "join":
            ops.append(("join", worker(draw, next_worker, capped)))
            live.append(f"w{next_worker}")
            next_worker += 1
        elif kind == "die" and live:
            ops.append(("die", live.pop(draw(st.integers(0, len(live) - 1)))))
        elif kind == "load" and keys:
            for _ in range(draw(st.integers(1, 10))):
                ops.append(("load", draw(st.sampled_from(keys)), draw(eighths)))
        elif kind == "base" and live:
            ops.append(("base", draw(st.sampled_from(live)), draw(st.one_of(st.just(0.0), eighths))))
        elif kind == "open":
            open_generation()
        elif kind == "drain" and keys:
            gen = draw(st.sampled_from(sorted({k[0] for k in keys})))
            gone = [k for k in keys if k[0] == gen]
            keys[:] = [k for k in keys if k[0] != gen]
            ops.append(("drain", gone))
        else:
            ops.append(("step", draw(st.sampled_from(["none", "empty", "previous"]))))
    ops.append(("step", "previous"))
    return ops


def replay(ops: list[tuple]) -> int:
    """Apply the history to a Balancer and, at each step, compare it with assign(); returns steps compared."""
    balancer = Balancer()
    partitions: dict = {}
    workers: dict[str, WorkerSpec] = {}
    holders: dict = {}
    last_proposed: frozenset = frozenset()
    pinned: dict = {}
    steps = 0
    for op in ops:
        match op:
            case ("join", spec):
                workers[spec.id] = spec
                balancer.put_worker(spec)
            case ("base", wid, load):
                workers[wid] = replace(workers[wid], base_load=load)
                balancer.put_worker(workers[wid])
            case ("die", wid):
                del workers[wid]
                balancer.remove_worker(wid)
            case ("load", key, load):
                spec = PartitionSpec(key, partitions[key].priority, load)
                partitions[key] = spec
                balancer.put_partition(spec)
            case ("open", specs):
                for spec in specs:
                    partitions[spec.key] = spec
                    balancer.put_partition(spec)
            case ("drain", gone):
                for key in gone:
                    del partitions[key]
                    balancer.remove_partition(key)
            case ("step", mode):
                proposed = {"none": None, "empty": frozenset(), "previous": last_proposed}[mode] if mode else None
                current = {k: w for k, w in holders.items() if k in partitions and w in workers}
                want = assign(
                    list(partitions.values()),
                    list(workers.values()),
                    current,
                    threshold=DEFAULT_THRESHOLD,
                    proposed=proposed,
                    pinned=pinned,
                )
                got = balancer.step(threshold=DEFAULT_THRESHOLD, proposed=proposed, pinned=pinned)
                assert dict(balancer.holders) == want.holders
                assert got.proposed == want.proposed
                before = {k: holders.get(k, "") for k in set(holders) | set(want.holders)}
                assert got.changed == {
                    k: want.holders.get(k, "") for k, old in before.items() if want.holders.get(k, "") != old
                }
                for key, new in got.changed.items():  # the cool-down of moves between live workers
                    if holders.get(key) in workers and new:
                        pinned[key] = holders[key]
                holders = dict(want.holders)
                last_proposed = want.proposed
                steps += 1
    return steps


@settings(max_examples=300, deadline=None)
@given(histories())
def test_incremental_steps_equal_the_pure_function(ops) -> None:
    assert replay(ops) >= 2


@settings(max_examples=150, deadline=None)
@given(histories(capped=True))
def test_incremental_steps_equal_the_pure_function_with_capped_workers(ops) -> None:
    assert replay(ops) >= 2


def test_a_steady_group_changes_nothing_and_a_death_moves_only_its_partitions() -> None:
    rng = random.Random(3)
    balancer = Balancer()
    for w in range(50):
        balancer.put_worker(WorkerSpec(f"w{w}"))
    for p in range(2_000):
        balancer.put_partition(PartitionSpec(p, load=rng.uniform(100, 5000)))
    balancer.step()
    assert balancer.step(proposed=frozenset()).changed == {}
    victims = {k for k, w in balancer.holders.items() if w == "w7"}
    balancer.remove_worker("w7")
    step = balancer.step(proposed=frozenset())
    assert set(step.changed) == victims
    assert "w7" not in step.changed.values() and all(step.changed.values())
    assert len(balancer.holders) == 2_000 and "w7" not in set(balancer.holders.values())


def test_the_balance_bound_holds_with_arbitrary_loads_after_a_confirmed_step() -> None:
    rng = random.Random(11)
    balancer = Balancer()
    specs = [WorkerSpec(f"w{w}", capacity=rng.choice([1.0, 2.0])) for w in range(40)]
    for spec in specs:
        balancer.put_worker(spec)
    loads = {p: rng.uniform(0.1, 1000) for p in range(3_000)}
    for p, load in loads.items():
        balancer.put_partition(PartitionSpec(p, load=load))
    balancer.step()
    for _ in range(5):  # loads drift, workers come and go
        for p in rng.sample(sorted(loads), 300):
            loads[p] = rng.uniform(0.1, 1000)
            balancer.put_partition(PartitionSpec(p, load=loads[p]))
        gone = rng.choice(specs)
        specs.remove(gone)
        balancer.remove_worker(gone.id)
        proposed = balancer.step(proposed=frozenset()).proposed
        balancer.step(proposed=proposed or frozenset({("confirmed", "")}))
    used = {w.id: 0.0 for w in specs}
    for p, w in balancer.holders.items():
        used[w] += loads[p]
    util = {w.id: used[w.id] / w.capacity for w in specs}
    gap = max(util.values()) - min(util.values())
    bound = max(DEFAULT_THRESHOLD * sum(util.values()) / len(util), 1.5 * max(loads.values()) / 1.0)
    assert gap <= bound + 1e-6


LOADS = {
    "equal": lambda rng: 1.0,
    "uniform": lambda rng: rng.uniform(0.5, 1.5),
    "lognormal": lambda rng: rng.lognormvariate(0, 1),
    "exponential": lambda rng: rng.expovariate(1.0),
}


def _settle(b: Balancer) -> None:
    """Steps, each confirming the last one's proposals, until nothing more is proposed."""
    step = b.step(proposed=frozenset())
    for _ in range(50):
        if not step.proposed:
            return
        step = b.step(proposed=step.proposed)
    raise AssertionError("the group never settled")


@settings(max_examples=60, deadline=None)
@given(
    n_workers=st.integers(3, 150),
    per_worker=st.integers(30, 60),
    loads=st.sampled_from(sorted(LOADS)),
    leaver=st.integers(0, 10**6),
    seed=st.integers(0, 10**6),
)
@example(n_workers=65, per_worker=31, loads="lognormal", leaver=0, seed=156)  # one orphan of 35 among 23
def test_a_worker_leaving_a_balanced_group_moves_at_most_twice_its_orphans(
    n_workers: int, per_worker: int, loads: str, leaver: int, seed: int
) -> None:
    """Sticky at fleet size: when one worker leaves a settled group, its partitions are orphans; the moves that
    follow (orphans placed, then rebalancing confirmed by the next pass) are at most twice the orphans, plus
    the room the heaviest of them needs beyond an average partition's, and the group ends within the balance
    band. Each move costs a revoke, a grant and a pause on that partition.

    A worker holds at least 30 partitions here: with a handful each, one heavy partition is wider than the band
    and evening it out takes more moves (benchmarks/fleet.py measures 1,000 workers on 50,000 partitions)."""
    rng = random.Random(seed)
    b = Balancer()
    workers = [f"w{i:03d}" for i in range(n_workers)]
    for w in workers:
        b.put_worker(WorkerSpec(w))
    for p in range(n_workers * per_worker):
        b.put_partition(PartitionSpec(p, load=LOADS[loads](rng)))
    b.step()
    _settle(b)
    gone = workers[leaver % n_workers]
    orphaned = [k for k, w in b.holders.items() if w == gone]
    orphans = len(orphaned)
    # Room for the heaviest orphan: whoever takes it sheds about its load in ordinary partitions to stay in the
    # band (found by hypothesis: lognormal loads, one orphan of 35 where a worker held 52 in 31 partitions,
    # 23 orphans and 26 more moves). Counted in average partitions, that is the granularity's own cost.
    mean_load = sum(p.load for p in b.partitions.values()) / len(b.partitions)
    room = math.ceil(max((b.partitions[k].load for k in orphaned), default=0.0) / mean_load)
    before = dict(b.holders)
    b.remove_worker(gone)
    _settle(b)
    moved = sum(1 for k, w in b.holders.items() if before[k] != w)
    bound = max(2 * orphans, orphans + 1) + room - 1  # (room is 1 for an orphan of average load or less)
    assert moved <= bound, f"{moved} moves for {orphans} orphans (the heaviest worth {room} average partitions)"
    util: dict[str, float] = dict.fromkeys(b.workers, 0.0)
    for k, w in b.holders.items():
        util[w] += b.partitions[k].load
    mean = sum(util.values()) / len(util)
    max_load = max(p.load for p in b.partitions.values())
    assert max(util.values()) - min(util.values()) <= max(DEFAULT_THRESHOLD * mean, 1.5 * max_load) + 1e-9
