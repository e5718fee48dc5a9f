#!/usr/bin/env bash
# What a speculative verification pass costs (docs/PERFORMANCE.md, "What a
# verification pass costs on a streamed 70B"):
# one forward pass of T tokens against T = 1 for a model at a VRAM budget,
# the weights streamed (--cpu-layers 0), in one device call.
#   bench/pass_cost.sh BUILD_DIR [PRESET:TYPE:BUDGET] [TOKEN COUNTS]
# Env: NT_BENCH_DIR (/tmp/nt-bench), NT_CPU_LAYERS (0).
set -uo pipefail
build=${1:?build dir}; spec=${2:-llama3-70b:q4_k_m:24GiB}; counts=${3:-1,2,4,8,16,32,64,128,256}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
source "$(dirname "$0")/device_model.sh"
"$nt" bench -m "$file" --device cuda --vram-budget "$budget" --cpu-layers "${NT_CPU_LAYERS:-0}" -p 0 -n 0 -r 2 \
  --pass-tokens "$counts" 2>&1 | grep -E "^\| .*\| [0-9]+ \||model:|streaming:" | tee "$out/pass_cost.md"
