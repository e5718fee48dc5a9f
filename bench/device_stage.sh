#!/usr/bin/env bash
# Stages what the GPU tests need on the device machine across two calls, since
# one call carries at most 64 MiB: the first unpacks the binaries and the
# first piece of the SmolLM2 file into /tmp/nt, the second joins the rest.
#   split -b 42000000 models/SmolLM2-135M-Instruct.Q4_1.gguf .devdata/smol.   (with ~22 MB of xz binaries, 44 MB pieces pass the limit)
#   bench/device_stage.sh first|second   (carrying .devdata/bin.txz + .devdata/smol.aa, then the other pieces)
set -euo pipefail
mkdir -p /tmp/nt
case ${1:?first or second} in
first) tar xJf .devdata/bin.txz -C /tmp/nt && cp .devdata/smol.aa /tmp/nt/ ;;
second) cat /tmp/nt/smol.aa $(ls .devdata/smol.* | grep -v 'smol.aa$') > /tmp/nt/SmolLM2-135M-Instruct.Q4_1.gguf
        sha256sum /tmp/nt/SmolLM2-135M-Instruct.Q4_1.gguf ;;
esac
ls -la /tmp/nt
