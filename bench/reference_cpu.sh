#!/usr/bin/env bash
# The reference engine's CPU llama-bench, built here for the GPU machine's host
# CPU (Sapphire Rapids: AVX-512 VNNI/BF16, AMX) so that a device call spends no
# time building it (the device build of reference-engine.sh takes ~6 minutes).
# Static ggml; libgomp travels beside it. Two builds: with AMX, as a native
# build there would compile, and without, for a host that refuses AMX.
#   bench/reference_cpu.sh SRC_DIR OUT_DIR   (SRC_DIR from ../shared/tools/reference-engine.sh fetch; ~20 min on 2 cores)
# On the device: LD_LIBRARY_PATH=OUT_DIR OUT_DIR/llama-bench-amx ... || OUT_DIR/llama-bench ...
set -euo pipefail
src=${1:?llama.cpp source dir}; out=${2:?output dir}
mkdir -p "$out"
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
        -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
        -DGGML_AVX512_BF16=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
for variant in amx plain; do
  build="$out/build-$variant"
  flags=("${common[@]}")
  [[ $variant == amx ]] && flags+=(-DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=ON)
  echo "reference_cpu: building llama-bench ($variant) in $build"
  cmake -S "$src" -B "$build" "${flags[@]}" > "$build.log" 2>&1
  ninja -C "$build" llama-bench >> "$build.log" 2>&1
done
strip -o "$out/llama-bench-amx" "$out/build-amx/bin/llama-bench"
strip -o "$out/llama-bench" "$out/build-plain/bin/llama-bench"
cp "$(gcc -print-file-name=libgomp.so.1)" "$out/"
ls -la "$out"/llama-bench* "$out/libgomp.so.1"
