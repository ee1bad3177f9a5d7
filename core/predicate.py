"""Record predicates (issue 39): which records a consumer wants, in a small grammar, parsed and checked once.

    predicate  := or
    or         := and ("or" and)*
    and        := unary ("and" unary)*
    unary      := "not" unary | "(" or ")" | test
    test       := subject op-and-operands | subject "exists"
    subject    := "key" | "value" | "timestamp" | "partition" | "slice" | "header" "(" NAME ")"
    ops        := "=" | "!=" | "^=" (prefix) | "in" "(" literal ("," literal)* ")" | "contains" (value only)
                  | "<" | "<=" | ">" | ">=" (timestamp, partition and slice only)

Strings are single-quoted ('' is a quote; \\xNN a byte) and match bytes (UTF-8); numbers are integers.
`key exists` is false for a record with a null key; `header(h) exists` for one without header h. A header test
is true when any of the record's headers named h matches. A predicate that does not parse is refused with one
sentence naming the column of the error (InvalidArgumentError).

`slice` is the record's key hash, 0 to 2**32 - 1 (`slice_hash`): the CRC-32 of its key, or of its offset (8
bytes, big-endian) when it has no key. The same key has the same hash on every client, in C and in Python, so a
range of it is a stable share of a partition's keys: `slice < 1073741824` keeps a quarter of them, every record
of each. Hot partitions are split into such ranges (issue 40); a user can sample with it.

This module is the reference: the native decoder evaluates the same tree in C, and a contract test holds both
to it, as for the rest of the decoder.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from streamplane.errors import InvalidArgumentError

MAX_TEXT = 4096
"""Characters a predicate may have."""
MAX_TERMS = 64
"""Tests one predicate may hold (each costs every record a comparison)."""
MAX_IN = 256
"""Values one `in (...)` may list."""
MAX_DEPTH = 32
"""How deep parentheses and `not`s may nest (the native evaluator recurses that deep per record)."""


class Subject(StrEnum):
    KEY = "key"
    VALUE = "value"
    TIMESTAMP = "timestamp"
    PARTITION = "partition"
    SLICE = "slice"
    HEADER = "header"


class Op(StrEnum):
    EQ = "="
    NE = "!="
    PREFIX = "^="
    IN = "in"
    CONTAINS = "contains"
    EXISTS = "exists"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


_BYTES_OPS = {Op.EQ, Op.NE, Op.PREFIX, Op.IN, Op.EXISTS}
_ALLOWED: dict[Subject, frozenset[Op]] = {
    Subject.KEY: frozenset(_BYTES_OPS),
    Subject.HEADER: frozenset(_BYTES_OPS),
    Subject.VALUE: frozenset({Op.PREFIX, Op.CONTAINS}),
    Subject.TIMESTAMP: frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}),
    Subject.PARTITION: frozenset({Op.EQ, Op.NE, Op.IN}),
    Subject.SLICE: frozenset({Op.EQ, Op.NE, Op.IN, Op.LT, Op.LE, Op.GT, Op.GE}),
}
_NUMBERS = (Subject.TIMESTAMP, Subject.PARTITION, Subject.SLICE)
SLICE_SPACE = 1 << 32
"""Key hashes run from 0 to SLICE_SPACE - 1."""


def slice_hash(key: bytes | None, offset: int) -> int:
    """A record's key hash (the `slice` subject): CRC-32 of its key; of its offset, 8 bytes big-endian, when it
    has none (a keyless record has no order to keep: it goes by offset)."""
    if key is not None:
        return zlib.crc32(key)
    return zlib.crc32(offset.to_bytes(8, "big", signed=True))


@dataclass(frozen=True)
class Test:
    """One comparison: `subject` (a header's `name`) `op` `values` (bytes for key, value and headers; ints for
    timestamp and partition; none for exists)."""

    subject: Subject
    op: Op
    values: tuple[bytes, ...] | tuple[int, ...] = ()
    name: str = ""


@dataclass(frozen=True)
class Not:
    term: Predicate


@dataclass(frozen=True)
class AllOf:
    terms: tuple[Predicate, ...]


@dataclass(frozen=True)
class AnyOf:
    terms: tuple[Predicate, ...]


Predicate = Test | Not | AllOf | AnyOf


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+)|(?P<op>\^=|!=|<=|>=|=|<|>)|(?P<punct>[(),])"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*))"
)
_UNCLOSED = re.compile(r"\s*'")


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    column: int


def _refuse(text: str, column: int, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"where, column {column}: {why} (in {text!r})")


def _tokens(text: str) -> list[_Tok]:
    out, i = [], 0
    while i < len(text):
        if not text[i:].strip():
            break
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:
            start = i + len(text[i:]) - len(text[i:].lstrip())
            if _UNCLOSED.match(text, i):
                raise _refuse(text, start + 1, "a string is not closed: end it with '")
            raise _refuse(text, start + 1, f"unexpected {text[start]!r}")
        kind = m.lastgroup or ""
        start = m.start(kind)
        out.append(_Tok(kind, m.group(kind), start + 1))
        i = m.end()
    out.append(_Tok("end", "", len(text) + 1))
    return out


def _string(tok: _Tok, text: str) -> bytes:
    body = tok.text[1:-1].replace("''", "'")
    out = bytearray()
    i = 0
    while i < len(body):
        if body.startswith("\\x", i):
            digits = body[i + 2 : i + 4]
            if not re.fullmatch(r"[0-9A-Fa-f]{2}", digits):
                raise _refuse(text, tok.column + 1 + i, "\\x takes two hex digits, as \\x0a")
            out.append(int(digits, 16))
            i += 4
        else:
            try:
                out += body[i].encode()
            except UnicodeEncodeError:
                raise _refuse(text, tok.column + 1 + i, "a string holds a character that is not text") from None
            i += 1
    return bytes(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.terms = 0
        self.depth = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def word(self, *words: str) -> bool:
        tok = self.peek()
        if tok.kind == "word" and tok.text.lower() in words:
            self.i += 1
            return True
        return False

    def expect(self, punct: str, what: str) -> _Tok:
        tok = self.take()
        if tok.text != punct:
            raise _refuse(self.text, tok.column, f"expected {what}, found {_shown(tok)}")
        return tok

    def parse(self) -> Predicate:
        if self.peek().kind == "end":
            raise _refuse(self.text, 1, "the predicate is empty")
        found = self.or_()
        tok = self.peek()
        if tok.kind != "end":
            raise _refuse(self.text, tok.column, f"expected 'and', 'or' or the end, found {_shown(tok)}")
        return found

    def or_(self) -> Predicate:
        terms = [self.and_()]
        while self.word("or"):
            terms.append(self.and_())
        return terms[0] if len(terms) == 1 else AnyOf(tuple(terms))

    def and_(self) -> Predicate:
        terms = [self.unary()]
        while self.word("and"):
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else AllOf(tuple(terms))

    def unary(self) -> Predicate:
        tok = self.peek()
        if tok.text.lower() == "not" or tok.text == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _refuse(self.text, tok.column, f"parentheses and not nest at most {MAX_DEPTH} deep")
            try:
                if self.word("not"):
                    return Not(self.unary())
                self.take()
                inner = self.or_()
                self.expect(")", "')' to close '('")
                return inner
            finally:
                self.depth -= 1
        return self.test()

    def test(self) -> Predicate:
        tok = self.take()
        names = ", ".join(s.value for s in Subject)
        if tok.kind != "word" or tok.text.lower() not in {s.value for s in Subject}:
            raise _refuse(self.text, tok.column, f"expected a test on {names}; found {_shown(tok)}")
        subject = Subject(tok.text.lower())
        name = ""
        if subject == Subject.HEADER:
            self.expect("(", "'(' and a header name, as header(service)")
            named = self.take()
            if named.kind == "str":
                name = _string(named, self.text).decode(errors="replace")
            elif named.kind == "word":
                name = named.text
            else:
                raise _refuse(self.text, named.column, f"expected a header name, found {_shown(named)}")
            self.expect(")", "')' after the header name")
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise _refuse(self.text, tok.column, f"a predicate holds at most {MAX_TERMS} tests")
        at = self.peek()
        op = self._op()
        if op not in _ALLOWED[subject]:
            ok = " ".join(sorted(o.value for o in _ALLOWED[subject]))
            raise _refuse(self.text, at.column, f"{subject.value} takes {ok}, not {op.value}")
        if op == Op.EXISTS:
            return Test(subject, op, (), name)
        numbers = subject in _NUMBERS
        if op == Op.IN:
            self.expect("(", "'(' and a list after in")
            values = [self.literal(numbers)]
            while self.peek().text == ",":
                self.take()
                values.append(self.literal(numbers))
                if len(values) > MAX_IN:
                    raise _refuse(self.text, self.peek().column, f"in lists at most {MAX_IN} values")
            self.expect(")", "')' to close the list")
            return Test(subject, op, tuple(values), name)  # type: ignore[arg-type]
        return Test(subject, op, (self.literal(numbers),), name)  # type: ignore[arg-type]

    def _op(self) -> Op:
        tok = self.take()
        if tok.kind == "op":
            return Op(tok.text)
        if tok.kind == "word" and tok.text.lower() in ("in", "contains", "exists"):
            return Op(tok.text.lower())
        raise _refuse(
            self.text, tok.column, f"expected an operator (= != ^= in contains exists < <= > >=), found {_shown(tok)}"
        )

    def literal(self, numbers: bool) -> bytes | int:
        tok = self.take()
        if numbers:
            if tok.kind != "num":
                raise _refuse(self.text, tok.column, f"expected a number, found {_shown(tok)}")
            value = int(tok.text)
            if not -(2**63) <= value < 2**63:
                raise _refuse(self.text, tok.column, "the number does not fit in 64 bits")
            return value
        if tok.kind != "str":
            raise _refuse(self.text, tok.column, f"expected a quoted string, as 'api', found {_shown(tok)}")
        return _string(tok, self.text)


def _shown(tok: _Tok) -> str:
    return "the end" if tok.kind == "end" else repr(tok.text)


def parse(text: str) -> Predicate:
    """The predicate `text` says; InvalidArgumentError naming the column of the first error."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"where must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise InvalidArgumentError(f"where is {len(text)} characters; at most {MAX_TEXT}")
    return _Parser(text).parse()


def matches(
    p: Predicate,
    *,
    key: bytes | None,
    value: bytes | None,
    timestamp: int,
    partition: int,
    headers: Sequence[tuple[str, bytes | None]] | Iterable[tuple[str, bytes | None]] = (),
    offset: int = 0,
) -> bool:
    """Whether one record matches `p` (the reference the native evaluator is held to)."""

    def each(term: Predicate) -> bool:
        return matches(
            term, key=key, value=value, timestamp=timestamp, partition=partition, headers=headers, offset=offset
        )

    match p:
        case Not(term):
            return not each(term)
        case AllOf(terms):
            return all(each(t) for t in terms)
        case AnyOf(terms):
            return any(each(t) for t in terms)
        case Test(subject, op, values, name):
            if subject == Subject.KEY:
                return _bytes_test(op, values, [key] if key is not None else [])
            if subject == Subject.HEADER:
                return _bytes_test(
                    op,
                    values,
                    [v for k, v in headers if k == name and v is not None],
                    present=any(k == name for k, _ in headers),
                )
            if subject == Subject.VALUE:
                data = value or b""
                (needle,) = values
                return data.startswith(needle) if op == Op.PREFIX else needle in data  # type: ignore[arg-type]
            if subject == Subject.SLICE:
                return _number_test(op, values, slice_hash(key, offset))  # type: ignore[arg-type]
            number = timestamp if subject == Subject.TIMESTAMP else partition
            return _number_test(op, values, number)  # type: ignore[arg-type]
    raise TypeError(f"not a predicate: {p!r}")


def _bytes_test(op: Op, values: tuple[object, ...], found: list[bytes], *, present: bool | None = None) -> bool:
    if op == Op.EXISTS:
        return bool(found) if present is None else present
    if op == Op.NE:
        return not any(f == values[0] for f in found)
    if op == Op.EQ:
        return any(f == values[0] for f in found)
    if op == Op.PREFIX:
        return any(f.startswith(values[0]) for f in found)  # type: ignore[arg-type]
    return any(f in values for f in found)  # in


def _number_test(op: Op, values: tuple[int, ...], number: int) -> bool:
    if op == Op.IN:
        return number in values
    (bound,) = values
    return {
        Op.EQ: number == bound,
        Op.NE: number != bound,
        Op.LT: number < bound,
        Op.LE: number <= bound,
        Op.GT: number > bound,
        Op.GE: number >= bound,
    }[op]


def render(p: Predicate) -> str:
    """The predicate as text that parses back to it (what `explain()` and errors show)."""
    match p:
        case Not(term):
            return f"not {_grouped(term)}"
        case AllOf(terms):
            return " and ".join(_grouped(t) for t in terms)
        case AnyOf(terms):
            return " or ".join(_grouped(t) for t in terms)
        case Test(subject, op, values, name):
            head = f"header({_quoted(name.encode())})" if subject == Subject.HEADER else subject.value
            if op == Op.EXISTS:
                return f"{head} exists"
            shown = [str(v) if isinstance(v, int) else _quoted(v) for v in values]
            if op == Op.IN:
                return f"{head} in ({', '.join(shown)})"
            return f"{head} {op.value} {shown[0]}"
    raise TypeError(f"not a predicate: {p!r}")


def _grouped(p: Predicate) -> str:
    return f"({render(p)})" if isinstance(p, AllOf | AnyOf) else render(p)


def _quoted(data: bytes) -> str:
    out = []
    for byte in data:
        ch = chr(byte)
        if ch == "'":
            out.append("''")
        elif ch == "\\" or not (32 <= byte < 127):
            out.append(f"\\x{byte:02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"
