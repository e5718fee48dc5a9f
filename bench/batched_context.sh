#!/usr/bin/env bash
# Batched decode at long contexts on the GPU (docs/PERFORMANCE.md, "Decode
# attention of many sequences at long contexts"), in one device call: our
# `bench` batched mode under each setting of NT_AB (default the
# multi-sequence attention's key splits off and on), alternating, then the
# reference engine's llama-batched-bench on the same file and shape.
#   bench/batched_context.sh BUILD_DIR REF_BIN_DIR(or -) MODEL
# MODEL = preset:type, e.g. llama3-8b:q4_k (made by make-model when absent).
# Env: NT_NPP (2048), NT_NTG (32), NT_NPL (1,4,16), NT_ROUNDS (2), NT_BENCH_DIR (/tmp/nt-bench),
# NT_AB (settings to alternate: "NT_CUDA_SEQUENCE_SPLITS=0 NT_CUDA_SEQUENCE_SPLITS=1").
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference engine bin dir (or -)}; spec=${3:?preset:type}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
npp=${NT_NPP:-2048}; ntg=${NT_NTG:-32}; npl=${NT_NPL:-1,4,16}; rounds=${NT_ROUNDS:-2}
mkdir -p "$out" "$work"
nt="$build/src/ntransformer"
IFS=: read -r preset type <<<"$spec"
file="$work/$preset-$type.gguf"
[[ -f "$file" ]] || "$nt" make-model --preset "$preset" --type "$type" --out "$file" 2>>"$out/make-model.log" \
  || { echo "make-model $spec failed"; exit 1; }
for ((r = 0; r < rounds; ++r)); do
  for setting in ${NT_AB:-NT_CUDA_SEQUENCE_SPLITS=0 NT_CUDA_SEQUENCE_SPLITS=1}; do
    echo "== $spec -npp $npp -ntg $ntg: ours, $setting"
    env "$setting" "$nt" bench -m "$file" --device cuda -npp "$npp" -ntg "$ntg" -npl "$npl" 2>&1 \
      | tee -a "$out/context.md"
  done
done
if [[ "$ref" != - ]]; then
  echo "== $spec -npp $npp -ntg $ntg: reference llama-batched-bench"
  "$ref/llama-batched-bench" -m "$file" -ngl 99 -c $((${npl##*,} * (npp + ntg))) -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" \
    -npl "$npl" -fa on 2>&1 | grep -E '^\|' | tee -a "$out/context-reference.md"
fi
