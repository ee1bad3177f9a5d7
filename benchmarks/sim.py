"""The deterministic simulation's speed and reach.

Runs clean seeds (a 60 s simulated world each: 30 s of faults, 30 s quiet) and reports seeds per second and
simulated time per wall-clock second, in one process (the last line's figure) and with a process per core
(`--jobs 0`); then, for every planted bug, the seeds it takes to find it.

Goals (issue 14): every planted bug found, each within 1,000 seeds at the median; at least 50 seeds/s for a
1-minute simulated world. The last line is
`sim_seeds_per_s=<x> planted_found=<k>/<n> median_seeds_to_find=<m>`. `--quick` runs in about a minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from streamplane.coordinator import planted
from streamplane.coordinator.sim import _quiet, run_seed, run_seeds

WORLD_S = 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer seeds")
    args = parser.parse_args()
    clean_seeds, search = (20, 50) if args.quick else (100, 1000)
    with _quiet():
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
    print(f"sim_seeds_per_s={rate:.2f} planted_found={len(to_find)}/{len(planted.ALL)} median_seeds_to_find={median:g}")


if __name__ == "__main__":
    main()
