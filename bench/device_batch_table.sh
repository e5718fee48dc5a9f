#!/usr/bin/env bash
# The batched-decode table (docs/PERFORMANCE.md, "Batched decode on the GPU") in one
# device call, on the card it is measured on (an H200):
# our batched decode and the reference's llama-batched-bench on the same
# make-model files (8B Q4_K and 70B Q4_K_M resident, -npp 128 -ntg 64
# -npl 1,4,16,64), then the 70B at a 24 GiB VRAM budget (-npp 64 -ntg 16)
# against the reference's -ngl 40 -t 16. On another card it runs nothing and
# exits 3 within seconds, so a call that lands on the wrong machine costs
# little (NT_GPU_NEEDED= runs anywhere).
#   bench/device_batch_table.sh [resident] [streamed]   (default both; one call holds at most 10 minutes, so
#   the parts can run as two calls on the same warm machine, which keeps the model files in /tmp/nt-bench)
# Carry: .devdata/bin.txz (bench/pack_device.sh ntransformer), .devdata/ref-cuda.txz
# (bench/reference_cuda.sh), this script and bench/batched.sh. Logs in $OUT.
set -uo pipefail
need=${NT_GPU_NEEDED-H200}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu"
if [[ -n "$need" && "$gpu" != *"$need"* ]]; then
  echo "not an $need: nothing run"
  exit 3
fi
out=${OUT:-out}; mkdir -p "$out" /tmp/nt /tmp/ref
# A second call on the same warm machine finds them unpacked.
[[ -x /tmp/nt/src/ntransformer ]] || tar xJf .devdata/bin.txz -C /tmp/nt || exit 1
[[ -x /tmp/ref/bin/llama-bench ]] || tar xJf .devdata/ref-cuda.txz -C /tmp/ref || exit 1
# The reference links cuBLAS and NCCL dynamically.
for lib in 'libcublas.so.13*' 'libnccl.so.2'; do
  found=$(find /usr/local /usr/lib -name "$lib" 2>/dev/null | head -1)
  [[ -n "$found" ]] && LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH="/tmp/ref/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
parts=" ${*:-resident streamed} "
if [[ "$parts" == *" resident "* ]]; then
  # NT_RESIDENT_MODELS picks the rows when a call has little time left.
  NT_RUN="ours ref" bash bench/batched.sh /tmp/nt /tmp/ref/bin - ${NT_RESIDENT_MODELS:-llama3-8b:q4_k llama3-70b:q4_k_m}
fi
if [[ "$parts" == *" streamed "* ]]; then
  NT_NPP=64 NT_NTG=16 NT_RUN=ours bash bench/batched.sh /tmp/nt - - llama3-70b:q4_k_m:24GiB
  echo "== llama3-70b:q4_k_m: reference -ngl 40 -t 16"
  /tmp/ref/bin/llama-batched-bench -m /tmp/nt-bench/llama3-70b-q4_k_m.gguf -ngl 40 -t 16 -c 5120 -b 2048 -ub 512 \
    -npp 64 -ntg 16 -npl 1,4,16,64 -fa on 2>&1 | grep -E '^\|' | tee -a "$out/reference.md"
fi
