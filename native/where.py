"""A record predicate made ready for the decoders: parsed once, written as the C decoder's program and compiled
there once, and kept as the tree the pure-Python reference decoder evaluates.

`compile_where("header(service) = 'api'")` is what a consumer holds; `decode(..., where=w, partition=p)`
leaves out every record `w` does not match, before any column, Message or Arrow row is built for it. The
program's layout is in native/src/spdecode.h; the grammar and the reference semantics in core/predicate.py.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from streamplane.errors import InvalidArgumentError
from streamplane.native._loaded import _native
from streamplane.predicate import AllOf, AnyOf, Not, Op, Predicate, Subject, Test, parse, render

_KINDS = {AllOf: 1, AnyOf: 2, Not: 3, Test: 4}
_SUBJECTS = {
    Subject.KEY: 1,
    Subject.VALUE: 2,
    Subject.TIMESTAMP: 3,
    Subject.PARTITION: 4,
    Subject.HEADER: 5,
    Subject.SLICE: 6,
}
_OPS = {
    Op.EQ: 1,
    Op.NE: 2,
    Op.PREFIX: 3,
    Op.IN: 4,
    Op.CONTAINS: 5,
    Op.EXISTS: 6,
    Op.LT: 7,
    Op.LE: 8,
    Op.GT: 9,
    Op.GE: 10,
}


def header_name(name: str) -> bytes:
    """A header name as the bytes a record's header key is compared with (UTF-8; a byte that is not UTF-8
    comes back as the surrogate escape it was decoded to)."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"where: header name {name!r} is not text a header key can hold") from None


def program(p: Predicate) -> bytes:
    """The predicate as the C decoder's program (see native/src/spdecode.h)."""
    out = bytearray()

    def node(p: Predicate) -> None:
        match p:
            case AllOf(terms) | AnyOf(terms):
                out.extend(struct.pack("<BH", _KINDS[type(p)], len(terms)))
                for t in terms:
                    node(t)
            case Not(term):
                out.append(_KINDS[Not])
                node(term)
            case Test(subject, op, values, name):
                out.extend(struct.pack("<BBB", _KINDS[Test], _SUBJECTS[subject], _OPS[op]))
                if subject == Subject.HEADER:
                    raw = header_name(name)
                    out.extend(struct.pack("<H", len(raw)) + raw)
                out.extend(struct.pack("<H", len(values)))
                for v in values:
                    if isinstance(v, int):
                        out.extend(struct.pack("<q", v))
                    else:
                        out.extend(struct.pack("<I", len(v)) + v)

    node(p)
    return bytes(out)


@dataclass(frozen=True)
class Where:
    """A compiled record predicate: its text as written back (`render`), its tree, and the C decoder's compiled
    program (None when the extension is not built)."""

    text: str
    tree: Predicate
    native: Any = field(default=None, compare=False, repr=False)


def compile_where(text: str) -> Where:
    """Parse and compile a predicate once; InvalidArgumentError naming the column of a bad one."""
    return compile_tree(parse(text))


def compile_tree(tree: Predicate) -> Where:
    """Compile a predicate built as a tree (Spark's pushed filters), not parsed from text."""
    native = _native.compile_where(program(tree)) if _native is not None else None
    return Where(render(tree), tree, native)
