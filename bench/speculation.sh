#!/usr/bin/env bash
# Speculative greedy decoding (docs/PERFORMANCE.md, "Speculative decoding"):
# for each prompt kind, plain greedy decoding, then each draft source, printing
# decode tok/s, the speedup over plain, acceptance and tokens per pass as a
# Markdown table. The texts must agree (greedy identity).
#   bench/speculation.sh [BUILD_DIR] [MODEL]
#   Env: NT_N (128 tokens), NT_THREADS (2), NT_FLAGS (added to every run, e.g.
#   "--device cuda --vram-budget 60MiB"), NT_MODES ("plain lookup self"; also
#   "tree": --draft-self --draft-tree, "skip": --draft-self without the
#   NT_SKIP_COUNT layers of the calibrate-skip file NT_SKIP_FILE).
set -euo pipefail
build=${1:-build}; model=${2:-}
nt="$build/src/ntransformer"; n=${NT_N:-128}; threads=${NT_THREADS:-2}
source "$(dirname "$0")/prompt_kinds.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { sed -nE "s|$1|\\1|p" "$2" | head -1; }
echo "| prompt | mode | decode tok/s | speedup | accepted / drafted | tokens per pass |"
echo "|---|---|---|---|---|---|"
read -ra extra <<< "${NT_FLAGS:-}"
for kind in chat code summarise repeat; do
  base=""
  for mode in ${NT_MODES:-plain lookup self}; do
    case $mode in
      plain) flags=();;
      lookup) flags=(--lookup);;
      self) flags=(--draft-self);;
      tree) flags=(--draft-self --draft-tree);;
      skip) flags=(--draft-self --layer-skip "${NT_SKIP_FILE:?skip mode needs NT_SKIP_FILE}" --layer-skip-count "${NT_SKIP_COUNT:-4}");;
      *) echo "speculation.sh: unknown mode $mode" >&2; exit 1;;
    esac
    "$nt" run ${model:+-m "$model"} -t "$threads" --temp 0 -n "$n" -p "${prompts[$kind]}" "${extra[@]}" "${flags[@]}" \
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
