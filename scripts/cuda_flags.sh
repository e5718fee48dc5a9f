#!/usr/bin/env bash
# Prints the CMake flags for the CUDA build this machine needs, one a line, and
# says on stderr why:
#   a GPU answers nvidia-smi, and nvcc is here:  CUDA for that GPU only (native)
#   nvcc but no GPU:                             CPU only: nothing here could run
#                                                the CUDA backend, and the first
#                                                command stays quick
#   nvcc but no GPU, NT_CUDA=ON (CI, or binaries CUDA for one architecture (90), so
#   for a GPU host):                             the CUDA sources still compile
#   no nvcc (with or without a GPU):             CPU only
# nvcc is looked for on PATH, then in $CUDA_HOME (default /usr/local/cuda).
# NT_CUDA=OFF in the environment asks for CPU only whatever the machine has.
set -euo pipefail

nvcc=$(command -v nvcc || true)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
[[ -z "$nvcc" && -x "$cuda_home/bin/nvcc" ]] && nvcc="$cuda_home/bin/nvcc"
gpu=""
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  gpu=${gpu:-a GPU}
fi

if [[ "${NT_CUDA:-}" == "OFF" ]]; then
  echo "setup: CPU only (NT_CUDA=OFF)" >&2
  echo "-DNT_CUDA=OFF"
elif [[ -z "$nvcc" ]]; then
  if [[ -n "$gpu" ]]; then
    echo "setup: CPU only: $gpu answers but there is no nvcc (install the CUDA toolkit for the GPU backend)" >&2
  else
    echo "setup: CPU only (no GPU, no nvcc)" >&2
  fi
  echo "-DNT_CUDA=OFF"
elif [[ -n "$gpu" ]]; then
  echo "setup: CUDA for this machine's GPU ($gpu, CMAKE_CUDA_ARCHITECTURES=native)" >&2
  printf '%s\n' -DNT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" -DCMAKE_CUDA_ARCHITECTURES=native
elif [[ "${NT_CUDA:-}" == "ON" ]]; then
  echo "setup: nvcc but no GPU: CUDA compiled for sm_90 only (NT_CUDA=ON), so that it keeps compiling (the CPU backend runs)" >&2
  printf '%s\n' -DNT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90
else
  echo "setup: nvcc but no GPU: CPU only, since nothing here could run the CUDA backend (NT_CUDA=ON compiles it for sm_90 all the same)" >&2
  echo "-DNT_CUDA=OFF"
fi
