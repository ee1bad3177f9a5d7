#!/usr/bin/env bash
# The main job on the embedded default: the local stack plus a short pipeline through a failover.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/streamplane demo "$@"
