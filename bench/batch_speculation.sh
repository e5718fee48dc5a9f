#!/usr/bin/env bash
# `batch` with and without --lookup on the CPU (docs/PERFORMANCE.md, "Speculation
# in batch"): the four prompt kinds of bench/prompt_kinds.sh as chat lines,
# each twice, greedy, through -np sequences; prints the wall time, the
# generated tok/s and tokens per sequence per pass of each mode as a Markdown
# table. The texts must agree (greedy identity).
#   bench/batch_speculation.sh [BUILD_DIR] [MODEL]   Env: NT_N (96 tokens), NT_NP (4), NT_THREADS (2).
set -euo pipefail
build=${1:-build}; model=${2:-}
nt="$build/src/ntransformer"; n=${NT_N:-96}; np=${NT_NP:-4}; threads=${NT_THREADS:-2}
source "$(dirname "$0")/prompt_kinds.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for copy in 1 2; do
  for kind in chat code summarise repeat; do
    python3 -c 'import json, sys; print(json.dumps({"id": sys.argv[1], "messages": [{"role": "user", "content": sys.argv[2]}],
                "max_tokens": int(sys.argv[3]), "temperature": 0}))' "$kind-$copy" "${prompts[$kind]}" "$n"
  done
done > "$tmp/in.jsonl"
echo "| mode | wall s | generated tok/s | accepted / drafted | tokens per sequence per pass | load average |"
echo "|---|---|---|---|---|---|"
for mode in plain lookup; do
  flags=(); [[ $mode == lookup ]] && flags=(--lookup)
  start=$(date +%s.%N)
  "$nt" batch ${model:+-m "$model"} --device cpu -t "$threads" -np "$np" -i "$tmp/in.jsonl" "${flags[@]}" \
    > "$tmp/$mode.out" 2> "$tmp/$mode.err"
  wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  python3 -c 'import json, sys; print("\n".join(json.loads(l)["text"] for l in open(sys.argv[1])))' "$tmp/$mode.out" \
    > "$tmp/$mode.text"
  if [[ $mode != plain ]] && ! cmp -s "$tmp/plain.text" "$tmp/$mode.text"; then
    echo "batch_speculation.sh: $mode: a text differs from plain batch decoding" >&2; exit 1
  fi
  last=$(tr '\r' '\n' < "$tmp/$mode.err" | grep 'tokens generated' | tail -1)
  tps=$(sed -nE 's|.*tokens generated \(([0-9.]+) tok/s\).*|\1|p' <<< "$last")
  per=$(sed -nE 's|.*, ([0-9.]+) tokens per sequence per pass.*|\1|p' <<< "$last")
  acc=$(python3 -c 'import json, sys
o = [json.loads(l) for l in open(sys.argv[1])]
print("%d of %d" % (sum(x["accepted"] for x in o), sum(x["drafted"] for x in o)) if "drafted" in o[0] else "-")' \
    "$tmp/$mode.out")
  echo "| $mode | $wall | $tps | $acc | ${per:-1} | $(cut -d' ' -f1-3 /proc/loadavg) |"
done
