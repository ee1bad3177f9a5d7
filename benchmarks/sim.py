"""The deterministic simulation's speed and reach.

Runs clean seeds (a 60 s simulated world each: 30 s of faults, 30 s quiet) and reports simulated time per
wall-clock second, in one process (the last line's figure) and with a process per core (`--jobs 0`); then, for
every planted bug, the seeds it takes to find it.

Speed is simulated seconds per wall-clock second, not seeds per second: FoundationDB reports its simulation at
about 10 simulated seconds per wall-clock second per process, and our goal is at least 100 in one process
(issue 20/34). Every planted kind (at least 10) must be found, within 100 seeds at the median. The last line is
`simulated_s_per_wall_s=<x> planted_kinds=<n> planted_found=<k>/<n> median_seeds_to_find=<m>
vs_fdb_sim=<x/10>`. `--quick` runs in about a minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from streamplane.coordinator import planted
from streamplane.sim import quiet, run_seed, run_seeds

WORLD_S = 60
FDB_SIM_S_PER_WALL_S = 10
"""The peer: FoundationDB's simulation, about 10 simulated seconds per wall-clock second per process."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer seeds")
    args = parser.parse_args()
    clean_seeds, search = (20, 50) if args.quick else (100, 1000)
    with quiet():
        started = time.monotonic()
        failed = [s for s in range(clean_seeds) if run_seed(s)]
        elapsed = time.monotonic() - started
        rate = clean_seeds / elapsed
        print(f"clean: {clean_seeds} seeds in {elapsed:.1f} s, {len(failed)} failed {failed}")
        print(f"simulated_s_per_wall_s={rate * WORLD_S:.1f} simulated_hours_per_wall_s={rate * WORLD_S / 3600:.3f}")
        cores = os.cpu_count() or 1
        started = time.monotonic()
        found = [s for s, v in run_seeds(range(clean_seeds, 2 * clean_seeds), jobs=cores) if v]
        all_cores = clean_seeds / (time.monotonic() - started)
        print(f"with a process per core ({cores}): {all_cores:.2f} seeds/s, {len(found)} failed {found}")
        to_find: dict[str, int] = {}
        for bug in planted.ALL:
            for seed in range(search):
                if run_seed(seed, plant=(bug,)):
                    to_find[bug] = seed + 1
                    break
            print(f"planted {bug}: " + (f"found after {to_find[bug]} seeds" if bug in to_find else "NOT FOUND"))
    median = statistics.median(to_find.values()) if to_find else float("nan")
    simulated = rate * WORLD_S
    print(f"sim_seeds_per_s={rate:.2f} (goals: simulated_s_per_wall_s >= 100, every kind found, median <= 100)")
    print(
        f"simulated_s_per_wall_s={simulated:.0f} planted_kinds={len(planted.ALL)} "
        f"planted_found={len(to_find)}/{len(planted.ALL)} median_seeds_to_find={median:g} "
        f"vs_fdb_sim={simulated / FDB_SIM_S_PER_WALL_S:.0f}x"
    )


if __name__ == "__main__":
    main()
