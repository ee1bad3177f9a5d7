"""The coordinator's transactional key-value store: one interface, two drivers (embedded, FoundationDB)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from streamplane.coordinator.store.api import (
    Database,
    StoreLimitError,
    StoreUnavailableError,
    Transaction,
    transactional,
)
from streamplane.errors import InvalidArgumentError

__all__ = [
    "Database",
    "StoreConfig",
    "StoreLimitError",
    "StoreUnavailableError",
    "Transaction",
    "open_store",
    "transactional",
]

DEFAULT_DATA_DIR = Path.home() / ".streamplane"


@dataclass(frozen=True)
class StoreConfig:
    """Which store the coordinator uses and where it lives."""

    driver: str = "embedded"
    """'embedded' (a local file, the default) or 'fdb' (a FoundationDB cluster)."""
    data_dir: Path = DEFAULT_DATA_DIR
    """Folder of the embedded store's file."""
    cluster_file: str | None = None
    """FoundationDB cluster file; None uses fdb's default search."""
    sync: str = "normal"
    """Embedded only: 'normal' survives a process crash, 'full' fsyncs every commit to survive power loss."""

    def __post_init__(self) -> None:
        if self.driver not in ("embedded", "fdb"):
            raise InvalidArgumentError(f"STREAMPLANE_STORE must be 'embedded' or 'fdb', not {self.driver!r}")
        if self.sync not in ("normal", "full"):
            raise InvalidArgumentError(f"STREAMPLANE_STORE_SYNC must be 'normal' or 'full', not {self.sync!r}")

    @classmethod
    def from_env(cls, data_dir: str | Path | None = None) -> StoreConfig:
        """Read STREAMPLANE_STORE, STREAMPLANE_DATA_DIR, STREAMPLANE_STORE_SYNC and FDB_CLUSTER_FILE."""
        return cls(
            driver=os.environ.get("STREAMPLANE_STORE", "embedded"),
            data_dir=Path(data_dir or os.environ.get("STREAMPLANE_DATA_DIR") or DEFAULT_DATA_DIR),
            cluster_file=os.environ.get("FDB_CLUSTER_FILE") or None,
            sync=os.environ.get("STREAMPLANE_STORE_SYNC", "normal"),
        )


def open_store(config: StoreConfig, *, read_only: bool = False) -> Database:
    """Open the configured store. `read_only` applies to the embedded driver (inspection beside a coordinator)."""
    if config.driver == "fdb":
        from streamplane.coordinator.store.foundation import FoundationDBDatabase

        return FoundationDBDatabase(config.cluster_file)
    from streamplane.coordinator.store.embedded import EmbeddedDatabase

    return EmbeddedDatabase(config.data_dir, sync=config.sync, read_only=read_only)
