#!/usr/bin/env python3
"""Concurrent streaming clients against an OpenAI-compatible /v1/completions
(ntransformer serve or the reference engine's llama-server), standard library
only so that it runs on the GPU machine as it is.

Each client sends one prompt of --prompt-tokens random token ids (its own, so
that no two share a prefix unless --shared-prefix asks), streams
--max-tokens tokens past any end-of-text (ignore_eos), and records when each
token arrived. Printed per run: aggregate tok/s (all tokens out over the
wall time from the first request to the last token), time to first token
(p50, p99) and the inter-token gap (p50).

  server_load.py --url http://127.0.0.1:8080 --clients 1,8,32
  server_load.py --url ... --clients 16 --shared-prefix 2000 --waves 2   # prefix cache: wave 2 reuses wave 1's prefix
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stream_one(url, body, timeout_s):
    """Sends one streaming request; returns (start, token arrival times, usage tokens or None)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    arrivals, usage_tokens = [], None
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        now = time.perf_counter()
        for choice in chunk.get("choices") or []:
            if choice.get("text"):
                arrivals.append(now)
        if chunk.get("usage"):
            usage_tokens = chunk["usage"].get("completion_tokens")
    conn.close()
    return start, arrivals, usage_tokens


def run_wave(args, n_clients, prompts):
    results = [None] * n_clients
    errors = []

    def client(i):
        body = {"prompt": prompts[i], "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        try:
            results[i] = stream_one(args.url, body, args.timeout)
        except Exception as error:  # reported below; the other clients go on
            errors.append(f"client {i}: {error}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
    done = [r for r in results if r is not None]
    if not done:
        raise SystemExit("server_load: every request failed")
    first_start = min(r[0] for r in done)
    last_token = max(r[1][-1] for r in done if r[1])
    tokens = sum(max(len(r[1]), r[2] or 0) for r in done)
    ttft = [r[1][0] - r[0] for r in done if r[1]]
    gaps = [b - a for r in done for a, b in zip(r[1], r[1][1:])]
    return {"clients": n_clients, "failed": len(errors), "tokens": tokens, "wall_s": last_token - first_start,
            "tok_s": tokens / (last_token - first_start), "ttft_p50_ms": 1e3 * percentile(ttft, 0.5),
            "ttft_p99_ms": 1e3 * percentile(ttft, 0.99), "itl_p50_ms": 1e3 * percentile(gaps, 0.5)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts, one run each")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--shared-prefix", type=int, default=0, help="tokens every prompt starts with")
    parser.add_argument("--waves", type=int, default=1, help="runs of the same clients, one after the other")
    parser.add_argument("--token-range", default="1000,30000", help="prompt token ids are drawn from [lo, hi)")
    parser.add_argument("--label", default="", help="printed in front of each result line")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.token_range.split(","))
    rng = random.Random(1234)
    prefix = [rng.randrange(lo, hi) for _ in range(args.shared_prefix)]
    for n_clients in (int(x) for x in args.clients.split(",")):
        for wave in range(args.waves):
            prompts = [prefix + [rng.randrange(lo, hi) for _ in range(args.prompt_tokens)] for _ in range(n_clients)]
            result = run_wave(args, n_clients, prompts)
            result["wave"] = wave + 1
            result["prompt_tokens"] = len(prompts[0])
            print(f"{args.label}{json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
