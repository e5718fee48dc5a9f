#!/usr/bin/env bash
# Sets up a fresh Debian machine: system packages, the Python test oracles,
# the default model, and a Release build in ./build. Safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(build-essential cmake ninja-build pkg-config python3-venv clang libclang-rt-dev
          libcli11-dev libfmt-dev libgtest-dev libgmock-dev libpcre2-dev liburing-dev nlohmann-json3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Oracles for the tests: gguf (quant formats), numpy (float64 reference), transformers/tokenizers (tokenizer ids).
if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c "import gguf, numpy, pytest, transformers, tokenizers, sentencepiece, jinja2" 2>/dev/null; then
  echo "setup: creating .venv with the test oracles"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r tests/requirements.txt
fi

scripts/fetch_default_model.sh "$root/models" >/dev/null

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNT_PYTHON="$root/.venv/bin/python" >/dev/null
if ! ninja -C build -j"$(nproc)" > build/setup-build.log 2>&1; then
  grep -E -A8 "error|FAILED" build/setup-build.log | head -60 >&2 || true
  echo "setup: the build failed (full log: $root/build/setup-build.log)" >&2
  exit 1
fi
echo "setup: built $root/build/src/ntransformer"
