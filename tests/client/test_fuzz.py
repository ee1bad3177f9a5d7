"""Fuzzing the decoder: libFuzzer over the C core (any record set; a `where` program with a record set), and the
extension itself built with ASan and UBSan.

Both start from native/fuzz/corpus (real librdkafka batches of every codec, edge cases, and inputs the
fuzzer found that reach new code). STREAMPLANE_FUZZ_SECONDS bounds the libFuzzer run (default 60, as CI
runs it). Both need the compilers that scripts/bootstrap.sh installs (clang with libFuzzer, gcc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import REPO

CORPUS = REPO / "native" / "fuzz" / "corpus"
SOURCES = sorted((REPO / "native" / "src").glob("*.c"))  # the whole extension, as setup.py builds it
FUZZ_SECONDS = int(os.environ.get("STREAMPLANE_FUZZ_SECONDS", "60"))


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed; scripts/bootstrap.sh installs it")
    return path


WHERE_SEEDS = [
    "header(service) = 'api'",
    "key ^= 'us-' or not value contains 'x'",
    "timestamp >= 5 and partition in (1, 3)",
    "header(h) exists and key in ('a', 'b')",
    "key != 'k0' and not (header(trace) ^= 'ab' or value ^= '')",
    "slice < 2147483648 or slice in (3, 5)",
]


def _where_corpus(into: Path) -> None:
    """Seeds for fuzz_where: a predicate's program (its length first, the high bit set on every other seed, for a
    `mine` rather than a `where`) before each record set of the corpus."""
    from streamplane.native.where import program
    from streamplane.predicate import parse

    programs = [program(parse(text)) for text in WHERE_SEEDS]
    into.mkdir()
    for i, path in enumerate(sorted(CORPUS.iterdir())):
        p = programs[i % len(programs)]
        assert len(p) < 0x80, "a seed's program fits the harness's 7-bit length"
        (into / path.name).write_bytes(bytes([len(p) | (i % 2) << 7]) + p + path.read_bytes()[1:])


@pytest.mark.slow
@pytest.mark.parametrize("target", ["fuzz_decode", "fuzz_where"])
def test_libfuzzer_finds_nothing_in_a_bounded_run(tmp_path: Path, target: str) -> None:
    _need("clang")
    build = subprocess.run([str(REPO / "native" / "fuzz" / "build.sh"), str(tmp_path)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    work = tmp_path / "corpus"
    if target == "fuzz_where":
        _where_corpus(work)
    else:
        shutil.copytree(CORPUS, work)
    seconds = FUZZ_SECONDS * 2 // 3 if target == "fuzz_decode" else FUZZ_SECONDS // 3  # the bound, shared
    run = subprocess.run(
        [
            str(tmp_path / target),
            f"-max_total_time={seconds}",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            f"-artifact_prefix={tmp_path}/",
            str(work),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )
    executed = [line for line in run.stderr.splitlines() if "number_of_executed_units" in line]
    print(f"libFuzzer {target}, {seconds} s: {executed}")
    assert run.returncode == 0, run.stderr[-4000:]
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))


SANITIZED_RUN = r"""
import importlib.machinery, importlib.util, random, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("streamplane._native", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["streamplane._native"] = module
from streamplane import native
from streamplane.errors import DecodeError
assert native.IMPLEMENTATIONS["native"] is module.decode_columns
rng = random.Random(5)
runs = 0
for path in sorted(Path(sys.argv[2]).iterdir()):
    seed = path.read_bytes()[1:]
    variants = [seed, seed[: len(seed) // 2]]
    for _ in range(200):
        data = bytearray(seed)
        for _ in range(rng.randrange(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        variants.append(bytes(data))
    where = native.compile_where(rng.choice(["header(service) = 'api' or key ^= 'a'", "not value contains 'x'",
                                             "timestamp > 0 and partition in (0, 2)"]))
    for data in variants:
        for crc in (True, False):
            try:
                batch = native.decode(data, verify_crc=crc, max_decompressed=rng.choice([64, 1 << 20]),
                                      aborted=[(3, 0)] if crc else None, where=where if crc else None,
                                      partition=2)
                batch.to_arrow().validate(full=True)
                list(batch.records())
            except DecodeError:
                pass
            runs += 1
# where programs: random bytes and mutated good ones are refused with a sentence, or compile
from streamplane.native.where import program
from streamplane.predicate import parse
good = program(parse("header(h) in ('a', 'b') and not (key exists or timestamp <= 3)"))
for i in range(3000):
    blob = bytearray(good if i % 2 else rng.randbytes(rng.randrange(40)))
    for _ in range(rng.randrange(0, 4)):
        if blob:
            blob[rng.randrange(len(blob))] = rng.randrange(256)
    try:
        module.compile_where(bytes(blob))
    except ValueError as err:
        assert str(err).startswith("where program, byte ")
# the producer's fast path: routed, unrouted, dropped, a full queue, a raising producer, polls
import gc, threading
sent = []
def produce(topic, value, key):
    if value == b"full":
        raise BufferError("full")
    if value == b"bad":
        raise TypeError("bad")
    sent.append(value)
table = module.Lanes(lambda *a, **k: "general", threading.Lock())
for i in range(3000):
    stream = f"s{i % 7}"
    table.set(stream, "realtime", module.Lane(produce, lambda t: 0, "topic", ("route", i)))
    for value in (b"v", b"full", b"bad"):
        try:
            table(stream, value, key=b"k", lane="realtime" if i % 3 else "dlq")
        except TypeError:
            pass
    if i % 5 == 0:
        table.drop(stream, "realtime")
    if i % 997 == 0:
        table.clear()
        gc.collect()
print(f"{runs} decodes and {len(sent)} fast-path records under ASan and UBSan")
"""


def test_extension_built_with_asan_and_ubsan_runs_the_corpus(tmp_path: Path) -> None:
    gcc = _need("gcc")
    include = sysconfig.get_paths()["include"]
    ext = tmp_path / "_native_sanitized.so"
    build = subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-g",
            "-O1",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
            f"-I{include}",
            *map(str, SOURCES),
            "-lzstd",
            "-lz",
            "-llz4",
            "-lsnappy",
            "-o",
            str(ext),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    libasan = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = {
        **os.environ,
        "LD_PRELOAD": libasan,
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    run = subprocess.run(
        [sys.executable, "-c", SANITIZED_RUN, str(ext), str(CORPUS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "under ASan and UBSan" in run.stdout
    assert "runtime error" not in run.stderr, run.stderr[-4000:]
