#!/usr/bin/env bash
# How many of the GPU tests' 8 SmolLM2 prompts (tests/gpu/smollm2_prompts.h)
# `batch -np 8` decodes as `run` does: 64 greedy tokens each, against
# `batch --batch-invariant`, whose every line is run's token for token.
# Extra `batch` flags for both runs in NT_BATCH_FLAGS; the environment passes
# through (NT_CUDA_STEPWISE_STEPS=0: a larger model's batched kernels).
#   bench/batch_agreement.sh [NTRANSFORMER] [MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/src/ntransformer}
model=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - tests/gpu/smollm2_prompts.h "$dir/in.jsonl" <<'PY'
import json, re, sys
prompts = re.findall(r'"([^"]*)"', open(sys.argv[1]).read().split('for (const char* text : {', 1)[1].split('})', 1)[0])
with open(sys.argv[2], 'w') as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"id": i, "prompt": p, "max_tokens": 64, "temperature": 0}) + "\n")
PY
# shellcheck disable=SC2086  # NT_BATCH_FLAGS is a list of flags
"$bin" batch -m "$model" -np 8 ${NT_BATCH_FLAGS:-} -i "$dir/in.jsonl" -o "$dir/batch.jsonl"
# shellcheck disable=SC2086
"$bin" batch -m "$model" -np 8 ${NT_BATCH_FLAGS:-} --batch-invariant -i "$dir/in.jsonl" -o "$dir/alone.jsonl"
python3 - "$dir/batch.jsonl" "$dir/alone.jsonl" <<'PY'
import json, sys
batch, alone = ([json.loads(line) for line in open(path)] for path in sys.argv[1:3])
same = 0
for b, a in zip(batch, alone):
    if b.get("text") == a.get("text"):
        same += 1
        continue
    n = next((i for i, (x, y) in enumerate(zip(b["text"], a["text"])) if x != y), min(len(b["text"]), len(a["text"])))
    print(f"line {b['id']}: parts at character {n}: {b['text'][n:n + 24]!r} where alone {a['text'][n:n + 24]!r}")
print(f"{same} of {len(alone)} lines as alone")
PY
