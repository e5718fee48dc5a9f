# Sourced by the device benchmarks that time one made model (bench/hybrid.sh,
# bench/pass_cost.sh): with build, spec (PRESET:TYPE:BUDGET), out and work set,
# puts cuBLAS on the loader path, sets nt, budget and file, and makes the
# model on the device's disk unless it is there already.
mkdir -p "$out" "$work"
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/lib/python3*/dist-packages/nvidia \
  -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nt="$build/src/ntransformer"
IFS=: read -r preset type budget <<<"$spec"
file="$work/$preset-$type.gguf"
[[ -f "$file" ]] || "$nt" make-model --preset "$preset" --type "$type" --out "$file" 2>>"$out/make-model.log" || exit 1
