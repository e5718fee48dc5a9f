"""make-model: every preset at every type has the published architecture's exact
tensor shapes (numbers from the models' own config.json files), and the small
presets are written, read back by gguf-py, and hold finite, well-scaled weights."""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import gguf

BIN = Path(os.environ.get("NT_BUILD_DIR", "build")) / "src" / "ntransformer"

# Published hyperparameters: layers, hidden, intermediate, heads, kv heads, vocab, tied embeddings,
# and for the families beside Llama the head width and the extra tensors of each layer.
# MIXTURES: each mixture of experts' architecture, experts, experts used and expert width
# (config.json's num_local_experts / num_experts, num_experts_per_tok, and Mixtral's
# intermediate_size or Qwen3-MoE's moe_intermediate_size; gpt-oss's num_local_experts,
# experts_per_token and intermediate_size). gpt-oss's extras are its biases, sinks and
# the FFN norm named post_attention_norm.
ARCHITECTURES = {
    "smollm2-135m": (30, 576, 1536, 9, 3, 49152, True),
    "llama3-1b": (16, 2048, 8192, 32, 8, 128256, True),
    "llama3-8b": (32, 4096, 14336, 32, 8, 128256, False),
    "llama3-70b": (80, 8192, 28672, 64, 8, 128256, False),
    "llama3-405b": (126, 16384, 53248, 128, 8, 128256, False),
    "tiny": (4, 256, 768, 8, 4, 4096, True),
    "qwen2.5-7b": (28, 3584, 18944, 28, 4, 152064, False, 128, {"qkv_bias"}),
    "qwen3-8b": (36, 4096, 12288, 32, 8, 151936, False, 128, {"qk_norm"}),
    "qwen3-32b": (64, 5120, 25600, 64, 8, 151936, False, 128, {"qk_norm"}),
    "gemma3-27b": (62, 5376, 21504, 32, 16, 262208, True, 128, {"qk_norm", "post_norms"}),
    "tiny-mixtral": (4, 256, 256, 8, 4, 4096, False),
    "tiny-qwen3moe": (4, 256, 768, 4, 2, 4096, False, 128, {"qk_norm"}),
    "mixtral-8x7b": (32, 4096, 14336, 32, 8, 32000, False),
    "qwen3-30b-a3b": (48, 2048, 6144, 32, 4, 151936, False, 128, {"qk_norm"}),
    "qwen3-235b-a22b": (94, 4096, 12288, 64, 4, 151936, False, 128, {"qk_norm"}),
    "tiny-gpt-oss": (4, 256, 256, 8, 2, 4096, False, 64, {"qkv_bias", "gpt_oss"}),
    "gpt-oss-20b": (24, 2880, 2880, 64, 8, 201088, False, 64, {"qkv_bias", "gpt_oss"}),
    "gpt-oss-120b": (36, 2880, 2880, 64, 8, 201088, False, 64, {"qkv_bias", "gpt_oss"}),
}
MIXTURES = {
    "tiny-mixtral": ("llama", 8, 2, 256),
    "tiny-qwen3moe": ("qwen3moe", 8, 2, 256),
    "mixtral-8x7b": ("llama", 8, 2, 14336),
    "qwen3-30b-a3b": ("qwen3moe", 128, 8, 768),
    "qwen3-235b-a22b": ("qwen3moe", 128, 8, 1536),
    "tiny-gpt-oss": ("gpt-oss", 8, 4, 256),
    "gpt-oss-20b": ("gpt-oss", 32, 4, 2880),
    "gpt-oss-120b": ("gpt-oss", 128, 4, 2880),
}
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
         "q4_k_m", "q5_k_m"]


def expected_shapes(preset):
    layers, dim, ffn, heads, kv_heads, vocab, tied, *family = ARCHITECTURES[preset]
    head_dim, extras = family if family else (dim // heads, set())
    shapes = {"token_embd.weight": (dim, vocab), "output_norm.weight": (dim,)}
    if not tied:
        shapes["output.weight"] = (dim, vocab)
    for i in range(layers):
        shapes.update({
            f"blk.{i}.attn_norm.weight": (dim,), f"blk.{i}.ffn_norm.weight": (dim,),
            f"blk.{i}.attn_q.weight": (dim, heads * head_dim), f"blk.{i}.attn_k.weight": (dim, kv_heads * head_dim),
            f"blk.{i}.attn_v.weight": (dim, kv_heads * head_dim), f"blk.{i}.attn_output.weight": (heads * head_dim, dim)})
        if preset in MIXTURES:
            _, experts, _, width = MIXTURES[preset]
            shapes.update({
                f"blk.{i}.ffn_gate_inp.weight": (dim, experts), f"blk.{i}.ffn_gate_exps.weight": (dim, width, experts),
                f"blk.{i}.ffn_up_exps.weight": (dim, width, experts),
                f"blk.{i}.ffn_down_exps.weight": (width, dim, experts)})
        else:
            shapes.update({f"blk.{i}.ffn_gate.weight": (dim, ffn), f"blk.{i}.ffn_up.weight": (dim, ffn),
                           f"blk.{i}.ffn_down.weight": (ffn, dim)})
        if "qkv_bias" in extras:
            shapes.update({f"blk.{i}.attn_q.bias": (heads * head_dim,), f"blk.{i}.attn_k.bias": (kv_heads * head_dim,),
                           f"blk.{i}.attn_v.bias": (kv_heads * head_dim,)})
        if "qk_norm" in extras:
            shapes.update({f"blk.{i}.attn_q_norm.weight": (head_dim,), f"blk.{i}.attn_k_norm.weight": (head_dim,)})
        if "gpt_oss" in extras:
            _, experts, _, width = MIXTURES[preset]
            shapes[f"blk.{i}.post_attention_norm.weight"] = shapes.pop(f"blk.{i}.ffn_norm.weight")
            shapes.update({
                f"blk.{i}.attn_sinks.weight": (heads,), f"blk.{i}.attn_output.bias": (dim,),
                f"blk.{i}.ffn_gate_inp.bias": (experts,), f"blk.{i}.ffn_gate_exps.bias": (width, experts),
                f"blk.{i}.ffn_up_exps.bias": (width, experts), f"blk.{i}.ffn_down_exps.bias": (dim, experts)})
        if "post_norms" in extras:
            shapes.update({f"blk.{i}.post_attention_norm.weight": (dim,), f"blk.{i}.post_ffw_norm.weight": (dim,)})
    if preset.startswith("llama3"):
        shapes["rope_freqs.weight"] = (head_dim // 2,)
    return shapes


def parse_directory(text):
    shapes, types = {}, {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+\.(?:weight|bias))\s+(\w+)\s+([\d x]+?)\s+(\d+)$", line)
        if m:
            shapes[m.group(1)] = tuple(int(d) for d in m.group(3).split(" x "))
            types[m.group(1)] = m.group(2)
    return shapes, types


@pytest.mark.parametrize("preset", list(ARCHITECTURES))
@pytest.mark.parametrize("qtype", TYPES)
def test_every_preset_and_type_has_exact_shapes(preset, qtype):
    out = subprocess.run([BIN, "make-model", "--preset", preset, "--type", qtype, "--out", "unused", "--dry-run"],
                         check=True, capture_output=True, text=True).stdout
    shapes, types = parse_directory(out)
    assert shapes == expected_shapes(preset)
    norms = [n for n in types if n.endswith("_norm.weight") or n.endswith(".bias") or n.endswith("_sinks.weight")]
    assert all(types[n] == "F32" for n in norms)
    if preset in MIXTURES and MIXTURES[preset][0] == "gpt-oss":  # its experts are MXFP4 in every file
        assert {types[n] for n in types if n.endswith("_exps.weight")} == {"MXFP4"}


@pytest.mark.parametrize("qtype", TYPES)
def test_tiny_written_and_read_by_gguf_py(tmp_path, qtype):
    path = tmp_path / f"tiny-{qtype}.gguf"
    subprocess.run([BIN, "make-model", "--preset", "tiny", "--type", qtype, "--out", path, "--seed", "7"],
                   check=True, capture_output=True)
    inspect = subprocess.run([BIN, "inspect", path], check=True, capture_output=True, text=True).stdout
    shapes, _ = parse_directory(inspect)
    assert shapes == expected_shapes("tiny")
    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    assert {n: tuple(int(d) for d in t.shape) for n, t in by_name.items()} == expected_shapes("tiny")
    q = gguf.quants.dequantize(by_name["blk.1.attn_q.weight"].data, by_name["blk.1.attn_q.weight"].tensor_type)
    assert np.isfinite(q).all()
    # Drawn with std 1/sqrt(dim); quantization changes that by a few percent at most (Q2_K: more).
    assert abs(q.std() * np.sqrt(256) - 1.0) < 0.25


@pytest.mark.parametrize("preset", ["tiny-mixtral", "tiny-qwen3moe", "tiny-gpt-oss"])
def test_mixtures_written_and_read_by_gguf_py(tmp_path, preset):
    """gguf-py reads the shapes, the expert keys, and a router left F32 by a quantized scheme."""
    path = tmp_path / f"{preset}.gguf"
    subprocess.run([BIN, "make-model", "--preset", preset, "--type", "q4_k_m", "--out", path, "--seed", "3"],
                   check=True, capture_output=True)
    reader = gguf.GGUFReader(str(path))
    assert {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors} == expected_shapes(preset)
    arch, experts, used, width = MIXTURES[preset]
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith(arch + ".")}
    assert reader.fields["general.architecture"].contents() == arch
    assert (fields[f"{arch}.expert_count"], fields[f"{arch}.expert_used_count"]) == (experts, used)
    assert fields.get(f"{arch}.expert_feed_forward_length", fields[f"{arch}.feed_forward_length"]) == width
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.ffn_gate_inp.weight"] == "F32"
    assert types["blk.0.ffn_up_exps.weight"] == ("MXFP4" if arch == "gpt-oss" else "Q4_K")


def router_logits(path):
    """The layer-0 router's logits (plus its bias, where it has one) over the embeddings of all
    tokens, from gguf-py's reading."""
    reader = gguf.GGUFReader(str(path))
    names = ("token_embd.weight", "blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_inp.bias")
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).reshape([int(d) for d in reversed(x.shape)])
         for x in reader.tensors if x.name in names}
    x = t["token_embd.weight"].astype(np.float64)
    x = x / np.sqrt((x * x).mean(axis=1, keepdims=True))
    return x @ t["blk.0.ffn_gate_inp.weight"].T + t.get("blk.0.ffn_gate_inp.bias", 0.0)


# Experts used, and the share of the picks expert 0 must exceed with --router-skew 3
# (uniform: 1/8; at most 1/used, when every token picks it).
SKEWED = {"tiny-qwen3moe": (2, 0.3), "tiny-gpt-oss": (4, 0.2)}


@pytest.mark.parametrize("preset", list(SKEWED))
def test_router_skew_favours_the_first_experts(tmp_path, preset):
    """Routed by the layer-0 router over the (normed) embeddings alone: without skew every expert
    is picked about equally; with --router-skew 3 expert 0 is picked most, and its share still
    depends on the token."""
    used, skewed_share = SKEWED[preset]
    shares = {}
    for skew in ("0", "3"):
        path = tmp_path / f"skew{skew}.gguf"
        subprocess.run([BIN, "make-model", "--preset", preset, "--type", "f32", "--out", path, "--seed", "5",
                        "--router-skew", skew], check=True, capture_output=True)
        top = np.argsort(-router_logits(path), axis=1, kind="stable")[:, :used]
        shares[skew] = np.bincount(top.ravel(), minlength=8) / top.size
    assert shares["0"].max() < 0.2  # 8 experts: 0.125 each
    assert shares["3"][0] > skewed_share and shares["3"][0] == shares["3"].max()
    assert shares["3"][0] < 1 / used  # not every token


def test_router_skew_needs_experts(tmp_path):
    r = subprocess.run([BIN, "make-model", "--preset", "tiny", "--type", "f32", "--out", tmp_path / "x.gguf",
                        "--router-skew", "1"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "--router-skew: preset 'tiny' has no mixture of experts" in r.stderr


def test_smollm2_preset_writes_and_generates(tmp_path):
    path = tmp_path / "smollm2.gguf"
    subprocess.run([BIN, "make-model", "--preset", "smollm2-135m", "--type", "q4_k_m", "--out", path],
                   check=True, capture_output=True)
    shapes, types = parse_directory(subprocess.run([BIN, "inspect", path], check=True, capture_output=True, text=True).stdout)
    assert shapes == expected_shapes("smollm2-135m")
    # 576 is not a multiple of 256: the K-quant falls back to the legacy type of about the same size.
    assert types["blk.0.attn_q.weight"] == "Q5_0"
    run = subprocess.run([BIN, "run", "-m", path, "-p", "hello", "-n", "8", "--temp", "0", "--raw"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "decode:" in run.stderr
