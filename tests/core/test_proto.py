"""The committed generated code matches what scripts/genproto.py makes from the .proto files today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

GENERATED = REPO / "proto" / "streamplane" / "v1"


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "genproto.py"), "--out", str(tmp_path)], check=True, capture_output=True
    )
    fresh = {
        p.relative_to(tmp_path / "streamplane" / "v1"): p.read_bytes()
        for p in (tmp_path / "streamplane" / "v1").glob("*_pb2*.py*")
    }
    committed = {p.relative_to(GENERATED): p.read_bytes() for p in GENERATED.glob("*_pb2*.py*")}
    assert fresh, "protoc generated nothing"
    stale = sorted(str(name) for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert not stale, f"generated code is stale, run `python scripts/genproto.py`: {stale}"
