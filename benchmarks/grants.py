"""A worker granted many busy leases at once: how long until it holds them all, with their progress read in
one GetProgressBatch call against one GetProgress call a lease (what a worker does with a coordinator older
than the batched call), side by side in one run.

Each lease's previous holder left records done above its low watermark (as a killed worker whose handlers
finished out of order does), so a grant is not clean: the new holder reads what was done before it reads the
partition, to skip it. The coordinator runs in its own process over the embedded store, on the mock cluster;
each round is a fresh group on the same stream. The last line is `batched_s=<x> per_lease_s=<x>
batched_vs_per_lease=<ratio>` (best of the rounds each).

    .venv/bin/python benchmarks/grants.py --quick   # 250 leases
    .venv/bin/python benchmarks/grants.py           # 1,000 leases
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, engine

from streamplane.client import Consumer, CoordinatorClient
from streamplane.errors import UnimplementedError
from streamplane.log import configure_logging
from streamplane.model import Commit, LeaseCommit

ROUNDS = 2


def _busy(client: CoordinatorClient, group: str, stream: str, partitions: int) -> None:
    """Leave every lease as a holder whose handlers finished out of order: 3 to 6 done above a low watermark of 0."""
    leases = [f"{stream}/realtime/g1/p{p}" for p in range(partitions)]
    for i in range(0, partitions, 200):
        client.commit_batch(
            group, [LeaseCommit(lid, 0, Commit(acked=[(3, 6)], high_watermark=10)) for lid in leases[i : i + 200]]
        )


def _held_after(address: str, group: str, stream: str, partitions: int) -> float:
    """Seconds from a worker's construction until it holds every lease (each with its progress read)."""
    began = time.perf_counter()
    worker = Consumer(address, group=group, stream=stream)
    runner = threading.Thread(target=worker.run, args=(lambda _msg: None,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while len(worker.leases) < partitions:
            if time.monotonic() > deadline:
                raise SystemExit(f"{group}: {len(worker.leases)} of {partitions} leases held after 120 s")
            time.sleep(0.005)
        return time.perf_counter() - began
    finally:
        worker.close()
        runner.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="250 leases instead of 1,000")
    args = parser.parse_args()
    configure_logging("warning")
    partitions = 250 if args.quick else 1000
    batched_call = CoordinatorClient.progress_batch

    def refused(self: CoordinatorClient, *_args: Any, **_kwargs: Any) -> Any:
        raise UnimplementedError("as a coordinator older than GetProgressBatch answers")

    taken: dict[str, list[float]] = {"batched": [], "per lease": []}
    with (
        engine("mock") as cluster,
        tempfile.TemporaryDirectory() as tmp,
        coordinator_process(tmp, cluster.control) as address,
        CoordinatorClient(address) as client,
    ):
        cluster.register(client)
        client.create_stream("granted", partitions, cluster="local")
        for n in range(ROUNDS):
            for way in taken:
                group = f"{way.replace(' ', '-')}-{n}"
                _busy(client, group, "granted", partitions)
                CoordinatorClient.progress_batch = batched_call if way == "batched" else refused  # type: ignore[method-assign]
                taken[way].append(_held_after(address, group, "granted", partitions))
                print(f"{way}: {partitions:,} busy leases held in {taken[way][-1]:.2f} s", flush=True)
    CoordinatorClient.progress_batch = batched_call  # type: ignore[method-assign]
    batched, per_lease = min(taken["batched"]), min(taken["per lease"])
    print(f"batched_s={batched:.2f} per_lease_s={per_lease:.2f} batched_vs_per_lease={per_lease / batched:.1f}")


if __name__ == "__main__":
    main()
