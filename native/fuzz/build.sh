#!/usr/bin/env bash
# Build the libFuzzer harness with AddressSanitizer and UBSan: native/fuzz/build.sh [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../build/fuzz}
mkdir -p "$out"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  "$here/fuzz_decode.c" "$here/../src/decode.c" "$here/../src/codecs.c" "$here/../src/crc32c.c" \
  -lzstd -lz -llz4 -lsnappy -o "$out/fuzz_decode"
echo "$out/fuzz_decode"
