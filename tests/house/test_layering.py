"""The seams hold: protobuf only at the edges, the coordinator's domain free of gRPC and of store drivers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["core", "coordinator", "client", "cli", "spark_ext", "devstack", "native", "benchmarks", "examples"]
PROTOBUF_EDGES = {
    "client/coordinator.py",  # the client's transport
    "coordinator/rpc/topology_servicer.py",
    "coordinator/rpc/assigner_servicer.py",
    "coordinator/rpc/commitlog_servicer.py",
    "coordinator/rpc/auth_servicer.py",
    "coordinator/rpc/server.py",
    "benchmarks/_session_fleet.py",  # a load generator speaking the session protocol from asyncio
}
EDGES = {"rpc", "store", "console"}
"""The coordinator's areas that are not domain: its gRPC edge (the servicers, guard, limits, metrics and the
server), the store's drivers, and the web console."""
COORDINATOR = ROOT / "coordinator"
DOMAIN = sorted(
    str(p.relative_to(COORDINATOR))
    for p in COORDINATOR.rglob("*.py")
    if p.relative_to(COORDINATOR).parts[0] not in EDGES and p.name != "__init__.py"
)
"""Every other module of the coordinator, found in its areas: a new one is domain unless it says otherwise."""


def _python_files() -> list[Path]:
    return sorted(p for folder in SOURCES for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts)


def test_only_the_servicers_and_the_clients_transport_import_protobuf() -> None:
    imports = re.compile(r"^\s*(from|import)\s+\S*(_pb2|streamplane\.v1\b)", re.M)
    found = {str(p.relative_to(ROOT)) for p in _python_files() if imports.search(p.read_text())}
    assert found, "the scan found nothing: it reads the tree wrongly"
    assert found == PROTOBUF_EDGES


def test_the_coordinators_domain_imports_neither_grpc_nor_a_store_driver() -> None:
    forbidden = re.compile(r"^\s*(from|import)\s+(grpc\b|streamplane\.coordinator\.store\.(embedded|foundation))", re.M)
    offenders = [name for name in DOMAIN if forbidden.search((COORDINATOR / name).read_text())]
    assert len(DOMAIN) > 20, "few domain modules found: the scan reads the folder wrongly"
    assert offenders == []


def test_transaction_bodies_do_not_log() -> None:
    """A body may run more than once (conflicts, unknown results): what it logs would be logged twice, or for
    a change that never committed. @transactional functions and the helpers they call log nothing."""
    import ast

    offenders, checked = [], 0
    for name in DOMAIN:
        tree = ast.parse((COORDINATOR / name).read_text())
        functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        bodies = [
            f for f in functions.values() if any(getattr(d, "id", "") == "transactional" for d in f.decorator_list)
        ]
        seen = set()
        while bodies:
            f = bodies.pop()
            if f.name in seen:
                continue
            seen.add(f.name)
            for node in ast.walk(f):
                is_call = isinstance(node, ast.Call)
                if is_call and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "log":
                    offenders.append(f"{name}:{node.lineno} in {f.name}")
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
                    bodies.append(functions[node.func.id])
        checked += len(seen)
    assert checked > 20, "few @transactional functions found: the scan reads the modules wrongly"
    assert offenders == []


def test_the_client_reads_time_only_from_its_injected_clock() -> None:
    """Revoke deadlines, retry due times, rates and flush deadlines run on the Clock a Consumer, Producer or
    FetchLoop is given (a ManualClock in tests), never on the machine's clocks directly."""
    reads = re.compile(r"\btime\.(time|monotonic|perf_counter)\(")
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "client").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert offenders == []


def test_tests_wait_on_conditions_and_every_sleep_says_why() -> None:
    """A bare sleep is a guess at how long something takes; tests wait with `wait_until`. A sleep that stands for
    work, paces traffic or gives something time not to happen says so in a comment on its line."""
    bare = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "tests").glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "time.sleep(" in line and "#" not in line
    ]
    assert [b.split(":")[0] for b in bare] == ["tests/helpers.py"], bare  # wait_until's own poll, only
