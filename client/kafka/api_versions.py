"""ApiVersions (key 18): which versions of each API a broker speaks.

We send v3 (flexible) first. A broker that does not know v3 answers with UNSUPPORTED_VERSION and its own
range for ApiVersions in a v0 body, and we ask again with the highest version it has, as the protocol
prescribes. The response header is always v0, even for v3, so the fallback can be read.
"""

from __future__ import annotations

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader
from streamplane.errors import MalformedBatchError

KEY = 18
VERSIONS = (0, 3)
FLEXIBLE_FROM = 3


def encode(version: int, software: str = "streamplane", software_version: str = "0.1") -> bytes:
    if version >= 3:
        return codec.compact_string(software) + codec.compact_string(software_version) + codec.NO_TAGS
    return b""


def decode(version: int, r: Reader) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error_code, {api_key: (min_version, max_version)}). An UNSUPPORTED_VERSION answer's list may be
    empty: some brokers (librdkafka's mock) shape it otherwise than Java's, and the caller then asks v0."""
    code = r.i16()
    if code == codec.ErrorCode.UNSUPPORTED_VERSION:
        try:
            entries = r.array(lambda: (r.i16(), r.i16(), r.i16()))
        except MalformedBatchError:
            entries = []
        return code, {k: (lo, hi) for k, lo, hi in entries}
    if version >= 3:

        def entry3() -> tuple[int, int, int]:
            key, lo, hi = r.i16(), r.i16(), r.i16()
            r.tagged_fields()
            return key, lo, hi

        entries = r.compact_array(entry3)
    else:
        entries = r.array(lambda: (r.i16(), r.i16(), r.i16()))
    return code, {k: (lo, hi) for k, lo, hi in entries}
