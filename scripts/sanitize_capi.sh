#!/usr/bin/env bash
# The C API under AddressSanitizer (leak detection on) and UndefinedBehaviorSanitizer:
# a build of its own (build-asan, CPU only), then capi_load_cycles, which loads
# and frees a model and a context 50 times and aborts a long generation
# through the abort callback, and capi_test, every call of the API with good
# and wrong arguments. Any leak, bad access or undefined behaviour fails it.
# It rebuilds the whole engine instrumented (tens of minutes on 2 cores), so
# CI (.ci/run) runs it rather than ctest. Usage: scripts/sanitize_capi.sh [CYCLES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cycles=${1:-50}
build="$root/build-asan"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -G Ninja -DNT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$build" ntransformer capi_test_shared capi_load_cycles >/dev/null
shared=${NT_SHARED_MODELS:-$root/../shared/models}
model="$build/stories260K.gguf"
"$build/src/ntransformer" convert-llama2c "$shared/stories260K.bin" "$shared/tok512.bin" "$model" >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/tests/capi_load_cycles" "$model" "$cycles"
"$build/tests/capi_test_shared" "$model"
echo "sanitize_capi: clean"
