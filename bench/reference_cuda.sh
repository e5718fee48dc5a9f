#!/usr/bin/env bash
# The reference engine's CUDA benches, built here for the GPU machine (sm_90; its
# host's Sapphire Rapids CPU flags, as a native build there would take, for the
# layers -ngl leaves on the CPU), so that no device call builds them (the device
# build of reference-engine.sh takes ~6 minutes, and failed there once). Static
# ggml. llama-bench and llama-batched-bench become one binary that runs as
# either by its name, so the CUDA code travels once: OUT_DIR/ref-cuda.txz (~42 MB
# with xz) holds bin/llama-bench, the llama-batched-bench link and libgomp.
# llama-server (no web UI) carries the CUDA code too, so it travels apart:
# OUT_DIR/ref-server.txz holds bin/llama-server and libgomp.
#   bench/reference_cuda.sh SRC_DIR OUT_DIR   (SRC_DIR from ../shared/tools/reference-engine.sh fetch; ~30 min on 2 cores)
# On the device: tar xJf ref-cuda.txz -C DIR; LD_LIBRARY_PATH=DIR/bin plus the CUDA libraries and
# libnccl.so.2's folder (ggml links NCCL); then DIR/bin/llama-bench -ngl 40 ... or DIR/bin/llama-batched-bench ...
set -euo pipefail
src=${1:?llama.cpp source dir}; out=$(mkdir -p "${2:?output dir}" && cd "$2" && pwd)
build="$out/build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON \
  -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON \
  -DGGML_AMX_BF16=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF > "$build.log" 2>&1
cmake --build "$build" -j"$(nproc)" --target llama-bench llama-batched-bench llama-server >> "$build.log" 2>&1
# The two benches' own link line, with both entry points and a main that picks one by name.
cat > "$out/bench_by_name.cpp" <<'CPP'
#include <cstring>
int llama_bench(int argc, char ** argv);
int llama_batched_bench(int argc, char ** argv);
int main(int argc, char ** argv) {
    const char * slash = std::strrchr(argv[0], '/');
    return std::strstr(slash ? slash + 1 : argv[0], "batched") ? llama_batched_bench(argc, argv) : llama_bench(argc, argv);
}
CPP
link=$(sed -e 's|^.*-o ../../bin/llama-bench||' "$build/tools/llama-bench/CMakeFiles/llama-bench.dir/link.txt")
mkdir -p "$out/pack/bin"
(cd "$build/tools/llama-bench" && c++ -O2 "$out/bench_by_name.cpp" -o "$out/pack/bin/llama-bench" \
  ../batched-bench/libllama-batched-bench-impl.a $link)
strip "$out/pack/bin/llama-bench"
ln -sf llama-bench "$out/pack/bin/llama-batched-bench"
cp "$(gcc -print-file-name=libgomp.so.1)" "$out/pack/bin/"
tar cJf "$out/ref-cuda.txz" -C "$out/pack" bin
ls -la "$out/ref-cuda.txz"
mkdir -p "$out/server/bin"
strip -o "$out/server/bin/llama-server" "$build/bin/llama-server"
cp "$(gcc -print-file-name=libgomp.so.1)" "$out/server/bin/"
tar cJf "$out/ref-server.txz" -C "$out/server" bin
ls -la "$out/ref-server.txz"
