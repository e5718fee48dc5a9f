#!/usr/bin/env bash
# One device call for the batched-decode figures (docs/PERFORMANCE.md): the
# reference engine builds in the background while our batched GPU tests and
# benchmarks run, then its llama-batched-bench runs on the same files.
#   bench/device_batched.sh BIN_DIR OLD_NTRANSFORMER MODEL...   (models as bench/batched.sh takes them)
# Carry: the binaries, the previous build's ntransformer, .devref (reference-engine.sh fetch output and the script).
set -uo pipefail
bin=${1:?bin dir}; old=${2:?previous ntransformer}; shift 2
out=${OUT:-out}
mkdir -p "$out"
# setsid: a process the call leaves behind outlives it only in a session of its own.
if [[ ! -x /tmp/lb/bin/llama-batched-bench ]] && ! pgrep -f "reference-engine.sh build" >/dev/null; then
  setsid bash .devref/reference-engine.sh build .devref > /tmp/refbuild.log 2>&1 < /dev/null &
fi
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/lib/python3*/dist-packages/nvidia \
  -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ -x "$bin/tests/nt_gpu_tests" && -z "${NT_SKIP_TESTS:-}" ]]; then
  "$bin/tests/nt_gpu_tests" --gtest_brief=1 --gtest_filter="${NT_TESTS:-BatchedDecode.*:AttentionSequences.*}" > "$out/gpu.log" 2>&1
  echo "gpu tests exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|batched picks" "$out/gpu.log" | head -20
fi
# Resident models run while the reference builds; a model with a VRAM budget
# waits for the build: its hybrid planner measures the host CPU at load, and a
# build on every core made it see 2.3 GB/s instead of 53 (docs/PERFORMANCE.md).
resident=(); budgeted=()
for spec in "$@"; do
  IFS=: read -r _ _ budget <<<"$spec"
  if [[ -n "$budget" ]]; then budgeted+=("$spec"); else resident+=("$spec"); fi
done
((${#resident[@]})) && NT_RUN="ours single" bash bench/batched.sh "$bin" - "$old" "${resident[@]}"
for i in $(seq 100); do pgrep -f "reference-engine.sh build" >/dev/null || break; sleep 5; done
tail -3 /tmp/refbuild.log
((${#budgeted[@]})) && NT_RUN=ours bash bench/batched.sh "$bin" - - "${budgeted[@]}"
NT_RUN=ref bash bench/batched.sh "$bin" /tmp/lb/bin - "$@"
