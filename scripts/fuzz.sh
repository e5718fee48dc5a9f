#!/usr/bin/env bash
# Builds the fuzz targets with clang/libFuzzer and runs each for a bounded
# time: the GGUF parser seeded with a real converted model, then a
# tensor-split follower's message decoding, `batch`'s JSONL lines and the
# tokenizers' round trip. Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DNT_FUZZ=ON -DNT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" gguf_fuzz rank_messages_fuzz batch_line_fuzz tokenizer_fuzz >/dev/null
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
mkdir -p "$build/batch_line_corpus"
printf '%s' '{"id": 1, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "seed": 3, "repeat_penalty": 1.1, "repeat_last_n": 64, "frequency_penalty": 0.5, "presence_penalty": -0.5, "stop": ["\\n"], "prediction": {"type": "content", "content": "x"}}' \
  > "$build/batch_line_corpus/chat"
"$build/tests/fuzz/batch_line_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 "$build/batch_line_corpus" 2>&1 | tail -n 5
mkdir -p "$build/tokenizer_corpus"
printf 'Hello, world! <|im_start|>user\n  12345 \xc3\xbcn\xc3\xafc\xc3\xb6d\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xff\xfe tabs\t\tend' \
  > "$build/tokenizer_corpus/mixed"
"$build/tests/fuzz/tokenizer_fuzz" -max_total_time="$seconds" -max_len=512 -rss_limit_mb=2048 "$build/tokenizer_corpus" 2>&1 | tail -n 5
