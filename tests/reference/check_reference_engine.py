#!/usr/bin/env python3
"""Checks the float64 reference forward pass (llama_ref.py) against the
reference engine, llama.cpp built for the CPU, on tiny random-weight models of
each architecture it knows: llama, qwen2, qwen3 and gemma3.

    .venv/bin/python tests/reference/check_reference_engine.py BIN_DIR [--work DIR] [--family NAME ...] [--seed N]

BIN_DIR holds llama-completion and llama-perplexity of llama.cpp 0c1e570 (the
copy in the PyPI source package llama-cpp-python==0.3.36), built for the CPU:

    cmake -S llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_NATIVE=ON \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DBUILD_SHARED_LIBS=OFF
    cmake --build build --target llama-completion llama-perplexity    # BIN_DIR = build/bin

For each family the script writes an F32 GGUF model (build_model below: the
metadata keys and tensor names the reference engine reads) with a vocabulary of
single CJK characters, so that a text is its characters' ids after BOS both
ways, then:

  greedy      llama-completion -m MODEL -p PROMPT -n 24 --temp 0 --top-k 1 -s 1
                  -no-cnv -sp --no-display-prompt --verbose-prompt --no-warmup
                  -fa off -ctk f32 -ctv f32 -c 128 -b 128 -t 2
              prints the continuation; its characters (and <s> </s> through -sp)
              map back to ids, which must equal the reference's greedy ids up
              to the first step whose top-two logit margin in the reference is
              below --tie (float32 may break a near tie either way); the prompt
              ids the engine prints (--verbose-prompt) must be BOS + the
              characters' ids.
  perplexity  llama-perplexity -m MODEL -f TEXT -c 32 -b 32 -fa off -ctk f32 -ctv f32 -t 2
              must print a final PPL within 0.1% of the reference's, computed
              the same way: the token list cut into windows of -c tokens, each
              starting with BOS in place of its first token, the second half
              of each scored.

The perplexity text is sampled from the model itself (a random text's
perplexity would be astronomical). The windows and continuations run past
gemma3's sliding window (8), and its global layer scales RoPE linearly, so
both are exercised. The reference engine's CPU backend evaluates GELU through a
float16 table, which the reference models here (Arithmetic(gelu_f16=True)):
without it gemma3's perplexities differ by up to ~5e-4 (more than a GELU of
the wrong form, erf, moves them: ~2e-4), with it by ~2e-5..7e-5 (inputs that
round to a different float16 in float32 than in float64). The other families
agree to ~1e-7..1e-6.
"""

import argparse
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_ref  # noqa: E402

BOS, EOS, UNK = 1, 2, 0
# Every other token is one CJK character, so tokenizing is one id per character.
FIRST_CHAR = 0x4E00
VOCAB = 256
N_CTX = 32          # perplexity window
N_WINDOWS = 4
N_GREEDY = 24
PPL_REL = 1e-3
THREADS = "2"


def vocab_pieces():
    return ["<unk>", "<s>", "</s>"] + [chr(FIRST_CHAR + i) for i in range(VOCAB - 3)]


def text_ids(text):
    return [3 + ord(ch) - FIRST_CHAR for ch in text]


# Per family: shapes and the hyperparameters that distinguish it. Each is
# small but keeps the family's traits: qwen2's biases, qwen3's head_dim that
# differs from dim / n_heads, gemma3's sliding window shorter than the texts,
# a global layer (the 6th) among local ones, its own RoPE bases and linear
# scaling on the global layer.
FAMILIES = {
    "llama": dict(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn=128, eps=1e-5,
                  rope_base=10000.0, tied=False),
    "qwen2": dict(n_layers=3, dim=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn=128, eps=1e-6,
                  rope_base=1000000.0, tied=True, branch_gain=8.0, qkv_bias=True),
    "qwen3": dict(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=32, ffn=128, eps=1e-6,
                  rope_base=1000000.0, tied=False, branch_gain=4.0, qk_norm=True),
    "gemma3": dict(n_layers=7, dim=64, n_heads=4, n_kv_heads=1, head_dim=32, ffn=128, eps=1e-6,
                   rope_base=1000000.0, tied=True, branch_gain=8.0, qk_norm=True, post_norms=True,
                   sliding_window=8, rope_base_swa=10000.0, rope_linear=8.0),
}


def build_model(arch, path, seed=0):
    """Writes a random F32 model of `arch`. Weights are scaled so that the
    attention is peaked enough for positions to matter and the logits have
    clear margins (std ~ sqrt(dim) through a unit-variance head)."""
    f = FAMILIES[arch]
    rng = np.random.default_rng(seed)
    dim, hd, ffn = f["dim"], f["head_dim"], f["ffn"]
    q_dim, kv_dim = f["n_heads"] * hd, f["n_kv_heads"] * hd

    def mat(out, inp, gain=1.0):  # numpy (out, in): GGUF lists it as [in, out]
        return (rng.standard_normal((out, inp)) * gain / math.sqrt(inp)).astype(np.float32)

    def norm(n, gain=1.0):
        return (gain * (1.0 + 0.2 * rng.standard_normal(n))).astype(np.float32)

    # With tied embeddings a residual stream dominated by the input token's
    # embedding would predict that token again and again; strong branches
    # keep the continuations varied (gemma3's embeddings are also scaled by
    # sqrt(dim), so its post-norms carry that gain).
    branch = f.get("branch_gain", 1.0)
    post = branch * math.sqrt(dim)

    w = GGUFWriter(str(path), arch)   # writes general.architecture = arch
    p = arch + "."
    w.add_uint32(p + "context_length", 4096)
    w.add_uint32(p + "embedding_length", dim)
    w.add_uint32(p + "block_count", f["n_layers"])
    w.add_uint32(p + "feed_forward_length", ffn)
    w.add_uint32(p + "attention.head_count", f["n_heads"])
    w.add_uint32(p + "attention.head_count_kv", f["n_kv_heads"])
    w.add_uint32(p + "attention.key_length", hd)
    w.add_uint32(p + "attention.value_length", hd)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", f["eps"])
    w.add_float32(p + "rope.freq_base", f["rope_base"])
    if "sliding_window" in f:
        w.add_uint32(p + "attention.sliding_window", f["sliding_window"])
        w.add_float32(p + "rope.freq_base_swa", f["rope_base_swa"])
    if "rope_linear" in f:
        w.add_string(p + "rope.scaling.type", "linear")
        w.add_float32(p + "rope.scaling.factor", f["rope_linear"])

    # A SentencePiece-style ("llama") vocabulary: no merges possible, no space prefix.
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", vocab_pieces())
    w.add_array("tokenizer.ggml.scores", [0.0] * VOCAB)
    w.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (VOCAB - 3))  # unknown, control, normal
    w.add_uint32("tokenizer.ggml.bos_token_id", BOS)
    w.add_uint32("tokenizer.ggml.eos_token_id", EOS)
    w.add_uint32("tokenizer.ggml.unknown_token_id", UNK)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_space_prefix", False)

    w.add_tensor("token_embd.weight", rng.standard_normal((VOCAB, dim)).astype(np.float32))
    for i in range(f["n_layers"]):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(dim))
        w.add_tensor(b + "attn_q.weight", mat(q_dim, dim, 2.0))
        w.add_tensor(b + "attn_k.weight", mat(kv_dim, dim, 2.0))
        w.add_tensor(b + "attn_v.weight", mat(kv_dim, dim))
        if f.get("qkv_bias"):
            w.add_tensor(b + "attn_q.bias", (0.5 * rng.standard_normal(q_dim)).astype(np.float32))
            w.add_tensor(b + "attn_k.bias", (0.5 * rng.standard_normal(kv_dim)).astype(np.float32))
            w.add_tensor(b + "attn_v.bias", (0.5 * rng.standard_normal(kv_dim)).astype(np.float32))
        if f.get("qk_norm"):
            w.add_tensor(b + "attn_q_norm.weight", norm(hd))
            w.add_tensor(b + "attn_k_norm.weight", norm(hd))
        w.add_tensor(b + "attn_output.weight", mat(dim, q_dim, branch))
        if f.get("post_norms"):
            w.add_tensor(b + "post_attention_norm.weight", norm(dim, post))
        w.add_tensor(b + "ffn_norm.weight", norm(dim))
        w.add_tensor(b + "ffn_gate.weight", mat(ffn, dim))
        w.add_tensor(b + "ffn_up.weight", mat(ffn, dim))
        w.add_tensor(b + "ffn_down.weight", mat(dim, ffn, branch))
        if f.get("post_norms"):
            w.add_tensor(b + "post_ffw_norm.weight", norm(dim, post))
    w.add_tensor("output_norm.weight", norm(dim))
    if not f["tied"]:
        w.add_tensor("output.weight", rng.standard_normal((VOCAB, dim)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(cmd, complete):
    """Runs a tool until complete(result) holds: its log is written by a
    background thread that may lose the last lines at exit, so a run whose
    output stops short is repeated (a few times at most)."""
    for _ in range(5):
        result = subprocess.run(["nice", "-n", "15"] + [str(c) for c in cmd], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        if complete(result):
            return result
    sys.exit(f"{' '.join(map(str, cmd))}: output incomplete in 5 runs:\n"
             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


# ----------------------------------------------------------------------------
# The reference's side


def reference_greedy(model, prompt, n):
    """Greedy ids after `prompt`, stopping after EOS as the engine does, and the
    top-two logit margin of each step."""
    cache = llama_ref.KVCache(model.config.n_layers)
    last = llama_ref.forward(model, prompt, 0, cache)[-1]
    ids, margins = [], []
    for _ in range(n):
        top2 = np.sort(last)[-2:]
        ids.append(int(np.argmax(last)))
        margins.append(float(top2[1] - top2[0]))
        if ids[-1] == EOS:
            break
        last = llama_ref.forward(model, [ids[-1]], len(prompt) + len(ids) - 1, cache)[-1]
    return ids, margins


def sample_text(model, n, rng):
    """n characters sampled from the model at temperature 1, so that the
    perplexity is moderate (a random text's would be astronomical); only
    character tokens are drawn, as the text has no others."""
    cache = llama_ref.KVCache(model.config.n_layers)
    last = llama_ref.forward(model, [BOS], 0, cache)[-1]
    ids = []
    for pos in range(1, n + 1):
        p = llama_ref.softmax(last[3:])
        ids.append(3 + int(rng.choice(len(p), p=p)))
        last = llama_ref.forward(model, [ids[-1]], pos, cache)[-1]
    return "".join(chr(FIRST_CHAR + i - 3) for i in ids)


def reference_perplexity(model, tokens, n_ctx):
    """llama-perplexity's method: windows of n_ctx tokens with BOS first, the second half scored."""
    nll = []
    for w in range(len(tokens) // n_ctx):
        window = [BOS] + tokens[w * n_ctx + 1:(w + 1) * n_ctx]
        logits = llama_ref.forward(model, window, 0, llama_ref.KVCache(model.config.n_layers))
        for i in range(n_ctx // 2, n_ctx - 1):
            row = logits[i]
            top = row.max()
            nll.append(math.log(np.exp(row - top).sum()) + top - row[window[i + 1]])
    return math.exp(sum(nll) / len(nll))


# ----------------------------------------------------------------------------
# The engine's side


def engine_greedy(bin_dir, model_path, prompt_text, n):
    """The engine's prompt ids (from --verbose-prompt's "  id -> 'piece'" lines)
    and its greedy continuation, mapped back from the printed pieces."""
    pieces = {piece: i for i, piece in enumerate(vocab_pieces())}

    def parse(result):
        text = result.stdout.replace("[end of text]", "").strip()
        ids = []
        while text:
            piece = next((s for s in ("<s>", "</s>") if text.startswith(s)), text[0])
            if piece not in pieces:
                sys.exit(f"llama-completion printed {piece!r}, which is no token: {result.stdout!r}")
            ids.append(pieces[piece])
            text = text[len(piece):]
        return ids

    def complete(result):
        ids = parse(result)
        return len(ids) == n or (ids and ids[-1] == EOS)

    result = run([bin_dir / "llama-completion", "-m", model_path, "-p", prompt_text, "-n", n,
                  "--temp", "0", "--top-k", "1", "-s", "1", "-no-cnv", "-sp", "--no-display-prompt",
                  "--verbose-prompt", "--no-warmup", "-fa", "off", "-ctk", "f32", "-ctv", "f32",
                  "-c", "128", "-b", "128", "-t", THREADS], complete)
    prompt_ids = [int(m) for m in re.findall(r"^\S+ I\s+(\d+) -> '", result.stderr, re.M)]
    return prompt_ids, parse(result)


def engine_perplexity(bin_dir, model_path, text_path):
    """The final estimate, or (when the log lost that line) the running
    estimate after the last window, which is the same number."""
    def estimate(result):
        out = result.stdout + result.stderr
        m = re.search(r"Final estimate: PPL = ([\d.]+)", out) or re.search(rf"\[{N_WINDOWS}\]([\d.]+),", out)
        return m and float(m[1])

    return estimate(run([bin_dir / "llama-perplexity", "-m", model_path, "-f", text_path, "-c", N_CTX,
                         "-b", N_CTX, "-fa", "off", "-ctk", "f32", "-ctv", "f32", "-t", THREADS], estimate))


# ----------------------------------------------------------------------------


def check(arch, bin_dir, work, tie, seed=0):
    path = work / f"{arch}.gguf"
    build_model(arch, path, seed)
    model = llama_ref.Model(str(path), llama_ref.Arithmetic(gelu_f16=True))
    rng = np.random.default_rng(seed + 1)
    chars = lambda n: "".join(chr(FIRST_CHAR + int(i)) for i in rng.integers(0, VOCAB - 3, n))  # noqa: E731
    ok = True

    prompt_text = chars(12)
    prompt = [BOS] + text_ids(prompt_text)
    expected, margins = reference_greedy(model, prompt, N_GREEDY)
    engine_prompt, got = engine_greedy(bin_dir, path, prompt_text, N_GREEDY)
    if engine_prompt != prompt:
        print(f"{arch}: the engine tokenized the prompt as {engine_prompt}, expected {prompt}")
        ok = False
    tie_at = next((i for i, m in enumerate(margins) if m < tie), len(margins))
    same = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    greedy_ok = same >= tie_at or (same == len(expected) == len(got))
    ok &= greedy_ok
    print(f"{arch}: greedy {'ok' if greedy_ok else 'MISMATCH'}: {same} of {len(expected)} ids equal"
          f" (first near tie at step {tie_at if tie_at < len(margins) else 'none'};"
          f" smallest margin {min(margins):.4f})")
    if not greedy_ok:
        print(f"  reference {expected}\n  engine    {got}")

    text_path = work / f"{arch}.txt"
    text = sample_text(model, N_CTX * N_WINDOWS - 1, rng)   # plus BOS: exactly N_WINDOWS windows
    text_path.write_text(text, encoding="utf-8")
    expected_ppl = reference_perplexity(model, [BOS] + text_ids(text), N_CTX)
    got_ppl = engine_perplexity(bin_dir, path, text_path)
    rel = abs(got_ppl / expected_ppl - 1.0)
    ppl_ok = rel <= PPL_REL
    ok &= ppl_ok
    print(f"{arch}: perplexity {'ok' if ppl_ok else 'MISMATCH'}: engine {got_ppl:.4f},"
          f" reference {expected_ppl:.4f} (relative difference {rel:.2e})")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bin_dir", type=Path, help="directory of llama-completion and llama-perplexity")
    parser.add_argument("--work", type=Path, help="where to write the models and texts (default: a temporary one)")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="check only these")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and texts")
    parser.add_argument("--tie", type=float, default=1e-2,
                        help="greedy ids must agree up to the first step with a smaller top-two margin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = [check(arch, args.bin_dir, work, args.tie, args.seed) for arch in args.family or FAMILIES]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
