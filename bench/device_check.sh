#!/usr/bin/env bash
# One device call that checks a change end to end on the GPU: the GPU test
# suite, then `serve` on a GPU-resident model answering an OpenAI request and
# a streamed one, then a run and a batch on the same model, every family on
# CUDA, and with NT_CHECK_8B=1 (default) or NT_CHECK_Q4_0=1 Llama 8B benches. Binaries come
# packed by bench/pack_device.sh (with the shared libraries it carries).
#   bench/device_check.sh        (carry .devdata; logs under $OUT)
set -uo pipefail
final=${OUT:-out}
mkdir -p /tmp/nt "$final"
tar xJf .devdata/bin.txz -C /tmp/nt
cublas=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
[[ -n "$cublas" ]] && export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nt=/tmp/nt/src/ntransformer
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
$nt --version
/tmp/nt/tests/nt_gpu_tests --gtest_brief=1 > "$final/gpu_tests.log" 2>&1
echo "nt_gpu_tests exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$final/gpu_tests.log" | head -20
model=/tmp/nt/smol-shape.gguf
$nt make-model --preset smollm2-135m --type q4_1 --out $model 2>&1 | tail -1
$nt run -m $model --device cuda -p "Hello" -n 16 --temp 0 --raw > "$final/run.txt" 2> "$final/run.err"; echo "run exit $?"; tail -3 "$final/run.err"
$nt serve -m $model --device cuda --port 8089 -np 4 2> "$final/serve.err" &
server=$!
for _ in $(seq 1 300); do curl -sf localhost:8089/health > /dev/null && break; sleep 0.2; done
curl -s localhost:8089/v1/completions -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 16, "temperature": 0}' > "$final/completion.json"
echo "completion: $(head -c 400 "$final/completion.json")"
curl -sN localhost:8089/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": true}' | tail -3
curl -s localhost:8089/metrics | grep -E "batch_sequences_max|completion_tokens_total"
kill -TERM $server; wait $server; echo "serve exit $?"
tail -3 "$final/serve.err"
# The server's greedy completion is run's text for the same raw prompt.
python3 - "$final" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
served = json.loads((out / "completion.json").read_text())["choices"][0]["text"]
ran = (out / "run.txt").read_text()[len("Hello"):]
print("serve == run:", served == ran, repr(served[:60]), repr(ran[:60]))
PY
# Every family runs on CUDA (the GPU tests compare logits with the CPU's):
# a greedy run of each on both backends, whose texts agree unless a near
# tie falls the other way.
for preset in tiny-qwen3 tiny-gemma3 tiny-qwen3moe tiny-gpt-oss; do
  $nt make-model --preset $preset --type q8_0 --out /tmp/nt/$preset.gguf 2>&1 | tail -1
  gpu=$($nt run -m /tmp/nt/$preset.gguf --device cuda -p "Hello" -n 16 --temp 0 --raw 2> /tmp/nt/$preset.err)
  cpu=$($nt run -m /tmp/nt/$preset.gguf --device cpu -p "Hello" -n 16 --temp 0 --raw 2> /dev/null)
  echo "$preset: same text as the cpu: $([[ "$gpu" == "$cpu" ]] && echo yes || echo no); $(grep -m1 "^model:" /tmp/nt/$preset.err)"
done
# A Q4_0 8B at decode batches of 1 and 3 (docs/PERFORMANCE.md's H100 figure at B = 3: 1,043 tok/s).
if [[ "${NT_CHECK_Q4_0:-0}" == 1 ]]; then
  $nt make-model --preset llama3-8b --type q4_0 --out /tmp/nt/8b-q4_0.gguf 2>&1 | tail -1
  $nt bench -m /tmp/nt/8b-q4_0.gguf --device cuda -npp 128 -ntg 64 -npl 1,3 2>&1 | tail -4
fi
# Llama decode and prefill, and with a second build packed as
# .devdata/before.txz the same bench of that build, alternately, in this call.
if [[ "${NT_CHECK_8B:-1}" == 1 ]]; then
  $nt make-model --preset llama3-8b --type q4_k_m --out /tmp/nt/8b.gguf 2>&1 | tail -1
  builds=(/tmp/nt)
  if [[ -f .devdata/before.txz ]]; then
    mkdir -p /tmp/nt-before && tar xJf .devdata/before.txz -C /tmp/nt-before && builds=(/tmp/nt-before /tmp/nt /tmp/nt-before /tmp/nt)
  fi
  for b in "${builds[@]}"; do
    echo "bench: $b"; "$b/src/ntransformer" bench -m /tmp/nt/8b.gguf -p 512 -n 128 2>&1 | grep -E "pp512|tg128"
  done
fi
