#!/usr/bin/env bash
# The CPU as a fourth tier (docs/PERFORMANCE.md, "CPU as a fourth tier: the hybrid split"),
# in one device call: the planner's four-tier plan (with the CPU rate it
# measures on the model's own layers), then decode and prefill of a model at
# a VRAM budget with --cpu-layers 0 (streaming only), auto and fixed counts,
# a trace of hybrid decode steps, and the reference engine's -ngl split when
# its binaries are there.
#   bench/hybrid.sh BUILD_DIR REF_BIN_DIR|- [PRESET:TYPE:BUDGET] [CPU-LAYER COUNTS...]
# Env: NT_BENCH_DIR (/tmp/nt-bench), NT_NGL (40), NT_DECODE (16 tokens), NT_PREFILL (512).
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference bin dir or -}; spec=${3:-llama3-70b:q4_k_m:24GiB}
shift $(($# < 3 ? $# : 3))
counts=("$@"); ((${#counts[@]})) || counts=(0 auto 16 24)
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
source "$(dirname "$0")/device_model.sh"
echo "== plan"
"$nt" plan -m "$file" --vram-budget "$budget" 2>&1 | tee "$out/plan.txt" | sed -n '/four tiers/,$p' | head -30
for n in "${counts[@]}"; do
  echo "== --cpu-layers $n: decode"
  trace=(); [[ "$n" == auto ]] && trace=(--trace "$out/hybrid-trace.json")
  "$nt" bench -m "$file" --device cuda --vram-budget "$budget" --cpu-layers "$n" -p 0 -n "${NT_DECODE:-16}" -r 2 "${trace[@]}" 2>&1 \
    | grep -E "hybrid|model:|streaming:| tg|tok/s" | tee -a "$out/hybrid.md"
done
echo "== --cpu-layers auto: prefill"
"$nt" bench -m "$file" --device cuda --vram-budget "$budget" -p "${NT_PREFILL:-512}" -n 0 -r 1 2>&1 \
  | grep -E "hybrid|model:| pp" | tee -a "$out/hybrid.md"
if [[ "$ref" != - && -x "$ref/llama-bench" ]]; then
  echo "== reference -ngl ${NT_NGL:-40} -t 16"
  "$ref/llama-bench" -m "$file" -ngl "${NT_NGL:-40}" -t 16 -p 0 -n "${NT_DECODE:-16}" -r 2 2>&1 | grep -E '^\|' | tee -a "$out/reference.md"
fi
