#!/usr/bin/env bash
# One device call: GPU tests, then the decode mat-vec sweep and the 8B-shaped
# model (cuda_bench decode), logs under $OUT (or ./out). Binaries come
# prebuilt (carried): BUILD_DIR/tests/nt_gpu_tests and BUILD_DIR/bench/cuda_bench.
# Usage: bench/cuda_perf_run.sh BUILD_DIR [cuda_bench mode, default decode]
set -uo pipefail
build=${1:?build dir}
mode=${2:-decode}
out=${OUT:-out}
mkdir -p "$out"
# The binaries link cuBLAS dynamically: find it in the CUDA or pip install.
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu /usr/local/lib/python3*/dist-packages/nvidia \
  /usr/lib/python3*/site-packages/nvidia -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] || cublas=$(timeout 30 find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "cuBLAS: ${cublas:-not found}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1 | tee "$out/gpu.txt"
"$build/tests/nt_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.log" 2>&1
echo "nt_gpu_tests exit $?"; tail -4 "$out/gpu_tests.log"
"$build/bench/cuda_bench" "$mode" /tmp 2>&1 | tee "$out/cuda_bench.log"
