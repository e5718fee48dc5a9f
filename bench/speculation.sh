#!/usr/bin/env bash
# Speculative greedy decoding on the CPU (docs/PERFORMANCE.md, "Speculative
# decoding"): for each prompt kind, plain greedy decoding, then --lookup and
# --draft-self, printing decode tok/s, the speedup over plain, acceptance and
# tokens per pass as a Markdown table. The texts must agree (greedy identity).
#   bench/speculation.sh [BUILD_DIR] [MODEL]   Env: NT_N (128 tokens), NT_THREADS (2).
set -euo pipefail
build=${1:-build}; model=${2:-}
nt="$build/src/ntransformer"; n=${NT_N:-128}; threads=${NT_THREADS:-2}
passage="The lighthouse stood at the end of the harbour wall. Every night the keeper climbed its hundred and twelve \
steps, trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book. In \
the winter of the great storm the lens stopped turning, and for three nights he turned it by hand."
declare -A prompts=(
  [chat]="Give me three tips for staying healthy."
  [code]="Write a Python function that checks whether a number is prime, with a docstring and tests."
  [summarise]="Summarise this text in two sentences:

$passage"
  [repeat]="Repeat this text word for word:

$passage"
)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { sed -nE "s|$1|\\1|p" "$2" | head -1; }
echo "| prompt | mode | decode tok/s | speedup | accepted / drafted | tokens per pass |"
echo "|---|---|---|---|---|---|"
for kind in chat code summarise repeat; do
  base=""
  for mode in plain lookup self; do
    case $mode in plain) flags=();; lookup) flags=(--lookup);; self) flags=(--draft-self);; esac
    "$nt" run ${model:+-m "$model"} -t "$threads" --temp 0 -n "$n" -p "${prompts[$kind]}" "${flags[@]}" \
      > "$tmp/$mode.out" 2> "$tmp/$mode.err"
    if [[ $mode != plain ]] && ! cmp -s "$tmp/plain.out" "$tmp/$mode.out"; then
      echo "speculation.sh: $kind, $mode: the text differs from plain greedy decoding" >&2; exit 1
    fi
    tps=$(field '^decode: .*\(([0-9.]+) tok/s\).*' "$tmp/$mode.err")
    [[ -z $base ]] && base=$tps
    speedup=$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
    acc=$(field '^speculation: .* ([0-9]+ of [0-9]+) drafted.*' "$tmp/$mode.err")
    per=$(field '^speculation: .* ([0-9.]+) tokens per pass' "$tmp/$mode.err")
    echo "| $kind | $mode | $tps | $speedup | ${acc:--} | ${per:-1} |"
  done
done
