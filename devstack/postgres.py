"""A throwaway PostgreSQL server from Debian's binaries (`postgresql` package): for `streamplane dev` and the
tests of the PostgreSQL store driver. PostgreSQL refuses to run as root, so when we are root the cluster is
created and run as the `postgres` user the package creates, in a folder handed to it."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from streamplane.devstack.kafka import free_port
from streamplane.errors import UnavailableError

USER = "streamplane"


def pg_bin() -> Path:
    """The folder of initdb and pg_ctl (the newest installed major version); UnavailableError if none is."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise UnavailableError(
            "PostgreSQL's server binaries are not installed (Debian's postgresql package; scripts/bootstrap.sh "
            "installs it)"
        )
    return Path(found[-1]).parent


def reachable_folder(wanted: Path) -> Path:
    """Where a server meant for `wanted` can live. As root, PostgreSQL runs as the `postgres` user, which
    cannot enter root's private folders (a home of mode 0700): then a folder in the system's temporary
    directory named after `wanted`, the same on every start, so its data outlives restarts of the stack."""
    if os.geteuid() != 0:
        return wanted
    for parent in wanted.resolve().parents:
        if parent.exists() and not os.stat(parent).st_mode & 0o001:  # others may not enter it
            digest = hashlib.sha256(str(wanted.resolve()).encode()).hexdigest()[:12]
            return Path(tempfile.gettempdir()) / f"streamplane-pg-{digest}"
    return wanted


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in `folder`, listening on 127.0.0.1:`port` with trust authentication."""

    folder: Path
    port: int = 0
    _run_as: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        binaries = pg_bin()
        self.port = self.port or free_port()
        data = self.folder / "data"
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # PostgreSQL will not run as root: as the package's own user
            shutil.chown(self.folder, "postgres", "postgres")
            self._run_as = ["runuser", "-u", "postgres", "--"]
        if not data.exists():
            self._run([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "-E", "UTF8"])
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"]
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        data = self.folder / "data"
        if data.exists():
            subprocess.run(
                [*self._run_as, str(pg_bin() / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "stop"],
                capture_output=True,
                timeout=60,
            )

    def restart(self) -> None:
        """Stop (every connection lost) and start again on the same port."""
        self.stop()
        self.start()

    def ensure_database(self, name: str) -> str:
        """The database `name`, created if it is not there yet; its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def create_database(self) -> str:
        """A fresh database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url_of(name)

    def _run(self, args: list[str]) -> None:
        done = subprocess.run([*self._run_as, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise UnavailableError(f"{Path(args[0]).name} failed: {(done.stderr or done.stdout).strip()[-500:]}")
