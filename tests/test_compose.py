"""compose/docker-compose.yml is a valid compose file with the engines the design names.

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
    assert {"fdb", "kafka-a", "kafka-b", "coordinator-1", "coordinator-2", "prometheus", "grafana"} <= set(services)
    rendered = subprocess.run(
        [docker_compose, "-f", str(COMPOSE), "config"], capture_output=True, text=True, check=True
    ).stdout
    assert rendered.count("STREAMPLANE_STORE: fdb") == 2, "both coordinator replicas run on FoundationDB"
    assert rendered.count("KAFKA_PROCESS_ROLES: broker,controller") == 2, "both Kafka clusters run KRaft"
