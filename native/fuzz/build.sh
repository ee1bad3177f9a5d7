#!/usr/bin/env bash
# Build the libFuzzer harnesses with AddressSanitizer and UBSan: native/fuzz/build.sh [OUT_DIR]
# fuzz_decode: the decoder over any record set; fuzz_where: a `where` program and a record set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../build/fuzz}
mkdir -p "$out"
core=("$here/../src/decode.c" "$here/../src/codecs.c" "$here/../src/crc32c.c" "$here/../src/where.c")
for target in fuzz_decode fuzz_where; do
  clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    "$here/$target.c" "${core[@]}" -lzstd -lz -llz4 -lsnappy -o "$out/$target"
  echo "$out/$target"
done
