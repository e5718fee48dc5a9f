#!/usr/bin/env bash
# Batched decode on the GPU (docs/PERFORMANCE.md, "Batched decode on the GPU"),
# in one device call: for each model, our `bench` batched mode (aggregate
# prefill and decode tok/s at several batch sizes) and the reference engine's
# llama-batched-bench on the same file, plus the single-sequence decode of the
# previous build against this one (a regression check of the fast path).
#   bench/batched.sh BUILD_DIR REF_BIN_DIR OLD_NTRANSFORMER MODEL...
# MODEL = preset:type[:vram budget], e.g. llama3-8b:q4_k, llama3-70b:q4_k_m:24GiB.
# Env: NT_NPP (128), NT_NTG (64), NT_NPL (1,4,16,64); NT_BENCH_DIR (/tmp/nt-bench);
# NT_RUN: which parts run, a subset of "ours single ref" (default all three).
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference engine bin dir (or -)}; old=${3:?previous ntransformer (or -)}
shift 3
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
npp=${NT_NPP:-128}; ntg=${NT_NTG:-64}; npl=${NT_NPL:-1,4,16,64}
mkdir -p "$out" "$work"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/lib/python3*/dist-packages/nvidia \
  -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nt="$build/src/ntransformer"
largest=${npl##*,}
runs=" ${NT_RUN:-ours single ref} "
ctx=$((npp + ntg))
for spec in "$@"; do
  IFS=: read -r preset type budget <<<"$spec"
  file="$work/$preset-$type.gguf"
  [[ -f "$file" ]] || "$nt" make-model --preset "$preset" --type "$type" --out "$file" 2>>"$out/make-model.log" \
    || { echo "make-model $spec failed"; continue; }
  flags=(--device cuda); ref_flags=(-ngl 99)
  [[ -n "$budget" ]] && flags+=(--vram-budget "$budget")
  if [[ "$runs" == *" ours "* ]]; then
    echo "== $spec: ours"
    "$nt" bench -m "$file" "${flags[@]}" -npp "$npp" -ntg "$ntg" -npl "$npl" 2>&1 | tee -a "$out/batched.md"
  fi
  if [[ "$runs" == *" single "* && -z "$budget" && "$old" != - ]]; then
    echo "== $spec: single-sequence decode, previous build then this one"
    for bin in "$old" "$nt" "$old" "$nt"; do "$bin" bench -m "$file" --device cuda -p 0 -n 64 -d 512 -r 3 2>&1 | grep ' tg'; done \
      | tee -a "$out/single.md"
  fi
  if [[ "$runs" == *" ref "* && -z "$budget" && "$ref" != - ]]; then
    echo "== $spec: reference llama-batched-bench"
    "$ref/llama-batched-bench" -m "$file" "${ref_flags[@]}" -c $((largest * ctx)) -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" \
      -npl "$npl" -fa on 2>&1 | grep -E '^\|' | tee -a "$out/reference.md"
  fi
done
