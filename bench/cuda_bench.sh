#!/usr/bin/env bash
# Runs the CUDA benchmarks (bandwidth per mat-vec format against a
# device-to-device copy, GEMM crossover, attention, 8B-shaped model tokens/s).
# Usage: bench/cuda_bench.sh [BUILD_DIR] [all|matvec|gemm|attention|model]
set -euo pipefail
build=${1:-build-cuda}
what=${2:-all}
bin="$build/bench/cuda_bench"
[[ -x "$bin" ]] || { echo "cuda_bench.sh: $bin not built (configure with NT_CUDA=ON and build target cuda_bench)" >&2; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>/dev/null || true
"$bin" "$what" "${TMPDIR:-/tmp}"
