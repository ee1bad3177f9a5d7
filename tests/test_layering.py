"""The seams hold: protobuf only at the edges, the coordinator's domain free of gRPC and of store drivers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["core", "coordinator", "client", "cli", "spark_ext", "devstack", "native", "benchmarks", "examples"]
PROTOBUF_EDGES = {
    "client/coordinator.py",  # the client's transport
    "coordinator/servicer.py",
    "coordinator/assigner_servicer.py",
    "coordinator/commitlog_servicer.py",
    "coordinator/server.py",
}
DOMAIN = [
    "assignment.py",
    "topology.py",
    "leases.py",
    "commitlog.py",
    "sealing.py",
    "events.py",
    "keys.py",
    "leadership.py",
    "assigner.py",
    "cluster_admin.py",
]


def _python_files() -> list[Path]:
    return sorted(p for folder in SOURCES for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts)


def test_only_the_servicers_and_the_clients_transport_import_protobuf() -> None:
    imports = re.compile(r"^\s*(from|import)\s+\S*(_pb2|streamplane\.v1\b)", re.M)
    found = {str(p.relative_to(ROOT)) for p in _python_files() if imports.search(p.read_text())}
    assert found, "the scan found nothing: it reads the tree wrongly"
    assert found == PROTOBUF_EDGES


def test_the_coordinators_domain_imports_neither_grpc_nor_a_store_driver() -> None:
    forbidden = re.compile(r"^\s*(from|import)\s+(grpc\b|streamplane\.coordinator\.store\.(embedded|foundation))", re.M)
    offenders = [name for name in DOMAIN if forbidden.search((ROOT / "coordinator" / name).read_text())]
    assert offenders == []
