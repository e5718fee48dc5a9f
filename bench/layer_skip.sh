#!/usr/bin/env bash
# Layer skip on the CPU (docs/PERFORMANCE.md, "Layer skip"):
# calibrates on bench/texts/calibration.txt, then for each skip count the
# perplexity of the held-out bench/texts/heldout.txt and bench's prefill and
# decode tok/s; then self-speculation's tokens per pass drafting with the
# first N layers against drafting without the N-of-30 complement the
# calibration skips, for a few prompt kinds. Markdown tables on stdout.
#   bench/layer_skip.sh [BUILD_DIR] [MODEL]
#   Env: NT_SKIPS ("0 1 2 3 4 6 8"), NT_DRAFT_SKIPS ("4 8"), NT_N (128 tokens), NT_THREADS (2).
set -euo pipefail
build=${1:-build}; model=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
nt="$build/src/ntransformer"; threads=${NT_THREADS:-2}; n=${NT_N:-128}
texts=$(dirname "$0")/texts
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
skip="$tmp/skip.json"
field() { sed -nE "s|$1|\\1|p" "$2" | head -1; }
# The tok/s cell of bench's row for test $1.
tok_s() { awk -F' [|] ' -v test="$1" '$3 == test { print $4; exit }' "$2"; }

"$nt" calibrate-skip -m "$model" -t "$threads" -f "$texts/calibration.txt" -o "$skip" -c 512 > "$tmp/ranks.md" 2> /dev/null
echo "Calibration (cosine similarity of each layer's input and output, most skippable first):"
echo; cat "$tmp/ranks.md"; echo
layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model']['layers'])" "$skip")

echo "| skipped | layers left out | held-out PPL | PPL change | pp128 tok/s | tg64 tok/s | tg64 speedup |"
echo "|---|---|---|---|---|---|---|"
base_ppl=""; base_tg=""
for k in ${NT_SKIPS:-0 1 2 3 4 6 8}; do
  flags=(--layer-skip "$skip" --layer-skip-count "$k")
  "$nt" perplexity -m "$model" -t "$threads" -f "$texts/heldout.txt" -c 512 "${flags[@]}" > "$tmp/ppl.out" 2> "$tmp/ppl.err"
  "$nt" bench -m "$model" -t "$threads" -r 3 "${flags[@]}" > "$tmp/bench.out" 2> /dev/null
  ppl=$(field '^PPL = ([0-9.]+ \+/- [0-9.]+).*' "$tmp/ppl.out"); p=${ppl%% *}
  left=$(field '.*leaves out [0-9]+ of [0-9]+ layers: (.*)$' "$tmp/ppl.err")
  pp=$(tok_s pp128 "$tmp/bench.out")
  tg=$(tok_s "tg64 @ 0" "$tmp/bench.out"); t=${tg%% *}
  [[ -z $base_ppl ]] && base_ppl=$p && base_tg=$t
  change=$(awk -v a="$p" -v b="$base_ppl" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')
  speedup=$(awk -v a="$t" -v b="$base_tg" 'BEGIN { printf "%.2f", a / b }')
  echo "| $k of $layers | $left | $ppl | $change | $pp | $tg | $speedup |"
done

source "$(dirname "$0")/prompt_kinds.sh"
echo
echo "| prompt | draft | draft layers | accepted / drafted | tokens per pass | decode tok/s |"
echo "|---|---|---|---|---|---|"
for kind in chat code summarise; do
  "$nt" run -m "$model" -t "$threads" --temp 0 -n "$n" -p "${prompts[$kind]}" > "$tmp/plain.out" 2> "$tmp/plain.err"
  echo "| $kind | none (plain) | - | - | 1 | $(field '^decode: .*\(([0-9.]+) tok/s\).*' "$tmp/plain.err") |"
  for k in ${NT_DRAFT_SKIPS:-4 8}; do
    keep=$((layers - k))
    for mode in first calibrated; do
      if [[ $mode == first ]]; then flags=(--draft-self "$keep"); what="first $keep"
      else flags=(--draft-self --layer-skip "$skip" --layer-skip-count "$k"); what="all but the $k calibrated"; fi
      "$nt" run -m "$model" -t "$threads" --temp 0 -n "$n" -p "${prompts[$kind]}" "${flags[@]}" \
        > "$tmp/spec.out" 2> "$tmp/spec.err"
      if ! cmp -s "$tmp/plain.out" "$tmp/spec.out"; then
        echo "layer_skip.sh: $kind, $what: the text differs from plain greedy decoding" >&2; exit 1
      fi
      acc=$(field '^speculation: .* ([0-9]+ of [0-9]+) drafted.*' "$tmp/spec.err")
      per=$(field '^speculation: .* ([0-9.]+) tokens per pass' "$tmp/spec.err")
      tps=$(field '^decode: .*\(([0-9.]+) tok/s\).*' "$tmp/spec.err")
      echo "| $kind | $what | $keep of $layers | $acc | $per | $tps |"
    done
  done
done
