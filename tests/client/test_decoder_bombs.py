"""Decompression bombs of every codec are rejected while inflating: fast (in CPU time), and within the memory
limit.

Each bomb is decoded in a fresh subprocess that reports how much its peak RSS grew. Sizes: zstd inflates
to 1 GiB from 33 KB; gzip (deflate tops out near 1032:1) to 950 MiB and lz4 (near 255:1) to 220 MiB, both
from under 1 MB; raw snappy (near 21:1) to 20 MiB, and a snappy header that lies about 1 GiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from tests.recordbatch import GZIP, LZ4, SNAPPY, ZSTD, Rec, bomb, build_batch, lying_snappy_bomb

LIMIT = 16 * 1024 * 1024
RSS_SLACK = 8 * 1024 * 1024  # allocator and interpreter noise

# Linux keeps the peak RSS in VmHWM; writing 5 to clear_refs resets it to the current RSS.
MEASURE = """
import json, sys, time
from streamplane.native import decode
from streamplane.errors import DecodeLimitExceeded

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

data = open(sys.argv[1], "rb").read()
limit, impl = int(sys.argv[2]), sys.argv[3]
decode(open(sys.argv[4], "rb").read(), impl=impl)  # warm up: imports and first allocations
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
started = time.process_time()  # CPU time: a loaded machine descheduling us is not the decoder's doing
try:
    decode(data, max_decompressed=limit, impl=impl)
    outcome = "decoded"
except DecodeLimitExceeded as err:
    outcome = "DecodeLimitExceeded: " + str(err)
elapsed = time.process_time() - started
grown = status("VmHWM") - before
print(json.dumps({"outcome": outcome, "cpu_seconds": elapsed, "rss_growth": grown}))
"""


def _declared_zstd_bomb() -> bytes:
    """A zstd frame whose header declares 1 GiB (it is refused before anything inflates)."""
    c = zstandard.ZstdCompressor(level=1, write_content_size=True).compressobj(size=1 << 30)
    payload = b"".join(c.compress(b"\0" * (1 << 20)) for _ in range(1024)) + c.flush()
    return build_batch([Rec(value=b"x")], codec=ZSTD, records_bytes=payload)


BOMBS = {
    "zstd-1GiB": lambda: bomb(ZSTD, 1 << 30),
    "zstd-declared-1GiB": _declared_zstd_bomb,
    "gzip-950MiB": lambda: bomb(GZIP, 950 << 20),
    "lz4-220MiB": lambda: bomb(LZ4, 220 << 20),
    "snappy-20MiB": lambda: bomb(SNAPPY, 20 << 20),
    "snappy-lying-1GiB": lambda: lying_snappy_bomb(1 << 30),
}


@pytest.fixture(scope="module")
def bomb_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    files = {}
    for name, make in BOMBS.items():
        files[name] = folder / name
        files[name].write_bytes(make())
    (folder / "small").write_bytes(build_batch([Rec(value=b"warm-up")], codec=ZSTD))
    return files


@pytest.mark.parametrize("impl", ["native", "python"])
@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_is_rejected_within_the_limit(bomb_files: dict[str, Path], name: str, impl: str) -> None:
    path = bomb_files[name]
    assert path.stat().st_size < 1_000_000, "every bomb is under 1 MB"
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), str(LIMIT), impl, str(path.parent / "small")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"].startswith("DecodeLimitExceeded: batch at byte 0 (base offset 0"), report
    assert f"limit of {LIMIT} bytes" in report["outcome"]
    assert report["rss_growth"] <= LIMIT + RSS_SLACK, report
    if impl == "native":
        assert report["cpu_seconds"] < 0.5, report  # milliseconds in practice


# A thread inflates every batch into one buffer that it keeps from call to call; what a call wrote past its
# first megabyte goes back to the system when the call ends.
KEPT = """
import sys
from streamplane.native import decode

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

small, big = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
decode(small)  # warm up: imports and first allocations
before = rss()
for _ in range(3):
    assert decode(big, max_decompressed=64 << 20).count == 1
    decode(small)
print(rss() - before)
"""


@pytest.mark.parametrize("codec", [ZSTD, GZIP, LZ4, SNAPPY])
def test_a_large_batch_does_not_stay_in_the_memory_of_the_thread_that_decoded_it(tmp_path: Path, codec: int) -> None:
    """A consumer's decode threads live as long as it does: one 40 MiB batch must not stay in their memory (a
    thread keeps a megabyte of its buffer; the bound allows the interpreter's noise besides)."""
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(build_batch([Rec(value=b"warm-up")], codec=codec))
    big.write_bytes(build_batch([Rec(value=b"0123456789abcdef" * (40 << 16))], codec=codec))
    result = subprocess.run(
        [sys.executable, "-c", KEPT, str(small), str(big)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) <= 2 * 1024 * 1024 + RSS_SLACK, f"{int(result.stdout) >> 20} MiB stayed"
