"""The key layout operators read in fdb/KEYS.md is the one keys.py builds, and only keys.py packs keys."""

from __future__ import annotations

import re
from pathlib import Path

from fdb.subspace_impl import Subspace

from streamplane.coordinator import keys

ROOT = Path(__file__).resolve().parents[2]
KEYS_MD = ROOT / "fdb" / "KEYS.md"


def _subspaces_in_code() -> set[str]:
    """The second tuple element of every key keys.py defines: ROOT["x"] subspaces and ROOT.pack(("x",)) keys."""
    out = set()
    for name, value in vars(keys).items():
        if name.isupper() and name != "ROOT":
            raw = value.key() if isinstance(value, Subspace) else value
            if isinstance(raw, bytes):
                out.add(keys.ROOT.unpack(raw)[0])
    return out


def _subspaces_documented() -> set[str]:
    table = KEYS_MD.read_text().split("## Event log")[0]
    return set(re.findall(r'^\| `\("streamplane", "([a-z_]+)"', table, re.M))


def test_every_subspace_is_documented_and_nothing_documented_is_missing() -> None:
    code, documented = _subspaces_in_code(), _subspaces_documented()
    assert code, "no subspace found in keys.py: the test reads it wrongly"
    assert code - documented == set(), "subspaces keys.py builds that fdb/KEYS.md does not document"
    assert documented - code == set(), "subspaces fdb/KEYS.md documents that keys.py does not build"


def test_keys_py_docstring_lists_the_same_subspaces() -> None:
    listed = set(re.findall(r'\("streamplane", "([a-z_]+)"', keys.__doc__ or ""))
    assert listed == _subspaces_in_code()


def test_only_keys_py_packs_keys() -> None:
    packing = re.compile(r"(?<!struct)\.pack(_with_versionstamp)?\(")  # struct.pack builds values, not keys
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "coordinator").rglob("*.py"))
        if path.name != "keys.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if packing.search(line)
    ]
    assert offenders == []


def test_remembered_keys_are_the_keys_fdb_packs() -> None:
    """keys.py remembers packed keys; what it returns is what fdb.tuple packs, also for elements a cache could
    confuse ((1,), (True,) and (1.0,) are equal tuples that pack differently), and a key parses back."""
    plain = Subspace(("streamplane",))["lease"]
    cached = keys.ROOT["lease"]
    for t in [("g", "s", "l", 1, 2), (), ("g",), ("g", 1), ("g", True), ("g", 1.0), ("g", b"raw"), ("g", -5)]:
        assert cached.pack(t) == plain.pack(t), t
        assert cached.range(t) == plain.range(t), t
        assert cached.unpack(plain.pack(t)) == plain.unpack(plain.pack(t)), t
    assert cached.pack(("g", 1)) != cached.pack(("g", True)) != cached.pack(("g", 1.0))
    assert keys.decode_key(keys.lease_key("g", "s", "l", 3, 4)) == ("streamplane", "lease", "g", "s", "l", 3, 4)
