#!/usr/bin/env bash
# Everything the GPU issues report, in one device call (logs come back as one
# archive plus the decode trace): GPU tests, resident 8B/70B benchmarks, and the
# 70B streaming cases. Binaries come prebuilt: bench/device_all.sh BUILD_DIR
set -uo pipefail
build=${1:?build dir}
final=${OUT:-out}
export OUT=/tmp/nt-logs
mkdir -p "$OUT" "$final"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pack() { tar czf "$final/logs.tgz" -C "$OUT" . ; cp -f "$OUT/trace-decode.json" "$final/" 2>/dev/null; }
trap pack EXIT
# Packed after every stage too: a run stopped by the call's time limit still returns its logs.
"$build/tests/nt_gpu_tests" --gtest_brief=1 > "$OUT/gpu_tests.log" 2>&1
echo "nt_gpu_tests exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/gpu_tests.log" | head -20
pack
bench/gpu_models.sh "$build" llama3-8b:q4_k_m llama3-8b:q8_0
pack
NT_BENCH_KEEP=1 bench/gpu_models.sh "$build" llama3-70b:q4_k_m
cp "$OUT/bench.md" "$OUT/bench-all.md"
pack
bench/streaming.sh "$build" /tmp/nt-bench/llama3-70b-q4_k_m.gguf 2
