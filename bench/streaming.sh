#!/usr/bin/env bash
# Tiered weight streaming on the GPU (issue "Tiered weight streaming"), in one
# device call, for a model larger than the VRAM budget:
#   (a) --vram-budget 24GiB, the rest in pinned RAM: decode tok/s, bytes
#       streamed per token, achieved H2D GB/s against the pinned H2D speed
#       measured in the same run, and pp512;
#   (b) --vram-budget 24GiB --ram-budget 8GiB, the rest from storage: storage
#       GB/s against the O_DIRECT read speed measured in the same run;
#   (c) --io mmap with no pinned layers (storage staging only) against (a);
# then a Chrome trace of one decode step (after a 1-token prefill) under $OUT. Binaries come prebuilt:
#   bench/streaming.sh BUILD_DIR MODEL.gguf [DECODE_TOKENS]
# (MODEL e.g. from `ntransformer make-model --preset llama3-70b --type q4_k_m`).
set -uo pipefail
build=${1:?build dir with src/ntransformer}
model=${2:?GGUF model larger than the VRAM budget}
n_gen=${3:-4}
vram=${NT_VRAM_BUDGET:-24GiB}
ram=${NT_RAM_BUDGET:-8GiB}  # (b): pinned RAM, the rest from storage
io=${NT_IO:-auto}  # storage reader of (b): auto takes io_uring O_DIRECT where the filesystem allows it
out=${OUT:-out}
mkdir -p "$out"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/lib/python3*/dist-packages/nvidia \
  /opt/*/.venv/lib/python3*/site-packages/nvidia -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] || cublas=$(timeout 30 find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nt="$build/src/ntransformer"

# Link speeds measured now: 256 MiB pinned H2D copies and an O_DIRECT read of 8 GiB
# of the model file (a 2 GiB read measured half the steady rate on the H200 machine's disk).
"$nt" plan -m "$model" --vram-budget "$vram" --ram-budget "$ram" --io "$io" --bench-mib "${NT_DISK_PROBE_MIB:-8192}" 2>&1 | tee "$out/plan.txt"
h2d=$(sed -n 's/^  H2D link *\([0-9.]*\) GB.*/\1/p' "$out/plan.txt")
disk=$(sed -n 's/^  disk read *\([0-9.]*\) GB.*/\1/p' "$out/plan.txt")
# (c) keeps only the storage staging slots pinned: their size, from the plan, plus 1%.
staging=$(sed -n 's/^  storage staging ([0-9]* x [^)]*) *\([0-9.]*\) \([KMGT]iB\).*/\1\2/p' "$out/plan.txt")
staging_bytes=$(awk -v s="$staging" 'BEGIN { u = substr(s, length(s) - 2); v = substr(s, 1, length(s) - 3) + 0;
  m = u == "KiB" ? 2^10 : u == "MiB" ? 2^20 : u == "GiB" ? 2^30 : 2^40; printf "%.0f", v * m * 1.01 }')

run() {  # name, extra flags...
  local name=$1; shift
  echo "== $name: $*"
  "$nt" bench -m "$model" --device cuda --vram-budget "$vram" -c 1024 -r 1 "$@" 2>&1 | tee "$out/$name.txt"
}
run a -p 512 -n "$n_gen"
run b -p 1 -n "$n_gen" --ram-budget "$ram" --io "$io"
run c -p 1 -n "$n_gen" --ram-budget "$staging_bytes" --io mmap
run trace -p 1 -n 1 --trace "$out/trace-decode.json"

tok_s() { awk -F'|' -v t="$2" '$4 ~ t { gsub(/ /, "", $5); print $5 }' "$out/$1.txt" | head -1; }
field() { sed -n "s|.*$2.*|\\1|p" "$out/$1.txt" | head -1; }
per_pass='H2D per pass'
echo
echo "pinned H2D (measured): ${h2d} GB/s; O_DIRECT storage read (measured): ${disk} GB/s"
printf '| run | tiers | decode tok/s | pp512 tok/s | streamed / token | H2D GB/s while copying | storage GB/s |\n|---|---|---|---|---|---|---|\n'
for r in a b c; do
  tiers=$(grep -o 'layers [0-9]* vram + [0-9]* ram + [0-9]* disk' "$out/$r.txt" | head -1)
  streamed=$(field $r 'passes, \([0-9.]* [KMGT]*i*B\) H2D per pass')
  gbps=$(field $r 'H2D per pass at \([0-9.]*\) GB/s')
  storage=$(field $r 'storage [0-9.]* [KMGT]*i*B per pass at \([0-9.]*\) GB/s')
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$tiers" "$(tok_s $r tg)" "$(tok_s $r pp512)" "$streamed" "$gbps" "${storage:--}"
done
a=$(tok_s a tg); c=$(tok_s c tg)
awk -v a="$a" -v c="$c" 'BEGIN { if (c > 0) printf "tiered (a) over mmap without pinned layers (c): %.2fx\n", a / c }'
echo "trace of one decode step: $out/trace-decode.json (chrome://tracing or ui.perfetto.dev)"
