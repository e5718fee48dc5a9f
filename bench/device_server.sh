#!/usr/bin/env bash
# The server under concurrent streaming clients on the GPU (docs/PERFORMANCE.md,
# "Serving"), ours and the reference engine's llama-server on the same file in
# one device call: the 70B Q4_K_M from make-model at a 24 GiB VRAM budget (the
# reference: -ngl 40, the same split), 128-token prompts and 128-token replies
# at N = 1, 8 and 32 clients (bench/server_load.py; the reference at N = 1,
# and both at N = 32 with 32-token replies), ours' ceiling for the same
# work (`bench -npp 128 -ntg 128 -npl 32`), and the prefix cache: 16 clients
# share a 2,000-token system prompt, two waves.
#   bench/device_server.sh BUILD_DIR REF_DIR   (REF_DIR/bin/llama-server: bench/reference_cuda.sh's ref-server.txz)
# NT_SERVER_STAGES picks stages (default "make ceiling ours prefix reference").
set -uo pipefail
build=${1:?build dir}; ref=${2:?reference dir with bin/llama-server}
out=${OUT:-out}; work=${NT_BENCH_DIR:-/tmp/nt-bench}
stages=" ${NT_SERVER_STAGES:-make ceiling ours prefix reference} "
mkdir -p "$out" "$work"
here=$(cd "$(dirname "$0")" && pwd)
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia \
  -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nccl=$(find /opt/*/.venv/lib/python3*/site-packages/nvidia /usr/local/cuda* -name 'libnccl.so.2' 2>/dev/null | head -1)
[[ -n "$nccl" ]] && export LD_LIBRARY_PATH="$(dirname "$nccl"):$LD_LIBRARY_PATH"
nt="$build/src/ntransformer"
model="$work/llama3-70b-q4_k_m.gguf"
# Ours: a context per sequence that holds the prefix case's 2,144 tokens, and
# a pool for 32 sequences of 256 (what the N = 32 run holds at once; the
# prefix case's share its 2,000). The reference's -c is the whole pool, split
# over its slots.
budget=24GiB slots=32 ctx=2304 pool=8448 ref_ctx=9216
log() { echo "== $* ($SECONDS s)"; }
fetch() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }

if [[ $stages == *" make "* && ! -s $model ]]; then
  log "make-model llama3-70b q4_k_m"
  "$nt" make-model --preset llama3-70b --type q4_k_m --out "$model" > "$out/make-model.log" 2>&1 || { echo "make-model failed"; exit 1; }
fi
if [[ $stages == *" ceiling "* ]]; then
  log "ceiling: bench -npp 128 -ntg 128 -npl 32"
  "$nt" bench -m "$model" --device cuda --vram-budget $budget -npp 128 -ntg 128 -npl 32 -r 1 2>&1 | tee "$out/ceiling.txt"
fi

# Starts a server on $port, waits until /health answers 200; its pid in $server_pid.
start_server() {
  local port=$1 name=$2; shift 2
  "$@" > "$out/$name.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    fetch "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
    kill -0 $server_pid 2>/dev/null || { echo "$name exited"; tail -20 "$out/$name.log"; return 1; }
    sleep 1
  done
  echo "$name never became ready"; return 1
}
stop_server() { kill -INT "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }
load() { python3 "$here/server_load.py" "$@" 2>&1 | tee -a "$out/load.jsonl"; }

if [[ $stages == *" ours "* || $stages == *" prefix "* ]]; then
  log "ours: serve"
  if start_server 8080 serve "$nt" serve -m "$model" --vram-budget $budget -c $ctx --kv-pool $pool -np $slots --port 8080; then
    if [[ $stages == *" ours "* ]]; then
      load --url http://127.0.0.1:8080 --clients 1,8,32 --label "ours "
      load --url http://127.0.0.1:8080 --clients 32 --max-tokens 32 --label "ours short "
    fi
    if [[ $stages == *" prefix "* ]]; then
      log "ours: prefix cache"
      load --url http://127.0.0.1:8080 --clients 16 --shared-prefix 2000 --max-tokens 16 --waves 2 --label "ours prefix "
    fi
    fetch http://127.0.0.1:8080/metrics > "$out/metrics.txt"
    stop_server
  fi
fi
if [[ $stages == *" reference "* ]]; then
  log "reference: llama-server -ngl 40"
  export LD_LIBRARY_PATH="$ref/bin:$LD_LIBRARY_PATH"
  if start_server 8081 llama-server "$ref/bin/llama-server" -m "$model" -ngl 40 -t 16 -c $ref_ctx -np $slots -fa on \
      --port 8081 --host 127.0.0.1; then
    # Its CPU half makes 32 replies of 128 tokens outlast a call: at N = 32 it
    # gets 32-token replies, against ours' "short" run of the same.
    load --url http://127.0.0.1:8081 --clients 1 --label "reference " --timeout 300
    load --url http://127.0.0.1:8081 --clients 32 --max-tokens 32 --label "reference short " --timeout 300
    stop_server
  fi
fi
log done
