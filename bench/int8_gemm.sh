#!/usr/bin/env bash
# Which matmul a decode batch takes, measured: batched decode of one made
# model under each setting of the path switches, alternating rounds in one
# device call (the int8 GEMM of src/backend/cuda/kernels/quantized_gemm.cu against
# the mat-vec it replaces from each format's quantized_gemm_min_tokens, and
# cuBLAS for float layers). With NT_PASS=1 also the single-sequence pass
# cost of T tokens (a prompt chunk: the mat-vec and f16 GEMM) per setting.
#   bench/int8_gemm.sh BUILD_DIR [PRESET:TYPE] [TOKEN COUNTS]
# Env: NT_BENCH_DIR (/tmp/nt-bench), NT_NPL (1,4,16,64), NT_ROUNDS (1),
# NT_SETTINGS (space-separated: "default", or one VAR=VALUE each, e.g.
# "default NT_CUDA_INT8_GEMM=0 NT_CUDA_INT8_GEMM=9 NT_CUDA_DECODE_GEMM=65";
# default "default NT_CUDA_INT8_GEMM=0"), NT_PASS (1: also the pass cost).
set -uo pipefail
build=${1:?build dir}; spec=${2:-llama3-8b:q4_k}; counts=${3:-1,2,4,8,9,16,32,64,128,256}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
source "$(dirname "$0")/device_model.sh"
for round in $(seq "${NT_ROUNDS:-1}"); do
  for setting in ${NT_SETTINGS:-default NT_CUDA_INT8_GEMM=0}; do
    env=(); [[ "$setting" == default ]] || env=("$setting")
    if [[ "${NT_PASS:-0}" == 1 ]]; then
      echo "== $spec, $setting, round $round: pass cost"
      env "${env[@]}" "$nt" bench -m "$file" --device cuda -p 0 -n 0 -r 3 --pass-tokens "$counts" 2>&1 \
        | grep -E "^\| .*\| [0-9]+ \|" | tee -a "$out/int8_gemm.md"
    fi
    echo "== $spec, $setting, round $round: batched decode"
    env "${env[@]}" "$nt" bench -m "$file" --device cuda -npp 128 -ntg 64 -npl "${NT_NPL:-1,4,16,64}" 2>&1 \
      | grep -E "^\|" | tee -a "$out/int8_gemm.md"
  done
done
