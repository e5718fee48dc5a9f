#!/usr/bin/env bash
# A/B of kernel settings on resident synthetic models, in one device call:
# for each MODEL (preset:type) writes the file once with make-model, then runs
# `ntransformer bench` (pp512, decode at 512 cached tokens) under each setting.
# A setting is "default" or comma-separated environment assignments
# (e.g. NT_CUDA_PDL=0); NT_AB_SETTINGS lists them (space-separated). With
# NT_AB_BASELINE naming another ntransformer binary (e.g. the previous
# commit's build), "baseline" runs it first, and a setting whose first field
# is "baseline" (e.g. baseline,NT_CUDA_PDL=0) runs it too. Decode GB/s is
# printed as a fraction of the copy ceiling measured in the same run.
#   bench/decode_ab.sh BUILD_DIR [MODEL...]
set -uo pipefail
build=${1:?build dir with src/ntransformer and bench/cuda_bench}
shift
models=("$@")
((${#models[@]})) || models=(llama3-8b:q4_k_m)
read -r -a settings <<< "${NT_AB_SETTINGS:-default NT_CUDA_PDL=0}"
out=${OUT:-out}
work=${NT_BENCH_DIR:-/tmp/nt-bench}
mkdir -p "$out" "$work"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ceiling=$("$build/bench/cuda_bench" ceiling 2>&1 | sed -n 's/^device-to-device copy: \([0-9.]*\) GB.*/\1/p')
echo "device-to-device copy ceiling: ${ceiling} GB/s"
nt="$build/src/ntransformer"
[[ -n "${NT_AB_BASELINE:-}" && " ${settings[*]} " != *" baseline "* ]] && settings=(baseline "${settings[@]}")
for spec in "${models[@]}"; do
  preset=${spec%%:*}; type=${spec##*:}; file="$work/$preset-$type.gguf"
  [[ -f "$file" ]] || "$nt" make-model --preset "$preset" --type "$type" --out "$file" 2>>"$out/make-model.log" ||
    { echo "make-model $spec failed"; continue; }
  for setting in "${settings[@]}"; do
    log="$out/ab-$preset-$type-${setting//[=,\/]/_}.md"
    binary=$nt env_args=()
    [[ $setting == default ]] || IFS=, read -r -a env_args <<< "$setting"
    if [[ ${env_args[0]:-} == baseline ]]; then binary=$NT_AB_BASELINE; env_args=("${env_args[@]:1}"); fi
    env "${env_args[@]}" "$binary" bench -m "$file" --device cuda -p 512 -n 64 -d 512 -r 3 > "$log" 2>&1
    awk -F'|' -v c="$ceiling" -v s="$setting" -v m="$spec" \
      '/ (pp|tg)/ { gsub(/ /, "", $7); printf "%-20s %-44s %s %s tok/s %.0f GB/s %.0f%%\n", m, s, $4, $5, $7, 100 * $7 / c }' "$log"
  done
  [[ -n "${NT_BENCH_KEEP:-}" ]] || rm -f "$file"  # the disk holds one 70B file at a time
done
