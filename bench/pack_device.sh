#!/usr/bin/env bash
# Packs this build's binaries (a CUDA build for the device's sm_90 that carries
# fmt inside: `NT_CUDA=ON scripts/setup.sh` on a machine without a GPU, then
# `cmake -B build -DNT_FMT_HEADER_ONLY=ON && cmake --build build`) for a device call (the device has no -dev
# packages, and a call carries at most 64 MiB): the ones named (ntransformer,
# nt_gpu_tests, cuda_bench; default the first two), stripped, as
# .devdata/bin.txz laid out as build/ is, so the device's scripts take /tmp/nt
# as their BUILD_DIR. ~12 MB with xz for one or all (the CUDA kernels, linked
# into each). With `smol`, also the default model in 42 MB pieces
# (bench/device_stage.sh joins them on the device).
#   bench/pack_device.sh [ntransformer] [nt_gpu_tests] [cuda_bench] [smol]   (.devdata/ stays out of git)
# NT_BUILD_DIR names another build dir than build/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${NT_BUILD_DIR:-build}
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
grep -qx '/.devdata/' "$exclude" 2>/dev/null || echo '/.devdata/' >> "$exclude"
declare -A path=([ntransformer]=src/ntransformer [nt_gpu_tests]=tests/nt_gpu_tests [cuda_bench]=bench/cuda_bench)
bins=() smol=
for arg in "$@"; do
  if [[ $arg == smol ]]; then smol=1; elif [[ -n "${path[$arg]:-}" ]]; then bins+=("${path[$arg]}");
  else echo "pack_device: unknown '$arg' (ntransformer, nt_gpu_tests, cuda_bench, smol)" >&2; exit 2; fi
done
((${#bins[@]})) || bins=(src/ntransformer tests/nt_gpu_tests)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for bin in "${bins[@]}"; do
  if ldd "$build/$bin" | grep -q libfmt; then
    echo "pack_device: $build/$bin links libfmt.so, which the device lacks; reconfigure with -DNT_FMT_HEADER_ONLY=ON" >&2
    exit 2
  fi
  mkdir -p "$stage/$(dirname "$bin")"
  strip -o "$stage/$bin" "$build/$bin"
done
# The device has no -dev packages: the shared libraries ntransformer links
# beyond the base system (cpp-httplib and the brotli it needs) go beside it,
# in lib/, where its run path looks.
if [[ " ${bins[*]} " == *" src/ntransformer "* ]]; then
  mkdir -p "$stage/src/lib"
  for lib in $(ldd "$build/src/ntransformer" | awk '/cpp-httplib|brotli/ { print $3 }'); do cp -L "$lib" "$stage/src/lib/"; done
  for lib in $(ldd "$stage"/src/lib/libcpp-httplib* | awk '/brotli/ { print $3 }'); do cp -Ln "$lib" "$stage/src/lib/"; done
fi
mkdir -p .devdata
# One dictionary over all of them: the binaries share most of their bytes
# (the CUDA kernels), so two take about what one does (~13 MB).
tar cf - -C "$stage" . | xz -T1 --lzma2=preset=6,dict=128MiB > .devdata/bin.txz
ls -la .devdata/bin.txz
if [[ -n "$smol" ]]; then
  rm -f .devdata/smol.*
  split -b 42000000 models/SmolLM2-135M-Instruct.Q4_1.gguf .devdata/smol.
  ls -la .devdata/smol.*
fi
