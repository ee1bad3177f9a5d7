"""Generate the Go gRPC code for proto/streamplane/v1/*.proto into clients/go/streamplanev1.

The Go code is committed, like the Python code, so building the Go client needs no protoc. Run this after
changing a .proto file; it installs protoc-gen-go and protoc-gen-go-grpc with `go install` (pinned) first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GO_ROOT = ROOT / "clients" / "go"
MODULE = "github.com/streamplane/streamplane/clients/go"
PACKAGE = f"{MODULE}/streamplanev1"
PLUGINS = {
    "protoc-gen-go": "google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11",
    "protoc-gen-go-grpc": "google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2",
}


def main() -> None:
    from grpc_tools import protoc

    gobin = Path(subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True, check=True).stdout.strip())
    gobin = gobin / "bin"
    for name, target in PLUGINS.items():
        if not (gobin / name).exists():
            subprocess.run(["go", "install", target], check=True, env={**os.environ, "GOFLAGS": "-mod=mod"})
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    mapping = [f"M{s}={PACKAGE}" for s in sources]
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        f"--plugin=protoc-gen-go={gobin / 'protoc-gen-go'}",
        f"--plugin=protoc-gen-go-grpc={gobin / 'protoc-gen-go-grpc'}",
        f"--go_out={GO_ROOT}",
        f"--go_opt=module={MODULE}",
        *[f"--go_opt={m}" for m in mapping],
        f"--go-grpc_out={GO_ROOT}",
        f"--go-grpc_opt=module={MODULE}",
        *[f"--go-grpc_opt={m}" for m in mapping],
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    for path in sorted((GO_ROOT / "streamplanev1").glob("*.go")):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
