#!/usr/bin/env python3
"""Independent float64 reference forward pass for GGUF decoder models of the
architectures llama (Mixtral too), qwen2 (Qwen2.5), qwen3, qwen3moe, gemma3 and gpt-oss.

Everything here is deliberately plain numpy: the GGUF file is read and dequantized
by the PyPI `gguf` package (never by our C++ code) and all arithmetic is float64,
so the logits it produces are an oracle our engine can be compared against.

The architecture comes from general.architecture and every hyperparameter from
the GGUF metadata, read with the keys, defaults and fixed constants of the
reference engine (llama.cpp); ARCHITECTURES below says what differs per family.
tests/reference/check_reference_engine.py checks this file against that engine.

    python tests/reference/llama_ref.py MODEL.gguf --tokens 1,2,3 --out logits.npy [--greedy N]
        [--step] [--act-q8] [--kv-f16]

writes the logits of every prompt position (n_tokens x vocab, float64) to the
.npy file; --greedy N then appends N greedily chosen tokens and prints all ids.

By default the arithmetic is exact float64. These options model the rounding of
CPU engines in the llama.cpp family (ours included):
  --act-q8  rounds the input of every matrix product to 8-bit blocks, as an
            engine does before its integer dot products (see
            quantize_activations); everything else stays float64.
  --kv-f16  stores the attention keys and values as float16.
  --gelu-f16  evaluates GELU (gemma3) at the input rounded to float16 and
            rounds the result to float16, as a CPU engine's lookup table does.
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
#
# What each architecture adds to the llama recipe, as the reference engine
# builds it (the keys are prefixed with the architecture's name):
#   llama   pre-norm blocks, SiLU-gated FFN, RoPE on adjacent pairs (2i, 2i+1).
#   qwen2   llama plus optional biases on Q, K, V (blk.N.attn_{q,k,v}.bias) and
#           on the head (output.bias); RoPE on the halves (i, i + rope_dim/2),
#           "NeoX" style; head_dim * n_heads must equal dim.
#   qwen3   llama plus a per-head RMSNorm of Q and K (blk.N.attn_{q,k}_norm,
#           [head_dim]) before RoPE; NeoX RoPE; head_dim from
#           attention.key_length may differ from dim / n_heads.
#   gemma3  the embeddings scaled by sqrt(dim); Q/K norms as qwen3; the
#           attention and FFN outputs each RMS-normed again
#           (blk.N.post_attention_norm, blk.N.post_ffw_norm) before their
#           residual add; a GELU (tanh form)-gated FFN; NeoX RoPE. With
#           attention.sliding_window = W > 0, layers are sliding-window
#           ("local") layers except every 6th (5, 11, ...; or as
#           attention.sliding_window_pattern says): a local layer's query at
#           position p sees only keys p-W+1..p, and its RoPE uses
#           rope.freq_base_swa (default 10000) and no scaling; the global
#           layers use rope.freq_base and rope.scaling. Scores are scaled by
#           1/sqrt(head_dim), except for the 62-layer (27B) model, which uses
#           1/sqrt(dim / n_heads). An optional final_logit_softcapping caps the
#           logits to cap * tanh(logits / cap). The head is tied to the
#           embeddings unless output.weight is present (as in every family).
#   qwen3moe  qwen3's attention, and in every layer a mixture of experts in
#           place of the FFN (below).
#   gpt-oss  NeoX RoPE with YaRN scaling (below) in every layer; biases on Q,
#           K, V (where present) and on the output projection
#           (blk.N.attn_output.bias); per query head a learned sink logit
#           (blk.N.attn_sinks.weight) that joins the softmax's denominator
#           and weighs no value; scores scaled by 1/sqrt(rope_dim); layers
#           slide as attention.sliding_window_pattern says, by default every
#           even one (period 2: layer i slides unless i % 2 == 1), keeping
#           the YaRN table (base rope.freq_base_swa, default rope.freq_base);
#           the FFN's input norm is blk.N.post_attention_norm; a mixture of
#           experts (expert_feed_forward_length wide) whose router and every
#           expert matrix add a bias (blk.N.ffn_*.bias, one row per expert),
#           routed by the expert_used_count largest logits softmaxed among
#           themselves, each expert's activation the clamped SwiGLU
#           g * sigmoid(1.702 g) * (u + 1), g = min(gate, 7), u = clamp(up, -7, 7).
#
# YaRN (rope.scaling.type "yarn", factor s, original context L =
# rope.scaling.original_context_length, default context_length): with d the
# rotated dims and base b, corr(beta) = d ln(L / (2 pi beta)) / (2 ln b),
# low = max(0, floor(corr(32))), high = min(d - 1, ceil(corr(1))) (the
# reference engine fixes beta 32 and 1); pair i keeps r = 1 - clamp((i - low)
# / max(0.001, high - low), 0, 1) of its trained frequency f and takes the
# rest from f / s: f (r + (1 - r) / s). Rotated values are also scaled by
# rope.scaling.attn_factor (default 1) * (1 + 0.1 ln s).
# Every family may carry Q/K/V biases: the reference engine reads them as
# optional tensors for all of them.
#
# A mixture of experts (llama with expert_count > 0, as Mixtral; qwen3moe):
# expert_count experts, each a SiLU-gated FFN (blk.N.ffn_{gate,up,down}_exps,
# stacked in one 3-D tensor each: (experts, out, in) in numpy order), and a
# router blk.N.ffn_gate_inp (experts, dim). Per token: softmax of the router's
# logits over all experts, the expert_used_count most probable (ties to the
# lower index), their probabilities renormalized to sum 1, and the output is
# the so weighted sum of those experts' FFNs. Llama's experts are
# feed_forward_length wide; qwen3moe's expert_feed_forward_length (default:
# feed_forward_length / expert_used_count). No shared expert in either.

ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss")


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
    rope_scaling: str          # "none", "linear", "llama3" or "yarn"
    rope_factor: float
    rope_low_freq_factor: float
    rope_high_freq_factor: float
    rope_original_context: int
    arch: str = "llama"
    rope_neox: bool = False    # rotate the pairs (i, i + rope_dim/2) instead of (2i, 2i+1)
    attn_scale: float = 0.0    # multiplies q.k; 0: 1/sqrt(head_dim)
    embed_scale: float = 1.0   # multiplies the token embeddings
    ffn_act: str = "silu"      # gate activation: "silu", "gelu_tanh" or "swiglu_oai"
    sliding_window: int = 0    # W: a sliding-window layer's query at p sees keys p-W+1..p; 0: none
    swa_layers: tuple = ()     # per layer, True for a sliding-window layer (empty: none)
    rope_theta_swa: float = 10000.0  # RoPE base of the sliding-window layers
    swa_rope_scaled: bool = False  # the sliding-window layers keep the model's RoPE scaling (gpt-oss; not gemma3)
    rope_attn_factor: float = 1.0  # yarn: multiplies its magnitude scaling
    sinks: bool = False        # per-head attention sinks (gpt-oss)
    moe_biases: bool = False   # the router and the experts' matrices add biases (gpt-oss)
    topk_softmax: bool = False  # route by the k largest logits softmaxed among themselves (gpt-oss)
    logit_softcap: float = 0.0  # logits -> cap * tanh(logits / cap); 0: off
    n_experts: int = 0         # a mixture of experts in every layer; 0: dense FFNs
    n_experts_used: int = 0
    expert_ffn_dim: int = 0


def read_field(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            sys.exit(f"{key}: missing from the GGUF metadata")
        return default
    return field.contents()


def swa_layers(reader, p, n_layers, period):
    """Which layers slide: attention.sliding_window_pattern holds either one
    flag per layer or a period n (default: the family's, 6 for gemma3 and 2
    for gpt-oss), where layer i slides unless i % n == n - 1 (so with 6 every
    6th layer, 5, 11, ..., is global; n = 0 makes every layer slide). Flags
    missing from a short list read as global."""
    pattern = read_field(reader, p + "attention.sliding_window_pattern", period)
    if isinstance(pattern, list):
        return tuple(bool(pattern[i]) if i < len(pattern) else False for i in range(n_layers))
    n = int(pattern)
    return tuple(n == 0 or i % n < n - 1 for i in range(n_layers))


def read_config(reader):
    arch = read_field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        sys.exit(f"general.architecture = {arch!r}: supported are {', '.join(ARCHITECTURES)}")
    p = arch + "."
    dim = int(read_field(reader, p + "embedding_length"))
    n_heads = int(read_field(reader, p + "attention.head_count"))
    n_layers = int(read_field(reader, p + "block_count"))
    head_dim = int(read_field(reader, p + "attention.key_length", dim // n_heads))
    # All four families use one head size for K and V.
    if int(read_field(reader, p + "attention.value_length", dim // n_heads)) != head_dim:
        sys.exit(f"{p}attention.value_length differs from the key length {head_dim}")
    rope_dim = int(read_field(reader, p + "rope.dimension_count", head_dim))
    if arch in ("qwen2", "qwen3") and rope_dim != head_dim:
        sys.exit(f"{p}rope.dimension_count = {rope_dim}: {arch} rotates the whole head ({head_dim})")
    if arch == "qwen2" and head_dim * n_heads != dim:
        sys.exit(f"qwen2 needs head_dim * n_heads = dim, got {head_dim} * {n_heads} != {dim}")
    # The reference engine scales linearly when the type is absent; the factor
    # (old key: rope.scale_linear) then only matters if present.
    scaling = read_field(reader, p + "rope.scaling.type", "linear")
    # "llama3" is this file's own name for Llama 3.1 scaling computed without
    # a rope_freqs tensor; the reference engine knows none but none and linear.
    if scaling not in ("none", "linear", "llama3", "yarn") or (scaling == "llama3" and arch != "llama"):
        sys.exit(f"{p}rope.scaling.type = {scaling!r} is not supported for {arch}")
    factor = float(read_field(reader, p + "rope.scaling.factor", read_field(reader, p + "rope.scale_linear", 1.0)))
    config = Config(
        n_layers=n_layers,
        dim=dim,
        ffn_dim=int(read_field(reader, p + "feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=int(read_field(reader, p + "attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        # The vocab key is optional; the embedding's row count is authoritative.
        vocab_size=0,
        rms_eps=float(read_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(read_field(reader, p + "rope.freq_base", 10000.0)),
        rope_dim=rope_dim,
        rope_scaling=scaling,
        rope_factor=factor if factor != 0.0 else 1.0,
        rope_low_freq_factor=float(read_field(reader, p + "rope.scaling.low_freq_factor", 1.0)),
        rope_high_freq_factor=float(read_field(reader, p + "rope.scaling.high_freq_factor", 4.0)),
        rope_original_context=int(read_field(reader, p + "rope.scaling.original_context_length",
                                             int(read_field(reader, p + "context_length")) if scaling == "yarn" else 8192)),
        rope_attn_factor=float(read_field(reader, p + "rope.scaling.attn_factor", 1.0)),
        arch=arch,
        rope_neox=arch != "llama",
    )
    config.n_experts = int(read_field(reader, p + "expert_count", 0))
    if arch in ("qwen3moe", "gpt-oss") and config.n_experts <= 0:
        sys.exit(f"{p}expert_count must be positive")
    if config.n_experts > 0:
        config.n_experts_used = int(read_field(reader, p + "expert_used_count"))
        config.expert_ffn_dim = config.ffn_dim if arch == "llama" else int(
            read_field(reader, p + "expert_feed_forward_length",
                       None if arch == "gpt-oss" else config.ffn_dim // config.n_experts_used))
    if arch == "gemma3":
        config.embed_scale = math.sqrt(dim)
        config.ffn_act = "gelu_tanh"
        # Gemma's query_pre_attn_scalar: dim / n_heads for the 27B model (62
        # layers, which the reference engine recognises by its layer count),
        # head_dim for the others.
        config.attn_scale = 1.0 / math.sqrt(dim // n_heads if n_layers == 62 else head_dim)
        config.logit_softcap = float(read_field(reader, p + "final_logit_softcapping", 0.0))
        config.sliding_window = int(read_field(reader, p + "attention.sliding_window", 0))
        if config.sliding_window > 0:
            config.swa_layers = swa_layers(reader, p, n_layers, 6)
            config.rope_theta_swa = float(read_field(reader, p + "rope.freq_base_swa", 10000.0))
    if arch == "gpt-oss":
        config.attn_scale = 1.0 / math.sqrt(rope_dim)
        config.ffn_act = "swiglu_oai"
        config.sinks = config.moe_biases = config.topk_softmax = True
        config.sliding_window = int(read_field(reader, p + "attention.sliding_window"))
        config.swa_layers = swa_layers(reader, p, n_layers, 2)
        config.rope_theta_swa = float(read_field(reader, p + "rope.freq_base_swa", config.rope_theta))
        config.swa_rope_scaled = True
    return config


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
    """The float16 min m of every 32-block (w = d * q + m) of a Q4_1/Q5_1 matrix, or stack of matrices:
    shape[:-1] + (cols / 32,)."""
    block_bytes = BLOCK_MIN_BYTES[tensor_type]
    blocks = np.ascontiguousarray(raw).reshape(math.prod(shape[:-1]), -1, block_bytes)
    mins = np.ascontiguousarray(blocks[:, :, 2:4]).view(np.float16)[:, :, 0].astype(np.float64)
    return mins.reshape(shape[:-1] + (-1,))


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
    w_gate: Matrix  # (ffn_dim, dim); None in a mixture of experts
    w_up: Matrix
    w_down: Matrix  # (dim, ffn_dim)
    router: Matrix = None  # (n_experts, dim): a mixture of experts
    experts: list = None   # per expert, its (gate, up, down) Matrix triple
    router_bias: np.ndarray = None  # (n_experts,): gpt-oss
    expert_biases: list = None      # per expert, its (gate, up, down) bias triple: gpt-oss
    bo: np.ndarray = None  # (dim,): gpt-oss
    sinks: np.ndarray = None  # (n_heads,): gpt-oss
    bq: np.ndarray = None  # (n_heads*head_dim,), optional in every family
    bk: np.ndarray = None  # (n_kv_heads*head_dim,)
    bv: np.ndarray = None
    q_norm: np.ndarray = None  # (head_dim,): qwen3, gemma3
    k_norm: np.ndarray = None
    post_attn_norm: np.ndarray = None  # (dim,): gemma3
    post_ffn_norm: np.ndarray = None
    sliding: bool = False  # a sliding-window layer (gemma3)


@dataclass(frozen=True)
class Arithmetic:
    """Which rounding of a real engine the forward pass models (exact float64 by default)."""
    act_q8: bool = False  # 8-bit activations into every matrix product
    kv_f16: bool = False  # float16 KV cache
    gelu_f16: bool = False  # GELU through a float16 table


class Model:
    def __init__(self, path, arithmetic=Arithmetic()):
        reader = GGUFReader(path)
        self.config = c = read_config(reader)
        self.arithmetic = arithmetic
        t, types, mins = load_tensors(reader)
        used = set()  # every tensor must be modelled: an ignored one would make a wrong oracle

        def get(name, shape):
            used.add(name)
            return expect_shape(t, name, shape)

        def optional(name, shape):
            return get(name, shape) if name in t else None

        def matrix(name, shape):
            return Matrix(get(name, shape), types[name], mins.get(name))

        def expert_matrices(name, shape):
            """The matrices of a (n_experts,) + shape stack, one per expert."""
            stack, block_min = get(name, (c.n_experts,) + shape), mins.get(name)
            return [Matrix(stack[e], types[name], None if block_min is None else block_min[e])
                    for e in range(c.n_experts)]

        def experts(b):
            gates = expert_matrices(b + "ffn_gate_exps.weight", (c.expert_ffn_dim, c.dim))
            ups = expert_matrices(b + "ffn_up_exps.weight", (c.expert_ffn_dim, c.dim))
            downs = expert_matrices(b + "ffn_down_exps.weight", (c.dim, c.expert_ffn_dim))
            return list(zip(gates, ups, downs))

        def expert_biases(b):
            """Each expert's (gate, up, down) biases: rows of (n_experts, width) tensors."""
            gates = get(b + "ffn_gate_exps.bias", (c.n_experts, c.expert_ffn_dim))
            ups = get(b + "ffn_up_exps.bias", (c.n_experts, c.expert_ffn_dim))
            downs = get(b + "ffn_down_exps.bias", (c.n_experts, c.dim))
            return list(zip(gates, ups, downs))

        self.token_embd = t.get("token_embd.weight")
        if self.token_embd is None or self.token_embd.ndim != 2 or self.token_embd.shape[1] != c.dim:
            sys.exit("tensor token_embd.weight is missing or not (vocab, dim)")
        used.add("token_embd.weight")
        c.vocab_size = self.token_embd.shape[0]
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        qk_norms = c.arch in ("qwen3", "qwen3moe", "gemma3")
        post_norms = c.arch == "gemma3"
        moe = c.n_experts > 0
        self.min_route_margin = math.inf  # see route()
        # Per mixture-of-experts layer, how many tokens chose each expert so far.
        self.route_counts = {}
        # What-ifs for tests that show a check can fail: the forward pass without
        # the attention sinks, or with every sliding-window layer attending to all.
        self.ignore_sinks = False
        self.ignore_window = False
        self.layers = []
        for i in range(c.n_layers):
            b = f"blk.{i}."
            self.layers.append(Layer(
                attn_norm=get(b + "attn_norm.weight", (c.dim,)),
                wq=matrix(b + "attn_q.weight", (q_dim, c.dim)),
                wk=matrix(b + "attn_k.weight", (kv_dim, c.dim)),
                wv=matrix(b + "attn_v.weight", (kv_dim, c.dim)),
                wo=matrix(b + "attn_output.weight", (c.dim, q_dim)),
                # gpt-oss stores the FFN's input norm under the post-attention name.
                ffn_norm=get(b + ("post_attention_norm.weight" if c.arch == "gpt-oss" else "ffn_norm.weight"), (c.dim,)),
                w_gate=None if moe else matrix(b + "ffn_gate.weight", (c.ffn_dim, c.dim)),
                w_up=None if moe else matrix(b + "ffn_up.weight", (c.ffn_dim, c.dim)),
                w_down=None if moe else matrix(b + "ffn_down.weight", (c.dim, c.ffn_dim)),
                router=matrix(b + "ffn_gate_inp.weight", (c.n_experts, c.dim)) if moe else None,
                experts=experts(b) if moe else None,
                router_bias=get(b + "ffn_gate_inp.bias", (c.n_experts,)) if c.moe_biases else None,
                expert_biases=expert_biases(b) if c.moe_biases else None,
                bo=get(b + "attn_output.bias", (c.dim,)) if c.arch == "gpt-oss" else None,
                sinks=get(b + "attn_sinks.weight", (c.n_heads,)) if c.sinks else None,
                bq=optional(b + "attn_q.bias", (q_dim,)),
                bk=optional(b + "attn_k.bias", (kv_dim,)),
                bv=optional(b + "attn_v.bias", (kv_dim,)),
                q_norm=get(b + "attn_q_norm.weight", (c.head_dim,)) if qk_norms else None,
                k_norm=get(b + "attn_k_norm.weight", (c.head_dim,)) if qk_norms else None,
                post_attn_norm=get(b + "post_attention_norm.weight", (c.dim,)) if post_norms else None,
                post_ffn_norm=get(b + "post_ffw_norm.weight", (c.dim,)) if post_norms else None,
                sliding=bool(c.swa_layers) and c.swa_layers[i],
            ))
        self.output_norm = get("output_norm.weight", (c.dim,))
        # Tied embeddings: without output.weight the head reuses token_embd.
        if "output.weight" in t:
            self.output = matrix("output.weight", (c.vocab_size, c.dim))
        else:
            self.output = Matrix(self.token_embd, types["token_embd.weight"], mins.get("token_embd.weight"))
        # Only qwen2 reads a bias of the head.
        self.output_bias = optional("output.bias", (c.vocab_size,)) if c.arch == "qwen2" else None
        # Llama 3.1 frequency factors: only the llama family applies them.
        rope_freqs = optional("rope_freqs.weight", (c.rope_dim // 2,)) if c.arch == "llama" else None
        self.inv_freq = rope_frequencies(c, rope_freqs)
        # Sliding-window layers rotate with their own base and without the Llama 3.1 factors;
        # gemma3's without scaling at all, gpt-oss's with the model's YaRN.
        self.inv_freq_swa = rope_frequencies(c, None, theta=c.rope_theta_swa, scaling=c.swa_rope_scaled)
        self.rope_magnitude = yarn_magnitude(c)
        unused = sorted(set(t) - used)
        if unused:
            sys.exit(f"{c.arch}: tensors this reference does not model: {', '.join(unused)}")


# ----------------------------------------------------------------------------
# RoPE


def rope_frequencies(c, rope_freqs, theta=None, scaling=True):
    """Angular frequency of each rotated pair i: theta_i = base^(-2i/rope_dim),
    divided by Llama 3.1 factors (from the rope_freqs tensor, else computed,
    unless not `scaling`). `theta` overrides the base (sliding-window layers)."""
    base = c.rope_theta if theta is None else theta
    i = np.arange(c.rope_dim // 2, dtype=np.float64)
    freq = base ** (-2.0 * i / c.rope_dim)
    if rope_freqs is not None:
        if rope_freqs.shape != (c.rope_dim // 2,):
            sys.exit(f"tensor rope_freqs.weight: shape {rope_freqs.shape}, expected ({c.rope_dim // 2},)")
        return freq / rope_freqs
    if scaling and c.rope_scaling == "llama3":
        return freq / llama3_factors(c, freq)
    if scaling and c.rope_scaling == "yarn":
        return freq * yarn_keep_share(c, base, i)
    return freq


def yarn_keep_share(c, base, i):
    """YaRN's factor on pair i's frequency: r + (1 - r) / factor, r the share kept as trained."""
    def corr(beta):
        return c.rope_dim * math.log(c.rope_original_context / (2 * math.pi * beta)) / (2 * math.log(base))
    low, high = max(0.0, math.floor(corr(32.0))), min(c.rope_dim - 1.0, math.ceil(corr(1.0)))
    keep = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    return keep + (1.0 - keep) / c.rope_factor


def yarn_magnitude(c):
    """What YaRN multiplies the rotated values by (1 without YaRN)."""
    if c.rope_scaling != "yarn":
        return 1.0
    return c.rope_attn_factor * (1.0 + 0.1 * math.log(c.rope_factor) if c.rope_factor > 1.0 else 1.0)


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


def apply_rope(x, positions, inv_freq, c, linear_scaling=True, magnitude=1.0):
    """Rotates pairs of each head by pos * theta_i; x is (n_tokens, n_heads, head_dim).
    Pair i is (2i, 2i+1) for llama and (i, i + rope_dim/2) for the NeoX style
    of the other families; dimensions past rope_dim are left untouched.
    Linear scaling divides the positions by the factor, unless not
    `linear_scaling` (gemma3's sliding-window layers). The rotated values are
    multiplied by `magnitude` (YaRN's)."""
    pos = positions.astype(np.float64)
    if linear_scaling and c.rope_scaling == "linear":
        pos = pos / c.rope_factor
    angle = pos[:, None] * inv_freq[None, :]          # (n_tokens, rope_dim/2)
    cos, sin = magnitude * np.cos(angle)[:, None, :], magnitude * np.sin(angle)[:, None, :]
    half = c.rope_dim // 2
    first = slice(0, half) if c.rope_neox else slice(0, c.rope_dim, 2)
    second = slice(half, c.rope_dim) if c.rope_neox else slice(1, c.rope_dim, 2)
    out = x.copy()
    a, b = x[..., first], x[..., second]
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
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


def linear(x, m, arithmetic, n_pass=None):
    """x (n_tokens, in) times matrix m: (n_tokens, out). n_pass: the tokens of
    the pass x is taken from (an expert's share of it), which picks the
    activation format; default all of x."""
    if not arithmetic.act_q8:
        return x @ m.w.T
    fmt = activation_format(m.stored_type, x.shape[0] if n_pass is None else n_pass)
    x = quantize_activations(x, fmt)
    y = x @ m.w.T
    if fmt is not None and fmt.fp16_sum:
        sums = x.reshape(x.shape[0], -1, fmt.block).sum(axis=-1)
        y += (sums.astype(np.float16).astype(np.float64) - sums) @ m.block_min.T
    return y


# ----------------------------------------------------------------------------
# Forward pass


def rmsnorm(x, weight, eps):
    """Normalizes over the last axis: a row of x, or one head of Q or K (q/k norms)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """GELU in its tanh form, as Gemma is trained with (not the erf form)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_tanh_f16(x):
    """gelu_tanh as a 65536-entry float16 table gives it (--gelu-f16): looked
    up at the float16 nearest x and rounded to float16; past |x| >= 10 the
    table is bypassed (0 below, x above)."""
    table = gelu_tanh(x.astype(np.float16).astype(np.float64)).astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, table))


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


def projection(x, m, bias, arithmetic):
    """linear() plus an optional bias."""
    y = linear(x, m, arithmetic)
    return y if bias is None else y + bias


def attention(x, layer, li, positions, cache, model):
    """GQA causal self-attention of the new tokens x (n_new, dim) over the cache."""
    c, a = model.config, model.arithmetic
    n = x.shape[0]
    q = projection(x, layer.wq, layer.bq, a).reshape(n, c.n_heads, c.head_dim)
    k = projection(x, layer.wk, layer.bk, a).reshape(n, c.n_kv_heads, c.head_dim)
    v = projection(x, layer.wv, layer.bv, a).reshape(n, c.n_kv_heads, c.head_dim)
    if layer.q_norm is not None:                      # per head, before RoPE
        q = rmsnorm(q, layer.q_norm, c.rms_eps)
        k = rmsnorm(k, layer.k_norm, c.rms_eps)
    inv_freq = model.inv_freq_swa if layer.sliding else model.inv_freq
    linear_scaling = c.swa_rope_scaled or not layer.sliding
    q = apply_rope(q, positions, inv_freq, c, linear_scaling, model.rope_magnitude)
    k = apply_rope(k, positions, inv_freq, c, linear_scaling, model.rope_magnitude)
    if a.kv_f16:
        k, v = (t.astype(np.float16).astype(np.float64) for t in (k, v))
    keys, values = cache.append(li, k, v)            # (n_pos, n_kv_heads, head_dim)

    group = c.n_heads // c.n_kv_heads                 # query heads sharing one KV head
    keys = np.repeat(keys, group, axis=1)
    values = np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, keys)
    scores = scores * c.attn_scale if c.attn_scale else scores / math.sqrt(c.head_dim)
    key_pos = np.arange(keys.shape[0])[None, :]
    query_pos = positions[:, None]
    visible = key_pos <= query_pos                    # causal
    if layer.sliding and not model.ignore_window:     # and only the last sliding_window positions
        visible &= query_pos - key_pos < c.sliding_window
    scores = np.where(visible[None, :, :], scores, -np.inf)
    if layer.sinks is not None and not model.ignore_sinks:
        # The sink joins each head's softmax as one more logit, and its weight is dropped.
        sink = np.broadcast_to(layer.sinks[:, None, None], (c.n_heads, n, 1))
        weights = softmax(np.concatenate([scores, sink], axis=-1))[..., :-1]
    else:
        weights = softmax(scores)
    out = np.einsum("hqk,khd->qhd", weights, values).reshape(n, c.n_heads * c.head_dim)
    return projection(out, layer.wo, layer.bo, a)


def swiglu_oai(gate, up):
    """gpt-oss's clamped SwiGLU: g * sigmoid(1.702 g) * (u + 1), g = min(gate, 7), u = clamp(up, -7, 7)."""
    g = np.minimum(gate, 7.0)
    return g / (1.0 + np.exp(-1.702 * g)) * (np.clip(up, -7.0, 7.0) + 1.0)


def gated_ffn(x, gate, up, down, arithmetic, act=silu, n_pass=None, biases=(None, None, None)):
    """down(act(gate x) * up x), each product plus its bias where given; act
    takes (gate, up) when it is swiglu_oai, else gate alone."""
    g, u = (linear(x, m, arithmetic, n_pass) for m in (gate, up))
    if biases[0] is not None:
        g, u = g + biases[0], u + biases[1]
    hidden = swiglu_oai(g, u) if act is swiglu_oai else act(g) * u
    y = linear(hidden, down, arithmetic, n_pass)
    return y if biases[2] is None else y + biases[2]


def feed_forward(x, layer, arithmetic, act=silu):
    return gated_ffn(x, layer.w_gate, layer.w_up, layer.w_down, arithmetic, act)


def route(logits, k, topk_softmax=False):
    """One token's experts and weights: the k largest logits (a stable sort:
    ties go to the lower index), weighted by softmax(logits) renormalized over
    them, or with topk_softmax by the softmax of their logits alone (the two
    agree; they are computed as the engines do); and the margin of that
    choice, the k-th largest logit less the next."""
    order = np.argsort(-logits, kind="stable")
    chosen = order[:k]
    margin = logits[order[k - 1]] - logits[order[k]] if k < len(logits) else math.inf
    if topk_softmax:
        return chosen, softmax(logits[chosen]), margin
    probs = softmax(logits)
    return chosen, probs[chosen] / probs[chosen].sum(), margin


def moe_feed_forward(x, layer, model, act=silu):
    """The mixture of experts on x (n_tokens, dim); records the smallest routing
    margin in model.min_route_margin and each layer's choices in model.route_counts."""
    c, a = model.config, model.arithmetic
    n = x.shape[0]
    weight = np.zeros((n, c.n_experts))  # each token's weight per expert, 0 where not chosen
    layer_index = next(i for i, other in enumerate(model.layers) if other is layer)
    router_logits = linear(x, layer.router, a)
    if layer.router_bias is not None:
        router_logits = router_logits + layer.router_bias
    for t, logits in enumerate(router_logits):
        chosen, weights, margin = route(logits, c.n_experts_used, c.topk_softmax)
        weight[t, chosen] = weights
        model.route_counts.setdefault(layer_index, np.zeros(c.n_experts, dtype=np.int64))[chosen] += 1
        model.min_route_margin = min(model.min_route_margin, margin)
    out = np.zeros_like(x)
    for e, (gate, up, down) in enumerate(layer.experts):
        rows = np.flatnonzero(weight[:, e])
        if len(rows):
            # Rounded as in a pass of n tokens: an engine's expert kernels are those of the pass.
            biases = layer.expert_biases[e] if layer.expert_biases is not None else (None, None, None)
            out[rows] += weight[rows, e, None] * gated_ffn(x[rows], gate, up, down, a, act, n_pass=n, biases=biases)
    return out


ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh, "swiglu_oai": swiglu_oai}


def forward(model, tokens, start_pos, cache, on_layer=None):
    """Logits (n_tokens, vocab) for tokens placed at positions start_pos, start_pos+1, ...
    on_layer(layer index, its input, its output) sees the hidden states (n_tokens, dim)."""
    c = model.config
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.min() < 0 or tokens.max() >= c.vocab_size:
        sys.exit(f"token ids must lie in [0, {c.vocab_size})")
    positions = np.arange(start_pos, start_pos + len(tokens))
    act = ACTIVATIONS[c.ffn_act]
    if act is gelu_tanh and model.arithmetic.gelu_f16:
        act = gelu_tanh_f16
    x = model.token_embd[tokens] * c.embed_scale
    for li, layer in enumerate(model.layers):
        x_in = x
        h = attention(rmsnorm(x, layer.attn_norm, c.rms_eps), layer, li, positions, cache, model)
        if layer.post_attn_norm is not None:          # gemma3 norms each branch's output too
            h = rmsnorm(h, layer.post_attn_norm, c.rms_eps)
        x = x + h
        normed = rmsnorm(x, layer.ffn_norm, c.rms_eps)
        if layer.experts is not None:
            h = moe_feed_forward(normed, layer, model, act)
        else:
            h = feed_forward(normed, layer, model.arithmetic, act)
        if layer.post_ffn_norm is not None:
            h = rmsnorm(h, layer.post_ffn_norm, c.rms_eps)
        x = x + h
        if on_layer:
            on_layer(li, x_in, x)
    logits = projection(rmsnorm(x, model.output_norm, c.rms_eps), model.output, model.output_bias,
                        model.arithmetic)
    if c.logit_softcap:
        logits = c.logit_softcap * np.tanh(logits / c.logit_softcap)
    return logits


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
    parser.add_argument("model", help="GGUF file of a llama, qwen2, qwen3, qwen3moe, gemma3 or gpt-oss model")
    parser.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    parser.add_argument("--out", required=True, help="where to write the float64 logits (.npy)")
    parser.add_argument("--greedy", type=int, default=0, help="greedy tokens to generate after the prompt")
    parser.add_argument("--step", action="store_true", help="feed the prompt one token per forward pass")
    parser.add_argument("--act-q8", action="store_true",
                        help="round matrix-product inputs to 8-bit blocks like 8-bit-activation CPU engines")
    parser.add_argument("--kv-f16", action="store_true", help="keep attention keys and values in float16")
    parser.add_argument("--gelu-f16", action="store_true", help="evaluate GELU through a float16 table")
    args = parser.parse_args()

    prompt = [int(s) for s in args.tokens.split(",") if s.strip()]
    if not prompt:
        sys.exit("--tokens: need at least one token id")
    model = Model(args.model, Arithmetic(act_q8=args.act_q8, kv_f16=args.kv_f16, gelu_f16=args.gelu_f16))
    logits, generated = generate(model, prompt, args.greedy, step=args.step)
    np.save(args.out, logits)
    if args.greedy:
        print(" ".join(str(t) for t in generated))


if __name__ == "__main__":
    main()
