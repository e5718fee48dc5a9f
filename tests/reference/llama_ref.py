#!/usr/bin/env python3
"""Independent float64 reference forward pass for Llama-architecture GGUF models.

Everything here is deliberately plain numpy: the GGUF file is read and dequantized
by the PyPI `gguf` package (never by our C++ code) and all arithmetic is float64,
so the logits it produces are an oracle our engine can be compared against.

    python tests/reference/llama_ref.py MODEL.gguf --tokens 1,2,3 --out logits.npy [--greedy N]
        [--step] [--act-q8] [--kv-f16]

writes the logits of every prompt position (n_tokens x vocab, float64) to the
.npy file; --greedy N then appends N greedily chosen tokens and prints all ids.

By default the arithmetic is exact float64. Two options model the rounding of
CPU engines in the llama.cpp family (ours included):
  --act-q8  rounds the input of every matrix product to 8-bit blocks, as an
            engine does before its integer dot products (see
            quantize_activations); everything else stays float64.
  --kv-f16  stores the attention keys and values as float16.
  --step    feeds the prompt one token per forward pass instead of one batch
            (with --act-q8 the batch size picks the activation format).
A single product agrees with such an engine to float32 rounding. A whole model
agrees only until float32 and float64 inputs first round to different steps
(inputs within ~1e-5 of a rounding tie); from then on each carries its own
rounding noise, so deep models match these options statistically, not
tightly (tests/python/test_e2e_smollm2.py has the measurements).
"""

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
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


# Block bytes of the types whose blocks hold a min after the scale: d (f16), m (f16), ...
BLOCK_MIN_BYTES = {GGMLQuantizationType.Q4_1: 20, GGMLQuantizationType.Q5_1: 24}


def load_tensors(reader):
    """Dequantizes every tensor to float64, in row-major numpy shape; also
    returns each tensor's stored GGUF type and the block mins of Q4_1/Q5_1 ones.

    GGUF lists dimensions innermost first: a matrix listed as [in, out] is `out`
    rows of `in` contiguous elements, i.e. numpy shape (out, in), and y = W @ x.
    """
    tensors, types, mins = {}, {}, {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        values = dequantize(t.data, t.tensor_type).astype(np.float64)
        if values.size != math.prod(shape):
            sys.exit(f"{t.name}: dequantized {values.size} values, shape {shape} needs {math.prod(shape)}")
        tensors[t.name] = values.reshape(shape)
        types[t.name] = GGMLQuantizationType(t.tensor_type)
        if types[t.name] in BLOCK_MIN_BYTES:
            mins[t.name] = block_mins(t.data, types[t.name], shape)
    return tensors, types, mins


def block_mins(raw, tensor_type, shape):
    """The float16 min m of every 32-block (w = d * q + m) of a Q4_1/Q5_1 matrix: (rows, cols / 32)."""
    block_bytes = BLOCK_MIN_BYTES[tensor_type]
    blocks = np.ascontiguousarray(raw).reshape(shape[0], -1, block_bytes)
    return np.ascontiguousarray(blocks[:, :, 2:4]).view(np.float16)[:, :, 0].astype(np.float64)


def expect_shape(tensors, name, shape):
    if name not in tensors:
        sys.exit(f"tensor {name} is missing")
    if tensors[name].shape != shape:
        sys.exit(f"tensor {name}: shape {tensors[name].shape}, expected {shape}")
    return tensors[name]


@dataclass
class Matrix:
    """A weight matrix y = w @ x and the type it is stored in, which decides
    how an 8-bit-activation engine rounds its input (see activation_format)."""
    w: np.ndarray  # (out, in), float64
    stored_type: GGMLQuantizationType
    block_min: np.ndarray = None  # Q4_1/Q5_1: m of each 32-block, (out, in / 32)


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: Matrix   # (n_heads*head_dim, dim)
    wk: Matrix   # (n_kv_heads*head_dim, dim)
    wv: Matrix
    wo: Matrix   # (dim, n_heads*head_dim)
    ffn_norm: np.ndarray
    w_gate: Matrix  # (ffn_dim, dim)
    w_up: Matrix
    w_down: Matrix  # (dim, ffn_dim)


@dataclass(frozen=True)
class Arithmetic:
    """Which rounding of a real engine the forward pass models (exact float64 by default)."""
    act_q8: bool = False  # 8-bit activations into every matrix product
    kv_f16: bool = False  # float16 KV cache


class Model:
    def __init__(self, path, arithmetic=Arithmetic()):
        reader = GGUFReader(path)
        self.config = c = read_config(reader)
        self.arithmetic = arithmetic
        t, types, mins = load_tensors(reader)
        self.token_embd = t.get("token_embd.weight")
        if self.token_embd is None or self.token_embd.ndim != 2 or self.token_embd.shape[1] != c.dim:
            sys.exit("tensor token_embd.weight is missing or not (vocab, dim)")
        c.vocab_size = self.token_embd.shape[0]
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        self.layers = []
        for i in range(c.n_layers):
            def get(part, shape):
                return expect_shape(t, f"blk.{i}.{part}.weight", shape)

            def matrix(part, shape):
                name = f"blk.{i}.{part}.weight"
                return Matrix(get(part, shape), types[name], mins.get(name))
            self.layers.append(Layer(
                attn_norm=get("attn_norm", (c.dim,)),
                wq=matrix("attn_q", (q_dim, c.dim)),
                wk=matrix("attn_k", (kv_dim, c.dim)),
                wv=matrix("attn_v", (kv_dim, c.dim)),
                wo=matrix("attn_output", (c.dim, q_dim)),
                ffn_norm=get("ffn_norm", (c.dim,)),
                w_gate=matrix("ffn_gate", (c.ffn_dim, c.dim)),
                w_up=matrix("ffn_up", (c.ffn_dim, c.dim)),
                w_down=matrix("ffn_down", (c.dim, c.ffn_dim)),
            ))
        self.output_norm = expect_shape(t, "output_norm.weight", (c.dim,))
        # Tied embeddings: without output.weight the head reuses token_embd.
        if "output.weight" in t:
            self.output = Matrix(expect_shape(t, "output.weight", (c.vocab_size, c.dim)), types["output.weight"],
                                 mins.get("output.weight"))
        else:
            self.output = Matrix(self.token_embd, types["token_embd.weight"], mins.get("token_embd.weight"))
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
# 8-bit activations (--act-q8)
#
# CPU engines that multiply quantized weights with integer dot products (the
# llama.cpp family, ours included) first round each activation row to int8
# blocks: per block d = max|x| / 127 (kept as float32) and q = round(x / d), so
# the product sees q * d instead of x. This models that arithmetic, not any engine's code: it is
# still an independent float64 forward pass of the same recipe.
#
# The block format follows the weight type and, as in our engine (and
# llama.cpp), the number of tokens in the pass:
#   - F32/F16/BF16 weights take the activations unrounded;
#   - passes of gemm_min_tokens or more tokens (prompt prefill: 4 for the
#     legacy types, 16 for the K-quants) use blocks of 32 with a float32
#     scale, for every quantized weight type;
#   - smaller passes (decoding, short prompts) use the weight type's
#     dot-product partner:
#     K-quants Q8_K (blocks of 256, float32 scale), the others Q8_0/Q8_1
#     (blocks of 32, q computed with the exact d but multiplied by d rounded
#     to float16). Q8_1, the partner of Q4_1/Q5_1, also carries each block's
#     sum rounded to float16, and the weights' min term uses that sum:
#     dot = sum_blocks d_w * sum(q_w * x) + m_w * fp16(sum(x)).

FLOAT_WEIGHT_TYPES = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
K_QUANT_TYPES = {GGMLQuantizationType.Q2_K, GGMLQuantizationType.Q3_K, GGMLQuantizationType.Q4_K,
                 GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K}


@dataclass(frozen=True)
class ActivationFormat:
    block: int                # elements sharing one scale
    fp16_scale: bool          # the products use the scale rounded to float16
    fp16_sum: bool = False    # the weights' min term sees the block sum rounded to float16


def gemm_min_tokens(weight_type):
    """Tokens from which a pass rounds `weight_type`'s inputs as a prefill does."""
    return 16 if weight_type in K_QUANT_TYPES else 4


def activation_format(weight_type, n_tokens):
    """How the input of a product with `weight_type` weights is rounded in a
    pass over n_tokens tokens; None: not at all."""
    if weight_type in FLOAT_WEIGHT_TYPES:
        return None
    if n_tokens >= gemm_min_tokens(weight_type):
        return ActivationFormat(block=32, fp16_scale=False)
    if weight_type in K_QUANT_TYPES:
        return ActivationFormat(block=256, fp16_scale=False)
    return ActivationFormat(block=32, fp16_scale=True, fp16_sum=weight_type in BLOCK_MIN_BYTES)


def quantize_activations(x, fmt):
    """x (n_tokens, n) with every row rounded to int8 blocks of `fmt`, as values."""
    if fmt is None:
        return x
    blocks = x.reshape(x.shape[0], -1, fmt.block)
    # Block formats hold the scale as float32 (rounded further to float16 for Q8_0/Q8_1).
    d = (np.max(np.abs(blocks), axis=-1, keepdims=True) / 127.0).astype(np.float32)
    q = np.round(np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0))
    if fmt.fp16_scale:
        d = d.astype(np.float16)
    return (q * d.astype(np.float64)).reshape(x.shape)


def linear(x, m, arithmetic):
    """x (n_tokens, in) times matrix m: (n_tokens, out)."""
    if not arithmetic.act_q8:
        return x @ m.w.T
    fmt = activation_format(m.stored_type, x.shape[0])
    x = quantize_activations(x, fmt)
    y = x @ m.w.T
    if fmt is not None and fmt.fp16_sum:
        sums = x.reshape(x.shape[0], -1, fmt.block).sum(axis=-1)
        y += (sums.astype(np.float16).astype(np.float64) - sums) @ m.block_min.T
    return y


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
    c, a = model.config, model.arithmetic
    n = x.shape[0]
    q = linear(x, layer.wq, a).reshape(n, c.n_heads, c.head_dim)
    k = linear(x, layer.wk, a).reshape(n, c.n_kv_heads, c.head_dim)
    v = linear(x, layer.wv, a).reshape(n, c.n_kv_heads, c.head_dim)
    q = apply_rope(q, positions, model.inv_freq, c)
    k = apply_rope(k, positions, model.inv_freq, c)
    if a.kv_f16:
        k, v = (t.astype(np.float16).astype(np.float64) for t in (k, v))
    keys, values = cache.append(li, k, v)            # (n_pos, n_kv_heads, head_dim)

    group = c.n_heads // c.n_kv_heads                 # query heads sharing one KV head
    keys = np.repeat(keys, group, axis=1)
    values = np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, keys) / math.sqrt(c.head_dim)
    key_pos = np.arange(keys.shape[0])
    scores = np.where(key_pos[None, None, :] <= positions[None, :, None], scores, -np.inf)
    out = np.einsum("hqk,khd->qhd", softmax(scores), values).reshape(n, c.n_heads * c.head_dim)
    return linear(out, layer.wo, a)


def feed_forward(x, layer, arithmetic):
    hidden = silu(linear(x, layer.w_gate, arithmetic)) * linear(x, layer.w_up, arithmetic)
    return linear(hidden, layer.w_down, arithmetic)


def forward(model, tokens, start_pos, cache, on_layer=None):
    """Logits (n_tokens, vocab) for tokens placed at positions start_pos, start_pos+1, ...
    on_layer(layer index, its input, its output) sees the hidden states (n_tokens, dim)."""
    c = model.config
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.min() < 0 or tokens.max() >= c.vocab_size:
        sys.exit(f"token ids must lie in [0, {c.vocab_size})")
    positions = np.arange(start_pos, start_pos + len(tokens))
    x = model.token_embd[tokens]
    for li, layer in enumerate(model.layers):
        x_in = x
        x = x + attention(rmsnorm(x, layer.attn_norm, c.rms_eps), layer, li, positions, cache, model)
        x = x + feed_forward(rmsnorm(x, layer.ffn_norm, c.rms_eps), layer, model.arithmetic)
        if on_layer:
            on_layer(li, x_in, x)
    return linear(rmsnorm(x, model.output_norm, c.rms_eps), model.output, model.arithmetic)


def generate(model, prompt, n_greedy, step=False):
    """Prompt logits and the ids of n_greedy greedily chosen continuation tokens.
    The prompt goes in one pass, or one token per pass when `step`."""
    cache = KVCache(model.config.n_layers)
    if step:
        logits = np.concatenate([forward(model, [t], pos, cache) for pos, t in enumerate(prompt)])
    else:
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
    parser.add_argument("--step", action="store_true", help="feed the prompt one token per forward pass")
    parser.add_argument("--act-q8", action="store_true",
                        help="round matrix-product inputs to 8-bit blocks like 8-bit-activation CPU engines")
    parser.add_argument("--kv-f16", action="store_true", help="keep attention keys and values in float16")
    args = parser.parse_args()

    prompt = [int(s) for s in args.tokens.split(",") if s.strip()]
    if not prompt:
        sys.exit("--tokens: need at least one token id")
    model = Model(args.model, Arithmetic(act_q8=args.act_q8, kv_f16=args.kv_f16))
    logits, generated = generate(model, prompt, args.greedy, step=args.step)
    np.save(args.out, logits)
    if args.greedy:
        print(" ".join(str(t) for t in generated))


if __name__ == "__main__":
    main()
