#!/usr/bin/env python3
"""Independent float64 reference forward pass for Llama-architecture GGUF models.

Everything here is deliberately plain numpy: the GGUF file is read and dequantized
by the PyPI `gguf` package (never by our C++ code) and all arithmetic is float64,
so the logits it produces are an oracle our engine can be compared against.

    python tests/reference/llama_ref.py MODEL.gguf --tokens 1,2,3 --out logits.npy [--greedy N]

writes the logits of every prompt position (n_tokens x vocab, float64) to the
.npy file; --greedy N then appends N greedily chosen tokens and prints all ids.
"""

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


# ----------------------------------------------------------------------------
# Config and weights


@dataclass
class Config:
    n_layers: int
    dim: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_eps: float
    rope_theta: float
    rope_dim: int
    rope_scaling: str          # "none", "linear" or "llama3"
    rope_factor: float
    rope_low_freq_factor: float
    rope_high_freq_factor: float
    rope_original_context: int


def read_field(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            sys.exit(f"{key}: missing from the GGUF metadata")
        return default
    return field.contents()


def read_config(reader):
    arch = read_field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"general.architecture = {arch!r}: only 'llama' is supported")
    p = "llama."
    dim = int(read_field(reader, p + "embedding_length"))
    n_heads = int(read_field(reader, p + "attention.head_count"))
    head_dim = int(read_field(reader, p + "attention.key_length", dim // n_heads))
    scaling = read_field(reader, p + "rope.scaling.type", "none")
    if scaling not in ("none", "linear", "llama3"):
        sys.exit(f"{p}rope.scaling.type = {scaling!r} is not supported")
    return Config(
        n_layers=int(read_field(reader, p + "block_count")),
        dim=dim,
        ffn_dim=int(read_field(reader, p + "feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=int(read_field(reader, p + "attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        # The vocab key is optional; the embedding's row count is authoritative.
        vocab_size=0,
        rms_eps=float(read_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(read_field(reader, p + "rope.freq_base", 10000.0)),
        rope_dim=int(read_field(reader, p + "rope.dimension_count", head_dim)),
        rope_scaling=scaling,
        rope_factor=float(read_field(reader, p + "rope.scaling.factor", 1.0)),
        rope_low_freq_factor=float(read_field(reader, p + "rope.scaling.low_freq_factor", 1.0)),
        rope_high_freq_factor=float(read_field(reader, p + "rope.scaling.high_freq_factor", 4.0)),
        rope_original_context=int(read_field(reader, p + "rope.scaling.original_context_length", 8192)),
    )


def load_tensors(reader):
    """Dequantizes every tensor to float64, in row-major numpy shape.

    GGUF lists dimensions innermost first: a matrix listed as [in, out] is `out`
    rows of `in` contiguous elements, i.e. numpy shape (out, in), and y = W @ x.
    """
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        values = dequantize(t.data, t.tensor_type).astype(np.float64)
        if values.size != math.prod(shape):
            sys.exit(f"{t.name}: dequantized {values.size} values, shape {shape} needs {math.prod(shape)}")
        tensors[t.name] = values.reshape(shape)
    return tensors


def expect_shape(tensors, name, shape):
    if name not in tensors:
        sys.exit(f"tensor {name} is missing")
    if tensors[name].shape != shape:
        sys.exit(f"tensor {name}: shape {tensors[name].shape}, expected {shape}")
    return tensors[name]


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: np.ndarray   # (n_heads*head_dim, dim)
    wk: np.ndarray   # (n_kv_heads*head_dim, dim)
    wv: np.ndarray
    wo: np.ndarray   # (dim, n_heads*head_dim)
    ffn_norm: np.ndarray
    w_gate: np.ndarray  # (ffn_dim, dim)
    w_up: np.ndarray
    w_down: np.ndarray  # (dim, ffn_dim)


class Model:
    def __init__(self, path):
        reader = GGUFReader(path)
        self.config = c = read_config(reader)
        t = load_tensors(reader)
        self.token_embd = t.get("token_embd.weight")
        if self.token_embd is None or self.token_embd.ndim != 2 or self.token_embd.shape[1] != c.dim:
            sys.exit("tensor token_embd.weight is missing or not (vocab, dim)")
        c.vocab_size = self.token_embd.shape[0]
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        self.layers = []
        for i in range(c.n_layers):
            def get(part, shape):
                return expect_shape(t, f"blk.{i}.{part}.weight", shape)
            self.layers.append(Layer(
                attn_norm=get("attn_norm", (c.dim,)),
                wq=get("attn_q", (q_dim, c.dim)),
                wk=get("attn_k", (kv_dim, c.dim)),
                wv=get("attn_v", (kv_dim, c.dim)),
                wo=get("attn_output", (c.dim, q_dim)),
                ffn_norm=get("ffn_norm", (c.dim,)),
                w_gate=get("ffn_gate", (c.ffn_dim, c.dim)),
                w_up=get("ffn_up", (c.ffn_dim, c.dim)),
                w_down=get("ffn_down", (c.dim, c.ffn_dim)),
            ))
        self.output_norm = expect_shape(t, "output_norm.weight", (c.dim,))
        # Tied embeddings: without output.weight the head reuses token_embd.
        if "output.weight" in t:
            self.output = expect_shape(t, "output.weight", (c.vocab_size, c.dim))
        else:
            self.output = self.token_embd
        rope_freqs = t.get("rope_freqs.weight")
        self.inv_freq = rope_frequencies(c, rope_freqs)


# ----------------------------------------------------------------------------
# RoPE


def rope_frequencies(c, rope_freqs):
    """Angular frequency of each rotated pair i: theta_i = base^(-2i/rope_dim),
    divided by Llama 3.1 factors (from the rope_freqs tensor, else computed)."""
    i = np.arange(c.rope_dim // 2, dtype=np.float64)
    freq = c.rope_theta ** (-2.0 * i / c.rope_dim)
    if rope_freqs is not None:
        if rope_freqs.shape != (c.rope_dim // 2,):
            sys.exit(f"tensor rope_freqs.weight: shape {rope_freqs.shape}, expected ({c.rope_dim // 2},)")
        return freq / rope_freqs
    if c.rope_scaling == "llama3":
        return freq / llama3_factors(c, freq)
    return freq


def llama3_factors(c, freq):
    """Llama 3.1 scaling: long wavelengths slowed by `factor`, short ones kept,
    a smooth blend in between."""
    low_wavelen = c.rope_original_context / c.rope_low_freq_factor
    high_wavelen = c.rope_original_context / c.rope_high_freq_factor
    wavelen = 2.0 * math.pi / freq
    smooth = (c.rope_original_context / wavelen - c.rope_low_freq_factor) / (
        c.rope_high_freq_factor - c.rope_low_freq_factor)
    blended = 1.0 / ((1.0 - smooth) / c.rope_factor + smooth)
    factors = np.where(wavelen < high_wavelen, 1.0, blended)
    return np.where(wavelen > low_wavelen, c.rope_factor, factors)


def apply_rope(x, positions, inv_freq, c):
    """Rotates adjacent pairs (2i, 2i+1) of each head; x is (n_tokens, n_heads, head_dim).
    Dimensions past rope_dim are left untouched."""
    pos = positions.astype(np.float64)
    if c.rope_scaling == "linear":
        pos = pos / c.rope_factor
    angle = pos[:, None] * inv_freq[None, :]          # (n_tokens, rope_dim/2)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    out = x.copy()
    even = x[..., 0:c.rope_dim:2]
    odd = x[..., 1:c.rope_dim:2]
    out[..., 0:c.rope_dim:2] = even * cos - odd * sin
    out[..., 1:c.rope_dim:2] = even * sin + odd * cos
    return out


# ----------------------------------------------------------------------------
# Forward pass


def rmsnorm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


class KVCache:
    """Keys and values of every position seen so far, per layer: (n_pos, n_kv_heads, head_dim)."""

    def __init__(self, n_layers):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers

    def append(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = np.concatenate([self.keys[layer], k])
            self.values[layer] = np.concatenate([self.values[layer], v])
        return self.keys[layer], self.values[layer]


def attention(x, layer, li, positions, cache, model):
    """GQA causal self-attention of the new tokens x (n_new, dim) over the cache."""
    c = model.config
    n = x.shape[0]
    q = (x @ layer.wq.T).reshape(n, c.n_heads, c.head_dim)
    k = (x @ layer.wk.T).reshape(n, c.n_kv_heads, c.head_dim)
    v = (x @ layer.wv.T).reshape(n, c.n_kv_heads, c.head_dim)
    q = apply_rope(q, positions, model.inv_freq, c)
    k = apply_rope(k, positions, model.inv_freq, c)
    keys, values = cache.append(li, k, v)            # (n_pos, n_kv_heads, head_dim)

    group = c.n_heads // c.n_kv_heads                 # query heads sharing one KV head
    keys = np.repeat(keys, group, axis=1)
    values = np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, keys) / math.sqrt(c.head_dim)
    key_pos = np.arange(keys.shape[0])
    scores = np.where(key_pos[None, None, :] <= positions[None, :, None], scores, -np.inf)
    out = np.einsum("hqk,khd->qhd", softmax(scores), values).reshape(n, c.n_heads * c.head_dim)
    return out @ layer.wo.T


def feed_forward(x, layer):
    return (silu(x @ layer.w_gate.T) * (x @ layer.w_up.T)) @ layer.w_down.T


def forward(model, tokens, start_pos, cache):
    """Logits (n_tokens, vocab) for tokens placed at positions start_pos, start_pos+1, ..."""
    c = model.config
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.min() < 0 or tokens.max() >= c.vocab_size:
        sys.exit(f"token ids must lie in [0, {c.vocab_size})")
    positions = np.arange(start_pos, start_pos + len(tokens))
    x = model.token_embd[tokens]
    for li, layer in enumerate(model.layers):
        x = x + attention(rmsnorm(x, layer.attn_norm, c.rms_eps), layer, li, positions, cache, model)
        x = x + feed_forward(rmsnorm(x, layer.ffn_norm, c.rms_eps), layer)
    return rmsnorm(x, model.output_norm, c.rms_eps) @ model.output.T


def generate(model, prompt, n_greedy):
    """Prompt logits and the ids of n_greedy greedily chosen continuation tokens."""
    cache = KVCache(model.config.n_layers)
    logits = forward(model, prompt, 0, cache)
    generated = []
    last = logits[-1]
    for _ in range(n_greedy):
        token = int(np.argmax(last))
        generated.append(token)
        last = forward(model, [token], len(prompt) + len(generated) - 1, cache)[-1]
    return logits, generated


# ----------------------------------------------------------------------------
# CLI


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="Llama GGUF file")
    parser.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    parser.add_argument("--out", required=True, help="where to write the float64 logits (.npy)")
    parser.add_argument("--greedy", type=int, default=0, help="greedy tokens to generate after the prompt")
    args = parser.parse_args()

    prompt = [int(s) for s in args.tokens.split(",") if s.strip()]
    if not prompt:
        sys.exit("--tokens: need at least one token id")
    model = Model(args.model)
    logits, generated = generate(model, prompt, args.greedy)
    np.save(args.out, logits)
    if args.greedy:
        print(" ".join(str(t) for t in generated))


if __name__ == "__main__":
    main()
