"""The coordinator's transactional key-value store: one interface, three drivers (embedded, PostgreSQL,
FoundationDB)."""

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
    """'embedded' (a local file, the default), 'postgres' (a PostgreSQL database, `url`) or 'fdb' (a
    FoundationDB cluster)."""
    url: str = ""
    """PostgreSQL only: the libpq URL (postgresql://user@host:port/db?sslmode=...); its password may come from
    PGPASSWORD or a PGPASSFILE, as libpq reads them, rather than the URL."""
    data_dir: Path = DEFAULT_DATA_DIR
    """Folder of the embedded store's file."""
    cluster_file: str | None = None
    """FoundationDB cluster file; None uses fdb's default search."""
    sync: str = "normal"
    """Embedded only: 'normal' survives a process crash, 'full' fsyncs every commit to survive power loss."""

    def __post_init__(self) -> None:
        if self.driver not in ("embedded", "postgres", "fdb"):
            raise InvalidArgumentError(
                f"STREAMPLANE_STORE must be 'embedded', 'fdb' or a postgresql:// URL, not {self.driver!r}"
            )
        if self.driver == "postgres" and not self.url:
            raise InvalidArgumentError("the PostgreSQL store needs its URL: --store postgresql://user@host:port/db")
        if self.sync not in ("normal", "full"):
            raise InvalidArgumentError(f"STREAMPLANE_STORE_SYNC must be 'normal' or 'full', not {self.sync!r}")

    @classmethod
    def from_env(cls, data_dir: str | Path | None = None, store: str | None = None) -> StoreConfig:
        """`store` (the CLI's --store), else STREAMPLANE_STORE: embedded, fdb, or a postgresql:// URL; and
        STREAMPLANE_DATA_DIR, STREAMPLANE_STORE_SYNC and FDB_CLUSTER_FILE."""
        chosen = store or os.environ.get("STREAMPLANE_STORE", "embedded")
        url = ""
        if chosen.startswith(("postgresql://", "postgres://")):
            chosen, url = "postgres", chosen
        return cls(
            driver=chosen,
            url=url,
            data_dir=Path(data_dir or os.environ.get("STREAMPLANE_DATA_DIR") or DEFAULT_DATA_DIR),
            cluster_file=os.environ.get("FDB_CLUSTER_FILE") or None,
            sync=os.environ.get("STREAMPLANE_STORE_SYNC", "normal"),
        )


def open_store(config: StoreConfig, *, read_only: bool = False) -> Database:
    """Open the configured store. `read_only` applies to the embedded driver (inspection beside a coordinator)."""
    if config.driver == "fdb":
        from streamplane.coordinator.store.foundation import FoundationDBDatabase

        return FoundationDBDatabase(config.cluster_file)
    if config.driver == "postgres":
        from streamplane.coordinator.store.postgres import PostgresDatabase

        return PostgresDatabase(config.url)
    from streamplane.coordinator.store.embedded import EmbeddedDatabase

    return EmbeddedDatabase(config.data_dir, sync=config.sync, read_only=read_only)
