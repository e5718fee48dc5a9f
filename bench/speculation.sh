#!/usr/bin/env bash
# Speculative greedy decoding (docs/PERFORMANCE.md, "Speculative decoding"):
# for each prompt kind, plain greedy decoding, then each draft source, printing
# decode tok/s, the speedup over plain, acceptance and tokens per pass as a
# Markdown table. The texts must agree (greedy identity).
#   bench/speculation.sh [BUILD_DIR] [MODEL]
#   Env: NT_N (128 tokens), NT_THREADS (2), NT_FLAGS (added to every run, e.g.
#   "--device cuda --vram-budget 60MiB"), NT_KINDS ("chat code summarise
#   repeat"), NT_MODES ("plain lookup self"; also "tree": --draft-self
#   --draft-tree, "skip": --draft-self without the NT_SKIP_COUNT layers of the
#   calibrate-skip file NT_SKIP_FILE, "predicted": --prediction with plain's
#   own text, "predicted-ids": --prediction-ids with plain's generated ids,
#   the case of a draft that is always right (a random-weight model's text
#   does not tokenize back to its ids); MODE:N drafts N tokens a pass at
#   most).
set -euo pipefail
build=${1:-build}; model=${2:-}
nt="$build/src/ntransformer"; n=${NT_N:-128}; threads=${NT_THREADS:-2}
source "$(dirname "$0")/prompt_kinds.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { sed -nE "s|$1|\\1|p" "$2" | head -1; }
echo "| prompt | mode | decode tok/s | speedup | accepted / drafted | tokens per pass |"
echo "|---|---|---|---|---|---|"
read -ra extra <<< "${NT_FLAGS:-}"
for kind in ${NT_KINDS:-chat code summarise repeat}; do
  base=""
  for spec in ${NT_MODES:-plain lookup self}; do
    mode=${spec%%:*}
    case $mode in
      plain) flags=(--ids-out "$tmp/plain.json");;
      lookup) flags=(--lookup);;
      self) flags=(--draft-self);;
      tree) flags=(--draft-self --draft-tree);;
      skip) flags=(--draft-self --layer-skip "${NT_SKIP_FILE:?skip mode needs NT_SKIP_FILE}" --layer-skip-count "${NT_SKIP_COUNT:-4}");;
      predicted) flags=(--prediction "$tmp/predicted.txt");;
      predicted-ids) flags=(--prediction-ids "$tmp/predicted.ids");;
      *) echo "speculation.sh: unknown mode $mode" >&2; exit 1;;
    esac
    [[ $spec == *:* ]] && flags+=(--draft-max "${spec#*:}")
    "$nt" run ${model:+-m "$model"} -t "$threads" --temp 0 -n "$n" -p "${prompts[$kind]}" "${extra[@]}" "${flags[@]}" \
      > "$tmp/$mode.out" 2> "$tmp/$mode.err"
    # The generated text alone (a plain prompt is echoed first), for the predicted mode.
    [[ $mode == plain ]] && python3 -c 'import sys; t = open(sys.argv[1]).read(); p = sys.argv[2]
print(t[len(p):] if t.startswith(p) else t, end="")' "$tmp/plain.out" "${prompts[$kind]}" > "$tmp/predicted.txt"
    [[ $mode == plain ]] && python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["generated"])' \
      "$tmp/plain.json" > "$tmp/predicted.ids"
    if [[ $mode != plain ]] && ! cmp -s "$tmp/plain.out" "$tmp/$mode.out"; then
      echo "speculation.sh: $kind, $mode: the text differs from plain greedy decoding" >&2; exit 1
    fi
    tps=$(field '^decode: .*\(([0-9.]+) tok/s\).*' "$tmp/$mode.err")
    [[ -z $base ]] && base=$tps
    speedup=$(awk -v a="$tps" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
    acc=$(field '^speculation: .* ([0-9]+ of [0-9]+) drafted.*' "$tmp/$mode.err")
    per=$(field '^speculation: .* ([0-9.]+) tokens per pass' "$tmp/$mode.err")
    echo "| $kind | $spec | $tps | $speedup | ${acc:--} | ${per:-1} |"
  done
done
