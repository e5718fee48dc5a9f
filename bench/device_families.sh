#!/usr/bin/env bash
# Qwen3 and Gemma 3 on the GPU against the reference (docs/PERFORMANCE.md),
# in one device call on make-model files, one at a time on the disk:
# qwen3-8b and gemma3-27b Q4_K_M resident (decode and pp512), and qwen3-32b
# Q4_K_M at a 16 GiB VRAM budget against the reference's -ngl settings
# around the one that fits it (its peak VRAM sampled: the largest -ngl within
# the budget is its best). Ours: `bench -p 512 -n 128 -r 2`; the reference:
# `llama-bench -fa 1 -t 16 -p 512 -n 128 -r 2`.
#   bench/device_families.sh BUILD_DIR REF_BIN_DIR
# NT_FAMILY_NGL lists the -ngl values for qwen3-32b (default 36,40,44,48).
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference bin dir (llama-bench)}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
ngls=${NT_FAMILY_NGL:-36,40,44,48}
nt="$build/src/ntransformer"
source "$(dirname "$0")/device_lib.sh"
for spec in qwen3-8b: gemma3-27b: qwen3-32b:16GiB; do
  IFS=: read -r preset budget <<< "$spec"
  f="$work/$preset-q4_k_m.gguf"
  log "make-model $preset q4_k_m"
  "$nt" make-model --preset "$preset" --type q4_k_m --out "$f" 2>&1 | tail -1
  if [[ -z $budget ]]; then
    log "ours: $preset resident"
    "$nt" bench -m "$f" --device cuda -p 512 -n 128 -r 2 2>&1 | grep -E "pp512|tg128|error"
    log "reference: $preset -ngl 99"
    reference_bench "-ngl 99" "$ref" "$out/ref_vram.txt" -m "$f" -ngl 99 -t 16 -fa 1 -p 512 -n 128 -r 2
  else
    log "ours: $preset at $budget"
    "$nt" bench -m "$f" --device cuda --vram-budget "$budget" -p 512 -n 128 -r 2 2>&1 | grep -E "pp512|tg128|error"
    for ngl in ${ngls//,/ }; do
      log "reference: $preset -ngl $ngl"
      reference_bench "-ngl $ngl" "$ref" "$out/ref_vram.txt" -m "$f" -ngl "$ngl" -t 16 -fa 1 -p 512 -n 128 -r 2
    done
  fi
  rm -f "$f"  # the disk holds one such file at a time
done
log done
