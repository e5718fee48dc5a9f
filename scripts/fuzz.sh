#!/usr/bin/env bash
# Builds the fuzz targets with clang/libFuzzer and runs each for a bounded
# time: the GGUF parser seeded with a real converted model, then a
# tensor-split follower's message decoding. Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DNT_FUZZ=ON -DNT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" gguf_fuzz rank_messages_fuzz >/dev/null
corpus="$build/corpus"
mkdir -p "$corpus"
# The seed comes from the main (g++) build, which scripts/setup.sh made.
"$root/build/src/ntransformer" convert-llama2c "$root/../shared/models/stories260K.bin" "$root/../shared/models/tok512.bin" "$build/stories.gguf" >/dev/null
# The header alone is the interesting part; keep the seed small so mutations hit it.
head -c 16384 "$build/stories.gguf" > "$corpus/stories_header.gguf"
"$build/tests/fuzz/gguf_fuzz" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 "$corpus" 2>&1 | tail -n 5
mkdir -p "$build/rank_corpus"
# A seed pass: one entry (token 1 at position 0 of sequence 0, argmax), layer 0, books of one page.
printf 'NTRM\x01\0\0\0\x02\0\0\0''\0\0\0\0\0\0\0\0''\x01\0\0\0\0\0\0\0''\x01\0\0\0''\0\0\0\0\0\0\0\0''\0\0\0\0''\x02''\0''\xff\xff\xff\xff''\x01\0\0\0\0\0\0\0''\0\0\0\0''\x01\0\0\0\0\0\0\0''\0\0\0\0''\x01\0\0\0\0\0\0\0''\x01\0\0\0\0\0\0\0''\x03\0\0\0' \
  > "$build/rank_corpus/pass"
"$build/tests/fuzz/rank_messages_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 "$build/rank_corpus" 2>&1 | tail -n 5
