#!/usr/bin/env bash
# Mixtures of experts on the GPU (docs/PERFORMANCE.md, "Mixtures of experts
# on one GPU"), ours and the reference's llama-bench on the same make-model
# files in one device call: the GPU tests of the MoE layers, then each model
# resident and at a VRAM budget (experts cached in front of pinned RAM),
# decode of one sequence and of 16, and pp512; random routing and
# --router-skew 3. The reference keeps the first N layers' experts on the
# CPU (--n-cpu-moe N, -t 16), for the Ns given (the smallest whose VRAM fits
# the budget is its best), its peak VRAM sampled by nvidia-smi.
#   bench/device_moe.sh BUILD_DIR [REF_BIN_DIR]
# NT_MOE_STAGES picks stages (default "tests make ours reference");
# NT_MOE_MODELS "preset:budget:ncmoe-list ..." (default qwen3-30b-a3b:8GiB:28,30,32,34);
# NT_MOE_MISSES the --expert-misses policies at the budget (default "auto"; e.g. "auto link cpu");
# NT_MOE_SKEWS the --router-skew values (default "0 3").
set -uo pipefail
build=${1:?build dir}; ref=${2:-}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
stages=" ${NT_MOE_STAGES:-tests make ours reference} "
nt="$build/src/ntransformer"
source "$(dirname "$0")/device_lib.sh"

if [[ $stages == *" tests "* ]]; then
  log "GPU tests: CudaExperts, CudaFamilies"
  (cd /tmp && "$build/tests/nt_gpu_tests" --gtest_filter='*CudaExperts*:*CudaFamilies*' > "$out/moe_tests.log" 2>&1)
  echo "exit $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|experts in VRAM|experts cached" "$out/moe_tests.log" | sort | uniq -c | head -20
fi
for spec in ${NT_MOE_MODELS:-qwen3-30b-a3b:8GiB:28,30,32,34}; do
  IFS=: read -r preset budget ncmoe <<< "$spec"
  for skew in ${NT_MOE_SKEWS:-0 3}; do
    f="$work/$preset-q4_k_m-skew$skew.gguf"
    if [[ $stages == *" make "* && ! -s $f ]]; then
      log "make-model $preset q4_k_m --router-skew $skew"
      "$nt" make-model --preset "$preset" --type q4_k_m --router-skew $skew --out "$f" 2>&1 | tail -1
    fi
    [[ -s $f ]] || continue
    if [[ $stages == *" ours "* ]]; then
      log "ours: $preset skew $skew resident"
      "$nt" bench -m "$f" --device cuda -p 512 -n 64 -r 2 2>&1 | grep -E "pp512|tg64|experts|model|error" 
      log "ours: $preset skew $skew at $budget"
      "$nt" plan -m "$f" --vram-budget "$budget" 2>&1 | grep -E "experts \(|in VRAM|over the link|predicted|H2D"
      for misses in ${NT_MOE_MISSES:-auto}; do
        log "ours: $preset skew $skew at $budget, --expert-misses $misses"
        "$nt" bench -m "$f" --device cuda --vram-budget "$budget" --expert-misses "$misses" -p 512 -n 64 -r 2 2>&1 |
          grep -E "pp512|tg64|experts|error"
        "$nt" bench -m "$f" --device cuda --vram-budget "$budget" --expert-misses "$misses" -npp 128 -ntg 32 -npl 16 -r 1 2>&1 |
          grep -E "^\||experts|error" | tail -4
      done
    fi
    if [[ $stages == *" reference "* && -n $ref ]]; then
      for n in ${ncmoe//,/ }; do
        log "reference: llama-bench -ncmoe $n on $preset skew $skew"
        reference_bench "-ncmoe $n" "$ref" "$out/ref_vram.txt" -m "$f" -ngl 99 -ncmoe "$n" -t 16 -fa 1 -p 512 -n 64 -r 2
      done
    fi
  done
done
log done
