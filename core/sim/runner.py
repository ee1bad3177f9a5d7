"""Running seeds: one (`run_seed`), a range or a time budget over processes (`run_seeds`), shrinking a failing
schedule (`shrink`), and the command line (`main`)."""

from __future__ import annotations

import argparse
import collections
import itertools
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager

import structlog

from streamplane.coordinator import planted
from streamplane.errors import StreamplaneError
from streamplane.sim.world import (
    InvariantError,
    World,
    schedule,
)


@contextmanager
def quiet() -> Iterator[None]:
    """The domain logs each seal and drain; a run of many seeds would print thousands of lines."""
    quiet_process()
    try:
        yield
    finally:
        structlog.reset_defaults()


def run_seed(
    seed: int,
    *,
    plant: tuple[str, ...] = (),
    keep: tuple[int, ...] | None = None,
    fault_s: int = 30,
    quiet_s: int = 30,
) -> str | None:
    """One seeded world (with only the faults at the `keep` positions of its schedule, when given); the
    violation it found, or None."""
    faults = schedule(seed, fault_s)
    if keep is not None:
        faults = [faults[i] for i in keep if i < len(faults)]
    planted.active.clear()
    planted.active.update(plant)
    world: World | None = None
    try:
        world = World(seed)
        world.run(faults, fault_s, quiet_s)
        return None
    except InvariantError as v:
        return str(v)
    except StreamplaneError as err:  # a change that should have succeeded did not
        return f"seed {seed}: {type(err).__name__}: {err.message}"
    finally:
        planted.active.clear()
        if world is not None:
            world.close()


def replay_command(seed: int, plant: tuple[str, ...], keep: tuple[int, ...] | None = None) -> str:
    flags = "".join(f" --plant {p}" for p in plant)
    if keep is not None:
        flags += f" --keep {','.join(map(str, keep)) or 'none'}"
    return f"python -m streamplane.sim --seed {seed}{flags}"


def shrink(seed: int, plant: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The shortest fault schedule (positions in the seed's schedule) found that still fails: faults are
    dropped one at a time while the run still finds a violation (any violation counts)."""
    keep = tuple(range(len(schedule(seed))))
    changed = True
    while changed:
        changed = False
        for i in range(len(keep)):
            trial = keep[:i] + keep[i + 1 :]
            if run_seed(seed, plant=plant, keep=trial):
                keep, changed = trial, True
                break
    return keep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this seed only")
    parser.add_argument("--seeds", type=int, default=20, help="run seeds --first .. --first+N-1")
    parser.add_argument("--first", type=int, default=0, help="first seed of the range")
    parser.add_argument("--hours", type=float, help="run seeds from --first on until this much wall-clock time passed")
    parser.add_argument("--plant", action="append", default=[], choices=planted.ALL, help="switch a planted bug on")
    parser.add_argument("--keep", help="with --seed: only these faults of its schedule (positions, comma-separated)")
    parser.add_argument("--shrink", action="store_true", help="with --seed: reduce a failing run's faults")
    parser.add_argument("--jobs", type=int, default=1, help="worlds run at once, each in a process (0: one per core)")
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error(f"--jobs takes 0 (one per core) or more, not {args.jobs}")
    jobs = args.jobs or os.cpu_count() or 1
    plant = tuple(args.plant)
    if (args.keep is not None or args.shrink) and args.seed is None:
        parser.error("--keep and --shrink take one seed: give --seed")
    if args.keep is not None and not all(x.isdigit() or x in ("", "none") for x in args.keep.split(",")):
        parser.error(f"--keep takes fault positions separated by commas (or 'none'), not {args.keep!r}")
    if args.seed is not None and (args.keep is not None or args.shrink):
        return _one(args.seed, plant, args.keep, args.shrink)
    seeds: Iterable[int]
    if args.seed is not None:
        seeds, total = [args.seed], "1"
    elif args.hours is not None:
        seeds, total = itertools.count(args.first), "?"
    else:
        seeds, total = range(args.first, args.first + args.seeds), str(args.seeds)
    failures, started = 0, time.monotonic()
    deadline = started + args.hours * 3600 if args.hours is not None else None
    with quiet():
        for i, (seed, found) in enumerate(run_seeds(seeds, plant, jobs=jobs, deadline=deadline), 1):
            if found:
                failures += 1
                print(f"FAIL {found}\n  replay: {replay_command(seed, plant)}", flush=True)
            if i % 10 == 0:
                elapsed = time.monotonic() - started
                print(f"sim: {i}/{total} seeds, {failures} failed, {elapsed:.0f} s", file=sys.stderr)
    print(f"sim: done, {failures} failed, {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 1 if failures else 0


def run_seeds(
    seeds: Iterable[int], plant: tuple[str, ...] = (), *, jobs: int = 1, deadline: float | None = None
) -> Iterator[tuple[int, str | None]]:
    """(seed, the violation it found or None) for each seed in order, `jobs` worlds at once (each in a process
    of its own: a world is single-threaded Python), starting none after `deadline` (time.monotonic())."""
    if jobs == 1:
        for seed in seeds:
            if deadline is not None and time.monotonic() >= deadline:
                return
            yield seed, run_seed(seed, plant=plant)
        return
    # spawned, not forked: a fork copies whatever locks the parent's other threads held (a test run's brokers)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=quiet_process) as pool:
        pending: collections.deque[tuple[int, Future[str | None]]] = collections.deque()
        upcoming = iter(seeds)
        while True:
            while len(pending) < 2 * jobs and (deadline is None or time.monotonic() < deadline):
                following = next(upcoming, None)
                if following is None:
                    break
                pending.append((following, pool.submit(run_seed, following, plant=plant)))
            if not pending:
                return
            seed, result = pending.popleft()
            yield seed, result.result()


def quiet_process() -> None:
    """Errors only, in this process (see `quiet`)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))


def _one(seed: int, plant: tuple[str, ...], keep_text: str | None, shrinking: bool) -> int:
    keep = None if keep_text is None else tuple(int(x) for x in keep_text.split(",") if x not in ("", "none"))
    with quiet():
        found = run_seed(seed, plant=plant, keep=keep)
        if not found:
            print(f"sim: seed {seed} holds every invariant", file=sys.stderr)
            return 0
        print(f"FAIL {found}")
        if shrinking:
            print(f"sim: shrinking {len(schedule(seed))} faults...", file=sys.stderr)
            keep = shrink(seed, plant)
            faults = schedule(seed)
            for i in keep:
                print(f"  fault {i}: +{faults[i].at_ms / 1000:.1f} s {faults[i].kind}")
            print(f"  replay: {replay_command(seed, plant, keep)}")
    return 1
