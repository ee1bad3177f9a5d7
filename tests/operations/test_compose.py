"""compose/docker-compose.yml is a valid compose file with the engines the design names: PostgreSQL with three
coordinator replicas by default, FoundationDB with two more under `--profile fdb`.

Validation needs only Debian's docker-compose (no engine); starting the stack needs a Docker engine, which
these machines do not have.
"""

from __future__ import annotations

import subprocess

from tests.helpers import REPO

COMPOSE = REPO / "compose" / "docker-compose.yml"


def test_compose_file_is_valid_and_has_the_engines(docker_compose: str) -> None:
    check = subprocess.run([docker_compose, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    services = subprocess.run(
        [docker_compose, "-f", str(COMPOSE), "config", "--services"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {"postgres", "kafka-a", "kafka-b", "prometheus", "grafana"} <= set(services)
    replicas = {"coordinator-1", "coordinator-2", "coordinator-3", "coordinator-fdb-1", "coordinator-fdb-2"}
    assert replicas <= set(services)
    rendered = subprocess.run(
        [docker_compose, "-f", str(COMPOSE), "config"], capture_output=True, text=True, check=True
    ).stdout
    assert rendered.count("STREAMPLANE_STORE: postgresql://streamplane@postgres:5432/streamplane") == 3, (
        "three coordinator replicas on one PostgreSQL"
    )
    assert rendered.count("STREAMPLANE_STORE: fdb") == 2, "two more on FoundationDB, with --profile fdb"
    assert rendered.count("KAFKA_PROCESS_ROLES: broker,controller") == 2, "both Kafka clusters run KRaft"
