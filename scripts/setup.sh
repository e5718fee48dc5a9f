#!/usr/bin/env bash
# Sets up a fresh Debian machine: system packages, the Python test oracles,
# the default model, and a Release build in ./build of the ntransformer binary for what this machine has
# (scripts/cuda_flags.sh: CUDA for its GPU, or CPU only). Safe to run again:
# a build dir configured otherwise (another CUDA setting, generator or
# toolkit) is reconfigured, and started afresh if that fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
step() { echo "setup: $* ($SECONDS s)"; }

packages=(build-essential cmake ninja-build pkg-config python3-venv clang libclang-rt-dev
          libcli11-dev libfmt-dev libgtest-dev libgmock-dev libpcre2-dev liburing-dev nlohmann-json3-dev
          libcpp-httplib-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Oracles for the tests: gguf (quant formats), numpy (float64 reference), transformers/tokenizers (tokenizer ids).
if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c "import gguf, numpy, pytest, transformers, tokenizers, sentencepiece, jinja2, openai, anthropic, websocket" 2>/dev/null; then
  step "creating .venv with the test oracles (tests/requirements.txt)"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # One short line per package, so that the download is seen to progress.
  .venv/bin/pip install --progress-bar off -r tests/requirements.txt |
    awk '/^Collecting/ { print "setup:   " $2; fflush() }
         /^Successfully installed/ { print "setup:   installed " NF - 2 " packages" }'
fi

step "fetching the default model (98 MB, checksummed)"
scripts/fetch_default_model.sh "$root/models" >/dev/null

mapfile -t cuda_flags < <(scripts/cuda_flags.sh)
configure() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNT_PYTHON="$root/.venv/bin/python" "${cuda_flags[@]}" \
    > build/setup-configure.log 2>&1
}
mkdir -p build
step "configuring build/ (${cuda_flags[*]})"
if ! configure; then
  if [[ -f build/CMakeCache.txt ]]; then
    # A cache from another generator or a toolkit that moved: configure afresh.
    echo "setup: build/ did not reconfigure (build/setup-configure.log); configuring it afresh" >&2
    rm -rf build/CMakeCache.txt build/CMakeFiles
  fi
  if ! configure; then
    tail -30 build/setup-configure.log >&2
    echo "setup: configuring failed (full log: $root/build/setup-configure.log)" >&2
    exit 1
  fi
fi

# ninja's progress lines on the terminal; everything (warnings, errors) in the log.
# Only the binary: the tests, test tools and CUDA benches build with the test command.
step "building ntransformer (progress below; full log: build/setup-build.log)"
set +e
ninja -C build -j"$(nproc)" ntransformer 2>&1 | tee build/setup-build.log | { grep --line-buffered -E '^\[[0-9]+/[0-9]+\]' || true; }
status=${PIPESTATUS[0]}
set -e
if ((status != 0)); then
  grep -E -A8 "error|FAILED" build/setup-build.log | head -60 >&2 || true
  echo "setup: the build failed (full log: $root/build/setup-build.log)" >&2
  exit 1
fi
step "built $root/build/src/ntransformer"
