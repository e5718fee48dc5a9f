#!/usr/bin/env bash
# The int8 tensor-core GEMM (src/backend/cuda/quantized_gemm.cu) against the
# mat-vec it replaces in decode batches of 6-64 sequences, in one device call:
# batched decode (and, with NT_PASS=1, the single-sequence pass cost of T
# tokens, a prompt chunk, which keeps the mat-vec and f16 GEMM) for each
# NT_CUDA_INT8_GEMM setting.
#   bench/int8_gemm.sh BUILD_DIR [PRESET:TYPE] [TOKEN COUNTS]
# Env: NT_BENCH_DIR (/tmp/nt-bench), NT_NPL (1,4,16,64), NT_INT8 (the
# NT_CUDA_INT8_GEMM settings to compare: "0 6", off and from 6 tokens),
# NT_PASS (1: also the single-sequence pass cost; default 0).
set -uo pipefail
build=${1:?build dir}; spec=${2:-llama3-8b:q4_k}; counts=${3:-1,2,4,8,9,16,32,64,128,256}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
source "$(dirname "$0")/device_model.sh"
for int8 in ${NT_INT8:-0 6}; do
  if [[ "${NT_PASS:-0}" == 1 ]]; then
    echo "== $spec, NT_CUDA_INT8_GEMM=$int8: pass cost"
    NT_CUDA_INT8_GEMM=$int8 "$nt" bench -m "$file" --device cuda -p 0 -n 0 -r 3 --pass-tokens "$counts" 2>&1 \
      | grep -E "^\| .*\| [0-9]+ \|" | tee -a "$out/int8_gemm.md"
  fi
  echo "== $spec, NT_CUDA_INT8_GEMM=$int8: batched decode"
  NT_CUDA_INT8_GEMM=$int8 "$nt" bench -m "$file" --device cuda -npp 128 -ntg 64 -npl "${NT_NPL:-1,4,16,64}" 2>&1 \
    | grep -E "^\|" | tee -a "$out/int8_gemm.md"
done
