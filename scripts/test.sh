#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks lint and types, runs pytest. Extra arguments go to pytest.
# Real engines are used when FDB_CLUSTER_FILE / STREAMPLANE_KAFKA_BOOTSTRAP point at them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
echo "test: ruff" >&2
.venv/bin/ruff check .
echo "test: mypy (strict, every product module)" >&2
.venv/bin/python scripts/typecheck.py
echo "test: pytest" >&2
exec .venv/bin/python -m pytest "$@"
