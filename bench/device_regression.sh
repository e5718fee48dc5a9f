#!/usr/bin/env bash
# Llama's figures with two builds in one device call, alternating, for a
# change that must not slow them (docs/PERFORMANCE.md: a regression over 2%
# is a defect): the 8B and 70B Q4_K_M resident (pp512, tg128) and the 70B at
# a 24 GiB VRAM budget (tg32), each build twice in the order A B A B.
#   bench/device_regression.sh BEFORE_BUILD AFTER_BUILD   (each laid out as build/, e.g. /tmp/nt-before /tmp/nt)
# The make-model files go to NT_BENCH_DIR (default /tmp/nt-bench); NT_REGRESSION_CASES picks the cases
# (default "8b 70b 70b-24GiB").
set -uo pipefail
before=${1:?build before the change}; after=${2:?build after it}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
cases=" ${NT_REGRESSION_CASES:-8b 70b 70b-24GiB} "
source "$(dirname "$0")/device_lib.sh"

model() {  # the preset's Q4_K_M file, written once
  local f="$work/$1-q4_k_m.gguf"
  [[ -s $f ]] || "$after/src/ntransformer" make-model --preset "$1" --type q4_k_m --out "$f" > /dev/null 2>&1
  echo "$f"
}
# Runs `bench ARGS` with each build twice, alternating, keeping the table rows.
alternate() {
  local label=$1; shift
  for round in 1 2; do
    for build in "$before" "$after"; do
      log "$label: $(basename "$build"), round $round"
      "$build/src/ntransformer" bench "$@" 2>&1 | grep -E "^\| .*(pp|tg)[0-9]|error" | tee -a "$out/regression.md"
    done
  done
}

if [[ $cases == *" 8b "* ]]; then
  f=$(model llama3-8b)
  alternate "8B resident" -m "$f" --device cuda -p 512 -n 128 -r 2
fi
if [[ $cases == *" 70b "* || $cases == *" 70b-24GiB "* ]]; then
  rm -f "$work/llama3-8b-q4_k_m.gguf"  # the disk holds one large file at a time
  f=$(model llama3-70b)
  [[ $cases == *" 70b "* ]] && alternate "70B resident" -m "$f" --device cuda -p 512 -n 128 -r 2
  [[ $cases == *" 70b-24GiB "* ]] && alternate "70B at 24 GiB" -m "$f" --device cuda --vram-budget 24GiB -p 0 -n 32 -r 2
fi
log done
