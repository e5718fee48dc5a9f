#!/usr/bin/env bash
# Resident-model benchmarks on the GPU (docs/PERFORMANCE.md, "GPU resident decode and prefill"), in one
# device call: measures the device-to-device copy ceiling, writes each synthetic
# model with make-model on the local disk, runs `ntransformer bench` on it
# (pp512; decode at 512 and 4096 cached tokens) and prints decode GB/s as a
# fraction of the ceiling, of the weights alone and of the weights plus the KV
# cache each step reads. Models listed in NT_BENCH_FULL_CONTEXT (default
# llama3-8b:q4_k_m) also decode at the end of their full 131072-token context
# (a 130944-token prefill first). Binaries come prebuilt (carried):
#   bench/gpu_models.sh BUILD_DIR [MODELS...]   MODEL = preset:type, e.g. llama3-8b:q4_k_m
set -uo pipefail
build=${1:?build dir with src/ntransformer and bench/cuda_bench}
shift
models=("$@")
((${#models[@]})) || models=(llama3-8b:q4_k_m llama3-8b:q8_0 llama3-70b:q4_k_m)
out=${OUT:-out}
work=${NT_BENCH_DIR:-/tmp/nt-bench}
mkdir -p "$out" "$work"
# The binaries link cuBLAS dynamically: find it in the CUDA or pip install.
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/lib/python3*/dist-packages/nvidia \
  /opt/*/.venv/lib/python3*/site-packages/nvidia -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] || cublas=$(timeout 30 find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
ceiling=$("$build/bench/cuda_bench" ceiling 2>&1 | sed -n 's/^device-to-device copy: \([0-9.]*\) GB.*/\1/p')
echo "device-to-device copy ceiling: ${ceiling} GB/s" | tee "$out/ceiling.txt"
nt="$build/src/ntransformer"
for spec in "${models[@]}"; do
  preset=${spec%%:*}; type=${spec##*:}; file="$work/$preset-$type.gguf"
  start=$SECONDS
  "$nt" make-model --preset "$preset" --type "$type" --out "$file" 2>>"$out/make-model.log" || { echo "make-model $spec failed"; continue; }
  echo "wrote $file ($(stat -c %s "$file") bytes) in $((SECONDS - start)) s"
  "$nt" bench -m "$file" --device cuda -p 512 -n 64 -d 512 -d 4096 -r 3 2>&1 | tee -a "$out/bench.md"
  if [[ " ${NT_BENCH_FULL_CONTEXT-llama3-8b:q4_k_m} " == *" $spec "* ]]; then
    "$nt" bench -m "$file" --device cuda -c 131072 -p 0 -n 64 -d 130944 -r 3 2>&1 | grep ' tg' | tee -a "$out/bench.md"
  fi
  [[ -n "${NT_BENCH_KEEP:-}" ]] || rm -f "$file"  # the disk holds one 70B file at a time
done
echo
echo "decode GB/s as a fraction of the ${ceiling} GB/s copy ceiling:"
awk -F'|' -v c="$ceiling" '/ tg/ { gsub(/ /, "", $7); gsub(/ /, "", $8)
  printf "%s %s: weights %.0f%%, weights + KV %.0f%%\n", $2, $4, 100 * $7 / c, 100 * $8 / c }' "$out/bench.md"
