#!/usr/bin/env bash
# Issue 22's CPU figures in one device call (docs/PERFORMANCE.md, "Prefetch and
# 512-bit K-quant dots"): the host's read rate and one core's kernel rates,
# our CPU decode and pp16 of a model at 16 threads, the reference's llama-bench
# -ngl 0 on the same file (bench/reference_cpu.sh builds it here), and the
# hybrid split's decode at a VRAM budget with the planner's choice.
#   bench/cpu_tier.sh BUILD_DIR REF_DIR|- [PRESET:TYPE:BUDGET]   (default llama3-70b:q4_k_m:24GiB)
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference dir or -}; spec=${3:-llama3-70b:q4_k_m:24GiB}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
source "$(dirname "$0")/device_model.sh"
echo "== host"; timeout 60 "$build/bench/cpu_kernels_bench" 16 2>&1 | sed -n 1,2p | tee "$out/host.txt"
NT_BENCH_CPU_TIME=1 timeout 60 "$build/bench/cpu_kernels_bench" 1 2>&1 | sed -n '/one core/,/^$/p' | tee -a "$out/host.txt"
echo "== ours, CPU, 16 threads"
for r in 1 2; do "$nt" bench -m "$file" --device cpu -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E ' (pp|tg)'; done | tee "$out/cpu.md"
if [[ "$ref" != - ]]; then
  echo "== reference, llama-bench -ngl 0 -t 16"
  for r in 1 2; do
    LD_LIBRARY_PATH="$ref:${LD_LIBRARY_PATH:-}" "$ref/llama-bench-amx" -m "$file" -ngl 0 -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E '^\|' \
      || LD_LIBRARY_PATH="$ref:${LD_LIBRARY_PATH:-}" "$ref/llama-bench" -m "$file" -ngl 0 -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E '^\|'
  done | tee "$out/reference-cpu.md"
fi
echo "== hybrid at $budget"
"$nt" bench -m "$file" --device cuda --vram-budget "$budget" --cpu-layers auto -p 0 -n 16 -r 2 --trace "$out/hybrid-trace.json" 2>&1 \
  | grep -E "hybrid|model:| tg" | tee "$out/hybrid.md"
