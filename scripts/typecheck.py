"""Run mypy, strict, on the coordinator's domain modules, the shared model and the client's public API.

The package's folders are mapped to `streamplane.*` names by pyproject's package-dir, which mypy cannot
follow through the editable install; so this builds a tree of symlinks under .cache/typecheck that has the
installed layout, and points mypy at it. Exits with mypy's status.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".cache" / "typecheck"

STRICT = [
    # the typed model and what every part shares
    "streamplane.model",
    "streamplane.clock",
    "streamplane.errors",
    "streamplane.names",
    "streamplane.doctor",
    "streamplane.cli.doctor",
    "streamplane.coordinator.metrics",
    "streamplane.coordinator.console.history",
    "streamplane.coordinator.console.views",
    "streamplane.coordinator.console.server",
    # the coordinator's domain: no gRPC, no store driver
    "streamplane.coordinator.assignment",
    "streamplane.coordinator.topology",
    "streamplane.coordinator.leases",
    "streamplane.coordinator.group_state",
    "streamplane.coordinator.commitlog",
    "streamplane.coordinator.commitlog_service",
    "streamplane.coordinator.sealing",
    "streamplane.coordinator.events",
    "streamplane.coordinator.keys",
    "streamplane.coordinator.leadership",
    "streamplane.offsets",
    "streamplane.spark.offsets",
    "streamplane.coordinator.cluster_admin",
    "streamplane.coordinator.store.retry",
    "streamplane.coordinator.store.chaos",
    "streamplane.coordinator.store.buffered",
    "streamplane.coordinator.store.postgres",
    "streamplane.coordinator.sim",
    "streamplane.coordinator.assigner",
    "streamplane.coordinator.auth",
    "streamplane.coordinator.guard",
    "streamplane.coordinator.health",
    "streamplane.coordinator.autopilot",
    "streamplane.coordinator.loop",
    "streamplane.coordinator.limits",
    "streamplane.coordinator.event_loop",
    "streamplane.coordinator.session_stream",
    "streamplane.coordinator.session_reader",
    "streamplane.coordinator.session_writer",
    # the client's public API
    "streamplane.client.credentials",
    "streamplane.client.lanes",
    "streamplane.client.coordinator",
    "streamplane.client.session",
    "streamplane.client.producer",
    "streamplane.client.config",
    "streamplane.client.consumer",
    "streamplane.client.message",
]


def build_tree() -> Path:
    """Symlinks laid out as the installed `streamplane` package (rebuilt each run: cheap, never stale)."""
    mapping: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "streamplane"
    top.mkdir(parents=True)
    for source in (ROOT / mapping["streamplane"]).iterdir():
        if source.suffix in (".py", ".pyi"):
            (top / source.name).symlink_to(source)
    for package, folder in sorted(mapping.items()):
        parts = package.split(".")
        if len(parts) == 2:  # deeper packages are folders inside these
            (top / parts[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return TREE


def main() -> int:
    tree = build_tree()
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    for module in STRICT:
        args += ["-m", module]
    return subprocess.run(args, cwd=tree, env={"MYPYPATH": str(tree), "PATH": ""}).returncode


if __name__ == "__main__":
    sys.exit(main())
