#!/usr/bin/env bash
# Install everything streamplane needs on this machine; safe to run again (it skips what is done).
#   - Debian packages the C build, the fuzz and sanitizer builds, and the compose check need (apt-get)
#   - a virtualenv at .venv with the package installed editable, with its dev tools
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential libzstd-dev liblz4-dev libsnappy-dev zlib1g-dev clang libclang-rt-14-dev docker-compose prometheus chromium postgresql)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=""
for candidate in python3.11 python3.12 python3.13 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    PY=$candidate; break
  fi
done
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 or newer is required" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $PY" >&2
  "$PY" -m venv .venv
fi

# Reinstall only when what the install depends on changed.
stamp=.venv/.streamplane-install
want=$(cat pyproject.toml $(ls setup.py native/src/*.c native/src/*.h 2>/dev/null || true) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing streamplane and its dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[dev,spark]"
  echo "$want" > "$stamp"
fi
.venv/bin/python -c "import streamplane.coordinator.rpc.server, streamplane.v1.topology_pb2, streamplane._native" \
  || { rm -f "$stamp"; echo "bootstrap: the installed package does not import; run again" >&2; exit 1; }

# Apache Kafka's broker from Maven Central, once, for the real-broker engine and tests (.cache/kafka, ignored
# by git). Without Java or Maven, or if an artifact does not resolve, say so in one sentence: the local mock
# engine keeps working and the real-broker tests are skipped with that reason.
.venv/bin/python - <<'PY' || true
import sys
from streamplane.devstack.kafka import KAFKA_VERSION, ensure_jars, jar_dir
from streamplane.errors import UnavailableError

if not jar_dir().exists():
    print(f"bootstrap: fetching Apache Kafka {KAFKA_VERSION} from Maven Central (once)", file=sys.stderr)
try:
    ensure_jars()
except UnavailableError as err:
    print(f"bootstrap: {err.message}; real-Kafka tests will be skipped", file=sys.stderr)
PY

# playwright-core from npm drives Debian's Chromium in the console's browser tests (tests/browser), once.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/browser/node_modules/playwright-core ]; then
  echo "bootstrap: installing playwright-core for the browser tests (npm, once)" >&2
  (cd tests/browser && npm ci --no-audit --no-fund --silent) || echo "bootstrap: npm could not install playwright-core; the browser test will fail" >&2
fi

# The Go client's modules (gRPC, protobuf, franz-go for its test), from the Go module proxy, once: its test
# then compiles without a download. Without Go, its test is skipped with that reason.
if command -v go >/dev/null 2>&1; then
  (cd clients/go && go mod download) || echo "bootstrap: the Go client's modules did not download; its test will fail" >&2
fi
