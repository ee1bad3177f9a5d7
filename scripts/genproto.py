"""Generate the Python gRPC code for proto/streamplane/v1/*.proto.

Run with no arguments to (re)write the generated files beside the .proto sources, where they form the
`streamplane.v1` package; `--out DIR` writes them under DIR instead (the staleness test compares the two).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent.parent / "proto"


def generate(out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) over every .proto file; return the files written."""
    from grpc_tools import protoc  # dev dependency, imported late so --help works without it

    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    return sorted(p for p in out.rglob("*_pb2*.py*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=PROTO_ROOT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in generate(args.out):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
