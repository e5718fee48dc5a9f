#!/usr/bin/env python3
"""Computes, once, what the reference engine (llama.cpp built for the CPU) says
about our random-weight presets, and keeps it as test data, so that the test
suite compares our engine against a second oracle without ever building
llama.cpp (tests/python/test_reference_engine_data.py reads the data).

    .venv/bin/python tests/reference/make_reference_engine_data.py BIN_DIR [--ntransformer PATH]
        [--preset P ...] [--first-seed N] [--out DIR] [--reference-engine TEXT]

BIN_DIR holds llama-completion and llama-perplexity of llama.cpp 0c1e570 (the
copy in the PyPI source package llama-cpp-python==0.3.36), built for the CPU
as tests/reference/check_reference_engine.py describes, or of the build that
TEXT describes (it is recorded in the data); gpt-oss needs a llama.cpp that
knows it. PATH is our binary
(default: build/src/ntransformer); DIR the data directory (default:
tests/data/reference_engine), one <preset>.json per preset.

For each preset (tiny-qwen2, tiny-qwen3, tiny-gemma3, tiny, the llama one, and
the mixtures of experts tiny-mixtral, tiny-qwen3moe and tiny-gpt-oss) and each seed S from
--first-seed on, until one passes:

  model     ntransformer make-model --preset P --type f32 --seed S --out MODEL.gguf
            (its sha256 is kept: the test regenerates the model and refuses to
            compare against data computed from a different file)
  prompt    ntransformer tokenize -m MODEL.gguf -p "Once upon a time" --ids
  greedy    the float64 reference (tests/reference/llama_ref.py; with --act-q8
            arithmetic for a file with MXFP4 weights, gpt-oss's experts, which
            both engines multiply with 8-bit activations) generates 48
            tokens from the prompt's ids (llama_ref.generate); the seed passes
            only if, at every step, the chosen token is the lowest id of the
            top logit value and the top-two margin over distinct logit values
            is at least 1e-2 (make-model tiles every matrix from 512 distinct
            rows, so tokens 512 apart tie exactly, and engines take the lower
            id), if no generated token is a control token (the reference
            engine would stop at an end-of-generation token) and, for a
            mixture of experts, if every token's routing along the path
            has a margin (its k-th router logit less the next) of at least
            1e-4, so that engines rounding differently choose alike. Then
              llama-completion -m MODEL.gguf -p "Once upon a time" -n 48 --temp 0 --top-k 1 -s 1
                  -no-cnv --no-display-prompt --verbose-prompt --no-warmup
                  -fa off -ctk f32 -ctv f32 -c 128 -b 128 -t 2
            must tokenize the prompt to the same ids (--verbose-prompt) and
            print the continuation (stdout, less the "\\n\\n" it appends) as
            exactly the bytes of the float64 reference's ids. Those bytes are
            kept, and as text with each malformed UTF-8 sequence (byte tokens
            often split characters) replaced by U+FFFD as Unicode recommends
            (one per maximal subpart, as Python decodes with "replace"), which
            is how an engine printing text shows them.
  text      ntransformer run -m MODEL.gguf --raw --device cpu -p "Once upon a time" -n 256
                --temp 1 -s T --ignore-eos
            sampled from the model itself (a random text's perplexity would be
            astronomical), for T = 1, 2, ... until the text tokenizes to the
            same ids in both engines and to at least 4 windows of 64 tokens:
              ntransformer tokenize -m MODEL.gguf -f TEXT.txt --ids --no-parse-special
              llama-completion -m MODEL.gguf -f TEXT.txt -n 1 -no-cnv --verbose-prompt --no-warmup
                  -fa off -ctk f32 -ctv f32 -c 512 -t 2
            (tokenized as llama-perplexity does: BOS where the vocabulary asks
            for it, special-token text as plain text).
  ppl       llama-perplexity -m MODEL.gguf -f TEXT.txt -c 64 -b 64 -fa off -ctk f32 -ctv f32 -t 2
            its final PPL and running estimate after each window. The windows
            run past tiny-gemma3's sliding window (16). The float64 reference's
            perplexity by the same method is kept beside it for diagnosis
            (and its routing margins must pass as the greedy path's do).

Everything runs in full F32 on the reference engine: -fa off, as its CPU flash
attention rounds to F16, and -ctk f32 -ctv f32 for the KV cache. Its log is
written by a background thread that may lose the last lines at exit, so a run
whose output stops short is repeated.
"""

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402

SOURCE_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_ref  # noqa: E402

PRESETS = ("tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny", "tiny-mixtral", "tiny-qwen3moe", "tiny-gpt-oss")
TYPE = "f32"
PROMPT = "Once upon a time"
N_GREEDY = 48
MIN_MARGIN = 1e-2
MIN_ROUTE_MARGIN = 1e-4  # a mixture of experts' routing, in router logits (F32 engines differ by ~1e-6)
N_SAMPLE = 256       # tokens sampled for the perplexity text
N_CTX = 64           # perplexity window (-c and -b)
MIN_WINDOWS = 4
THREADS = "2"
REFERENCE_ENGINE = ("llama.cpp 0c1e570 (the copy in the PyPI source package llama-cpp-python==0.3.36), "
                    "built for the CPU")
CONTROL = 3          # tokenizer.ggml.token_type of control tokens (BOS, EOS, ...)

# Placeholders for the files in the recorded commands.
MODEL, TEXT = "MODEL.gguf", "TEXT.txt"


def make_model_cmd(preset, seed):
    return ["make-model", "--preset", preset, "--type", TYPE, "--seed", str(seed), "--out", MODEL]


def greedy_cmd():
    return ["llama-completion", "-m", MODEL, "-p", PROMPT, "-n", str(N_GREEDY), "--temp", "0", "--top-k", "1",
            "-s", "1", "-no-cnv", "--no-display-prompt", "--verbose-prompt", "--no-warmup",
            "-fa", "off", "-ctk", "f32", "-ctv", "f32", "-c", "128", "-b", "128", "-t", THREADS]


def sample_cmd(sample_seed):
    return ["run", "-m", MODEL, "--raw", "--device", "cpu", "-p", PROMPT, "-n", str(N_SAMPLE),
            "--temp", "1", "-s", str(sample_seed), "--ignore-eos"]


def text_tokens_cmd():
    return ["llama-completion", "-m", MODEL, "-f", TEXT, "-n", "1", "-no-cnv", "--verbose-prompt",
            "--no-warmup", "-fa", "off", "-ctk", "f32", "-ctv", "f32", "-c", "512", "-t", THREADS]


def perplexity_cmd():
    return ["llama-perplexity", "-m", MODEL, "-f", TEXT, "-c", str(N_CTX), "-b", str(N_CTX),
            "-fa", "off", "-ctk", "f32", "-ctv", "f32", "-t", THREADS]


class Tools:
    def __init__(self, bin_dir, ntransformer, work):
        self.bin_dir, self.ntransformer, self.work = bin_dir, ntransformer, work

    def argv(self, cmd, model, text=None):
        """The recorded command with its tool and placeholders resolved."""
        tool = self.bin_dir / cmd[0] if cmd[0].startswith("llama-") else None
        out = [str(tool)] + cmd[1:] if tool else [str(self.ntransformer)] + cmd
        return [str(model) if a == MODEL else str(text) if a == TEXT else a for a in out]

    def ours(self, cmd, model, text=None):
        result = subprocess.run(["nice", "-n", "10"] + self.argv(cmd, model, text), capture_output=True)
        if result.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr.decode(errors='replace')}")
        return result.stdout

    def reference(self, cmd, model, text, complete):
        """Runs a reference engine tool until complete(stdout, stderr) holds
        (bytes): its log thread may lose the last lines at exit."""
        for _ in range(6):
            result = subprocess.run(["nice", "-n", "10"] + self.argv(cmd, model, text), capture_output=True)
            if result.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                         f"{result.stderr.decode(errors='replace')[-3000:]}")
            if complete(result.stdout, result.stderr):
                return result
        sys.exit(f"{' '.join(cmd)}: output incomplete in 6 runs:\n{result.stdout[-2000:]!r}\n"
                 f"{result.stderr.decode(errors='replace')[-2000:]}")


# ----------------------------------------------------------------------------
# Vocabulary


def byte_decoder():
    """Byte-level BPE pieces spell every byte as one character: the printable
    Latin-1 bytes as themselves, the other 68 as U+0100 upwards, in byte order."""
    kept = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table = {chr(b): b for b in kept}
    for n, b in enumerate(b for b in range(256) if b not in table.values()):
        table[chr(256 + n)] = b
    return table


class Vocab:
    def __init__(self, path):
        reader = GGUFReader(str(path))
        model = llama_ref.read_field(reader, "tokenizer.ggml.model")
        if model != "gpt2":
            sys.exit(f"{path}: tokenizer {model!r}, expected a byte-level BPE (gpt2) vocabulary")
        self.pieces = llama_ref.read_field(reader, "tokenizer.ggml.tokens")
        self.types = llama_ref.read_field(reader, "tokenizer.ggml.token_type")
        self.add_bos = bool(llama_ref.read_field(reader, "tokenizer.ggml.add_bos_token", False))
        self.bos = int(llama_ref.read_field(reader, "tokenizer.ggml.bos_token_id"))
        self.decoder = byte_decoder()

    def is_control(self, token):
        return self.types[token] == CONTROL

    def text_bytes(self, ids):
        return bytes(self.decoder[ch] for t in ids for ch in self.pieces[t])


def verbose_prompt_ids(stderr):
    """The prompt's ids from llama-completion --verbose-prompt ("  id -> 'piece'"
    lines) and the count it announces, or None while the log is incomplete."""
    m = re.search(rb"number of tokens in prompt = (\d+)", stderr)
    ids = [int(i) for i in re.findall(rb"^\S+ I\s+(\d+) -> '", stderr, re.M)]
    return ids if m and len(ids) == int(m[1]) else None


# ----------------------------------------------------------------------------
# Greedy


def reference_greedy(model, vocab, prompt_ids):
    """The float64 reference's greedy ids, the smallest top-two margin over
    distinct logit values along them and its step, or a reason to refuse."""
    _, ids = llama_ref.generate(model, prompt_ids, N_GREEDY)
    # Every step's logits again in one pass: row k predicts generated token k.
    model.min_route_margin = math.inf
    logits = llama_ref.forward(model, prompt_ids + ids[:-1], 0, llama_ref.KVCache(model.config.n_layers))
    logits = logits[len(prompt_ids) - 1:]
    if model.min_route_margin < MIN_ROUTE_MARGIN:
        return ids, None, f"experts near-tied in a routing (margin {model.min_route_margin:.2e})"
    margins = []
    for step, (row, token) in enumerate(zip(logits, ids)):
        top = row.max()
        same = np.abs(row - top) <= 1e-9 * max(1.0, abs(top))     # exact ties, up to float64 summation order
        if int(np.flatnonzero(same)[0]) != token:
            return ids, None, f"step {step}: token {token} is not the lowest id of the top value"
        margins.append(float(top - row[~same].max()))
    step = int(np.argmin(margins))
    if margins[step] < MIN_MARGIN:
        return ids, (margins[step], step), f"near tie at step {step} (margin {margins[step]:.2e})"
    control = [t for t in ids if vocab.is_control(t)]
    if control:
        return ids, (margins[step], step), f"control token {control[0]} generated"
    return ids, (margins[step], step), None


def reference_arithmetic(path):
    """Exact float64, but for files with MXFP4 weights: the engines round those
    products' inputs to 8 bits whatever the file's type, which --act-q8 models."""
    mxfp4 = any(t.tensor_type.name == "MXFP4" for t in GGUFReader(str(path)).tensors)
    return llama_ref.Arithmetic(act_q8=mxfp4)


def engine_greedy(tools, path):
    """The reference engine's prompt ids and continuation bytes."""
    def complete(stdout, stderr):
        return stdout.endswith(b"\n\n") and verbose_prompt_ids(stderr) is not None

    result = tools.reference(greedy_cmd(), path, None, complete)
    return verbose_prompt_ids(result.stderr), result.stdout[:-2]


def try_seed(tools, preset, seed):
    """The greedy record for this seed, or None when it fails a condition."""
    path = tools.work / f"{preset}.gguf"
    tools.ours(make_model_cmd(preset, seed), path)
    vocab = Vocab(path)
    prompt_ids = json.loads(tools.ours(["tokenize", "-m", MODEL, "-p", PROMPT, "--ids"], path))
    model = llama_ref.Model(str(path), reference_arithmetic(path))
    ids, margin, why = reference_greedy(model, vocab, prompt_ids)
    if why:
        print(f"{preset} seed {seed}: refused: {why}")
        return None
    engine_prompt, engine_bytes = engine_greedy(tools, path)
    if engine_prompt != prompt_ids:
        print(f"{preset} seed {seed}: refused: the reference engine tokenized the prompt as {engine_prompt},"
              f" ours as {prompt_ids}")
        return None
    expected = vocab.text_bytes(ids)
    if engine_bytes != expected:
        print(f"{preset} seed {seed}: refused: the reference engine's continuation differs from the float64"
              f" reference's:\n  engine    {engine_bytes!r}\n  reference {expected!r}")
        return None
    print(f"{preset} seed {seed}: greedy agrees, smallest margin {margin[0]:.4f} at step {margin[1]}")
    return dict(path=path, vocab=vocab, model=model, seed=seed, prompt_ids=prompt_ids, ids=ids,
                continuation=expected, margin=margin)


# ----------------------------------------------------------------------------
# Perplexity


def sample_text(tools, path):
    """A text sampled from the model that both engines tokenize alike, its ids and sampling seed."""
    text_path = tools.work / "text.txt"
    for sample_seed in range(1, 21):
        text = tools.ours(sample_cmd(sample_seed), path).decode("utf-8")
        text_path.write_bytes(text.encode("utf-8"))
        ours = json.loads(tools.ours(["tokenize", "-m", MODEL, "-f", TEXT, "--ids", "--no-parse-special"],
                                     path, text_path))
        theirs = verbose_prompt_ids(tools.reference(
            text_tokens_cmd(), path, text_path, lambda out, err: verbose_prompt_ids(err) is not None).stderr)
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            print(f"  text seed {sample_seed}: refused: the engines tokenize it differently from token {at}")
        elif len(ours) < MIN_WINDOWS * N_CTX:
            print(f"  text seed {sample_seed}: refused: only {len(ours)} tokens")
        else:
            return text, text_path, ours, sample_seed
    sys.exit("no sampled text tokenizes alike in both engines")


def float64_perplexity(model, tokens, bos):
    """llama-perplexity's method: windows of N_CTX tokens, BOS in place of the
    first (where the vocabulary adds BOS), the second half of each scored."""
    nll = []
    for w in range(len(tokens) // N_CTX):
        window = tokens[w * N_CTX:(w + 1) * N_CTX]
        if bos is not None:
            window[0] = bos
        logits = llama_ref.forward(model, window, 0, llama_ref.KVCache(model.config.n_layers))
        for i in range(N_CTX // 2, N_CTX - 1):
            row = logits[i]
            top = row.max()
            nll.append(math.log(np.exp(row - top).sum()) + top - row[window[i + 1]])
    return math.exp(sum(nll) / len(nll))


def engine_perplexity(tools, path, text_path):
    """The final PPL, its error, the window count and the running estimate after each window."""
    def parse(stdout, stderr):
        chunks = re.search(rb"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", stderr)
        final = re.search(rb"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", stderr)
        running = [float(x) for x in re.findall(rb"\[\d+\]([\d.]+),", stdout)]
        if not (chunks and final and len(running) == int(chunks[1])):
            return None
        if int(chunks[2]) != N_CTX:
            sys.exit(f"llama-perplexity ran windows of {int(chunks[2])} tokens, expected {N_CTX}")
        return float(final[1]), float(final[2]), int(chunks[1]), running

    result = tools.reference(perplexity_cmd(), path, text_path, lambda out, err: parse(out, err) is not None)
    return parse(result.stdout, result.stderr)


# ----------------------------------------------------------------------------


def make_data(tools, preset, first_seed, reference_engine):
    for seed in range(first_seed, first_seed + 100):
        greedy = try_seed(tools, preset, seed)
        if greedy:
            break
    else:
        sys.exit(f"{preset}: no seed from {first_seed} passes")
    path, vocab = greedy["path"], greedy["vocab"]
    text, text_path, tokens, sample_seed = sample_text(tools, path)
    ppl, ppl_error, windows, running = engine_perplexity(tools, path, text_path)
    bos = vocab.bos if vocab.add_bos else None
    greedy_route_margin = greedy["model"].min_route_margin
    greedy["model"].min_route_margin = math.inf
    f64 = float64_perplexity(greedy["model"], list(tokens), bos)
    if greedy["model"].min_route_margin < MIN_ROUTE_MARGIN:
        sys.exit(f"{preset}: experts near-tied in a routing of the perplexity text"
                 f" (margin {greedy['model'].min_route_margin:.2e}): try another --first-seed")
    print(f"{preset}: text seed {sample_seed}, {len(tokens)} tokens, {windows} windows:"
          f" PPL {ppl:.4f} (float64 reference {f64:.4f}, relative {f64 / ppl - 1:+.2e})")
    return {
        "preset": preset,
        "seed": greedy["seed"],
        "type": TYPE,
        "model_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "reference_engine": reference_engine,
        "make_model_command": ["ntransformer"] + make_model_cmd(preset, greedy["seed"]),
        "greedy": {
            "command": greedy_cmd(),
            "prompt": PROMPT,
            "n_predict": N_GREEDY,
            "prompt_ids": greedy["prompt_ids"],
            "ids": greedy["ids"],
            "continuation": greedy["continuation"].decode("utf-8", errors="replace"),
            "continuation_bytes_hex": greedy["continuation"].hex(),
            "float64_min_margin": round(greedy["margin"][0], 6),
            "float64_min_margin_step": greedy["margin"][1],
            **({"float64_min_route_margin": round(greedy_route_margin, 6)} if greedy["model"].config.n_experts else {}),
        },
        "perplexity": {
            "command": perplexity_cmd(),
            "text_command": ["ntransformer"] + sample_cmd(sample_seed),
            "text": text,
            "token_ids": tokens,
            "n_ctx": N_CTX,
            "windows": windows,
            "ppl": ppl,
            "ppl_error": ppl_error,
            "running_ppl": running,
            "float64_reference_ppl": round(f64, 6),
        },
    }


def dump(data, indent=""):
    """JSON with one key of an object a line and every other value (lists too) on one line."""
    if isinstance(data, dict):
        inner = indent + " "
        items = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return json.dumps(data, ensure_ascii=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bin_dir", type=Path, help="directory of llama-completion and llama-perplexity")
    parser.add_argument("--ntransformer", type=Path, default=SOURCE_DIR / "build" / "src" / "ntransformer")
    parser.add_argument("--preset", action="append", choices=PRESETS, help="only these presets")
    parser.add_argument("--first-seed", type=int, default=1, help="the first make-model seed tried")
    parser.add_argument("--out", type=Path, default=SOURCE_DIR / "tests" / "data" / "reference_engine")
    parser.add_argument("--reference-engine", default=REFERENCE_ENGINE, help="what BIN_DIR's build is, for the record")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tools = Tools(args.bin_dir.resolve(), args.ntransformer.resolve(), Path(tmp))
        for preset in args.preset or PRESETS:
            data = make_data(tools, preset, args.first_seed, args.reference_engine)
            (args.out / f"{preset}.json").write_text(dump(data) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
