"""A coordinator process for `benchmarks/assigner.py --fleet`: the real server (gRPC, Assigner, sealer,
autopilot) over an embedded store the benchmark populated, with Kafka held in memory (the sessions under test
never touch Kafka). Prints its address once serving; runs until killed."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.log import configure_logging
from streamplane.testing.cluster_admin import MemoryClusterAdmin


def main() -> None:
    data_dir = Path(sys.argv[1])
    configure_logging(os.environ.get("STREAMPLANE_LOG_LEVEL", "error"))
    db = open_store(StoreConfig(driver="embedded", data_dir=data_dir))
    running = server.start(db, admin=MemoryClusterAdmin(), assigner_config=AssignerConfig())
    print(running.address, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
