#!/usr/bin/env bash
# The CPU-tier figures in one device call (docs/PERFORMANCE.md, "CPU kernels on
# the 16-core host"): the host's read rate and one core's kernel rates;
# on a smaller model, the decode prefetch distance and the prefill GEMM
# threshold swept; on the main model, our CPU decode and pp16 at 16 threads,
# the reference's llama-bench -ngl 0 on the same file (bench/reference_cpu.sh
# builds it here), and the hybrid split's decode at a VRAM budget.
#   bench/cpu_tier.sh BUILD_DIR REF_DIR|- [PRESET:TYPE:BUDGET]   (default llama3-70b:q4_k_m:24GiB)
# Env: NT_SWEEP_MODEL (llama3-8b:q4_k), NT_BENCH_DIR (/tmp/nt-bench), NT_BENCH_ROUNDS (2;
# 1 fits the whole script in one 10-minute call).
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference dir or -}; main=${3:-llama3-70b:q4_k_m:24GiB}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}; rounds=${NT_BENCH_ROUNDS:-2}
echo "== host"; timeout 60 "$build/bench/cpu_kernels_bench" 16 2>&1 | sed -n 1,2p | tee "$out/host.txt"
NT_BENCH_CPU_TIME=1 timeout 60 "$build/bench/cpu_kernels_bench" 1 2>&1 | sed -n '/one core/,/^$/p' | tee -a "$out/host.txt"

spec=${NT_SWEEP_MODEL:-llama3-8b:q4_k}
source "$(dirname "$0")/device_model.sh"
echo "== $spec: decode by prefetch distance (NT_CPU_PREFETCH_BYTES) and hint (NT_CPU_PREFETCH_NTA), $rounds rounds"
for r in $(seq "$rounds"); do
  for d in 0 1024 2048 4096 8192; do
    echo "$d $(NT_CPU_PREFETCH_BYTES=$d "$nt" bench -m "$file" --device cpu -t 16 -p 0 -n 16 -r 2 2>&1 | grep ' tg')"
  done
  for d in 2048 4096; do
    echo "$d nta $(NT_CPU_PREFETCH_NTA=1 NT_CPU_PREFETCH_BYTES=$d "$nt" bench -m "$file" --device cpu -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E ' (pp|tg)' | tr '\n' ' ')"
  done
done | tee "$out/prefetch.md"
echo "== $spec: pp16 by GEMM threshold (NT_CPU_GEMM_MIN_TOKENS; 16 is the K-quant default)"
for n in 8 12 16 32; do echo "$n $(NT_CPU_GEMM_MIN_TOKENS=$n "$nt" bench -m "$file" --device cpu -t 16 -p 16 -n 0 -r 2 2>&1 | grep ' pp')"; done \
  | tee "$out/gemm-threshold.md"

spec=$main
source "$(dirname "$0")/device_model.sh"
echo "== $spec: ours, CPU, 16 threads"
for r in $(seq "$rounds"); do "$nt" bench -m "$file" --device cpu -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E ' (pp|tg)'; done | tee "$out/cpu.md"
if [[ "$ref" != - ]]; then
  echo "== reference, llama-bench -ngl 0 -t 16"
  for r in $(seq "$rounds"); do
    LD_LIBRARY_PATH="$ref:${LD_LIBRARY_PATH:-}" "$ref/llama-bench-amx" -m "$file" -ngl 0 -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E '^\|' \
      || LD_LIBRARY_PATH="$ref:${LD_LIBRARY_PATH:-}" "$ref/llama-bench" -m "$file" -ngl 0 -t 16 -p 16 -n 16 -r 2 2>&1 | grep -E '^\|'
  done | tee "$out/reference-cpu.md"
fi
if [[ -n "$budget" ]]; then
  echo "== hybrid at $budget"
  "$nt" bench -m "$file" --device cuda --vram-budget "$budget" --cpu-layers auto -p 0 -n 16 -r 2 --trace "$out/hybrid-trace.json" 2>&1 \
    | grep -E "hybrid|model:| tg" | tee "$out/hybrid.md"
fi
