#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks lint and types, runs pytest. Extra arguments go to pytest.
# pytest runs on three processes (pytest-xdist), a test file's tests on one of them: most of the suite waits on
# the processes it starts (Kafka, Spark, coordinators), so on 2 cores three keep the CPU busy: 20 minutes where
# two took 23. `-n 0` runs it in one.
# A worker that dies (a test past its time limit, a crash) fails the run at once, naming its test: xdist 3.8
# hangs after replacing a crashed worker under --dist loadfile (pytest-dev/pytest-xdist#1378).
# Real engines are used when FDB_CLUSTER_FILE / STREAMPLANE_KAFKA_BOOTSTRAP point at them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
echo "test: ruff" >&2
.venv/bin/ruff check .
echo "test: mypy (strict, every product module)" >&2
.venv/bin/python scripts/typecheck.py
echo "test: pytest" >&2
exec .venv/bin/python -m pytest -n 3 --dist loadfile --max-worker-restart 0 "$@"
