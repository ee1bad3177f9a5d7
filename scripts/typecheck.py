"""Run mypy, strict, on every module of the product (every module the package installs, found in the tree).

The package's folders are mapped to `streamplane.*` names by pyproject's package-dir, which mypy cannot
follow through the editable install; so this builds a tree of symlinks under .cache/typecheck that has the
installed layout, and points mypy at it. Exits with mypy's status.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".cache" / "typecheck"

SKIP = {"fuzz", "src", "static", "__pycache__"}
"""Folders holding no product Python (the decoder's C and fuzzer, the console's web files)."""


def product_modules(tree: Path) -> list[str]:
    """Every module of the installed `streamplane` package, found in the tree: nothing is listed by hand, so a
    new module is checked from its first commit. Generated protobuf code (`*_pb2*`) is not ours to type."""
    import os

    found = []
    for folder, dirs, files in os.walk(tree / "streamplane", followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIP)
        for name in sorted(files):
            if name.endswith(".py") and "_pb2" not in name:
                module = Path(folder, name).relative_to(tree).with_suffix("")
                found.append(".".join(module.parts[:-1] if module.name == "__init__" else module.parts))
    return found


def build_tree() -> Path:
    """Symlinks laid out as the installed `streamplane` package (rebuilt each run: cheap, never stale)."""
    mapping: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "streamplane"
    top.mkdir(parents=True)
    for source in (ROOT / mapping["streamplane"]).iterdir():
        if source.suffix in (".py", ".pyi"):
            (top / source.name).symlink_to(source)
        elif (source / "__init__.py").exists():  # a sub-package inside the top folder (model, testing)
            (top / source.name).symlink_to(source, target_is_directory=True)
    for package, folder in sorted(mapping.items()):
        parts = package.split(".")
        if len(parts) == 2:  # deeper packages are folders inside these
            (top / parts[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return TREE


def main() -> int:
    tree = build_tree()
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    modules = product_modules(tree)
    print(f"typecheck: strict mypy on {len(modules)} modules", file=sys.stderr, flush=True)
    for module in modules:
        args += ["-m", module]
    return subprocess.run(args, cwd=tree, env={"MYPYPATH": str(tree), "PATH": ""}).returncode


if __name__ == "__main__":
    sys.exit(main())
