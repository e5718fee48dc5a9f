# Sourced by the device benchmark scripts, after they set `out` and `work`:
# makes both folders, finds cuBLAS for the binaries, names the card, and
# defines log and reference_bench.

mkdir -p "$out" "$work"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

log() { echo "== $* ($SECONDS s)"; }

# The reference's llama-bench with its peak VRAM sampled by nvidia-smi every
# 200 ms, which tells which of its settings fit a budget (it has none of its own).
#   reference_bench LABEL REF_BIN_DIR SAMPLES_FILE llama-bench-args...
reference_bench() {
  local label=$1 ref=$2 samples=$3
  shift 3
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$samples" &
  local smi=$!
  LD_LIBRARY_PATH="$ref:$LD_LIBRARY_PATH" "$ref/llama-bench" "$@" 2>&1 | grep -E "^\| .*(pp|tg)|error"
  kill $smi; wait $smi 2>/dev/null
  echo "reference $label: peak VRAM $(sort -n "$samples" | tail -1) MiB"
}
