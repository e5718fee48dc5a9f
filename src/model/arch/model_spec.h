// A model as data: its dimensions, its RoPE tables and, per layer, the blocks
// in order. One builder per architecture (llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss) reads
// GGUF metadata into a spec; the backends interpret it instead of spelling
// out one architecture's layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace nt {

struct RopeScaling {
  enum class Kind { None, Linear, Llama3, Yarn } kind = Kind::None;
  float factor = 1.0f;             // linear: positions divided by factor
  float low_freq_factor = 1.0f;    // llama3
  float high_freq_factor = 4.0f;   // llama3
  int64_t original_context = 8192; // llama3, yarn (yarn's default: the trained context)
  float attn_factor = 1.0f;        // yarn: multiplies its magnitude scaling (rope.scaling.attn_factor)

  bool operator==(const RopeScaling&) const = default;
};

// One RoPE frequency table: the base and the scaling folded into it.
struct RopeSpec {
  float theta = 10000.0f;
  RopeScaling scaling;

  bool operator==(const RopeSpec&) const = default;
};

// Which dimensions of a head RoPE rotates together. GGUF's Llama tensors are
// permuted at conversion for adjacent pairs (2i, 2i+1); Qwen and Gemma keep
// the original layout, whose pairs are the two halves (i, i + rope_dim / 2).
enum class RopeStyle { AdjacentPairs, Halves };

enum class FfnActivation {
  Silu,       // SwiGLU: silu(gate) * up
  GeluTanh,   // GeGLU: gelu(gate) * up, gelu's tanh approximation
  SwigluOai,  // gpt-oss: g * sigmoid(1.702 g) * (u + 1), g = min(gate, 7), u = clamp(up, -7, 7)
};

struct AttentionSpec {
  bool qkv_bias = false;     // Q, K and V projections add a bias (Qwen2)
  bool output_bias = false;  // so does the output projection (gpt-oss)
  bool qk_norm = false;      // per-head RMSNorm of Q and K before RoPE (Qwen3, Gemma 3)
  // A learned logit per query head that joins each softmax's denominator and
  // weighs no value, so a head may attend to nothing (gpt-oss).
  bool sinks = false;
  int64_t window = 0;     // sliding window: a query sees its last `window` positions; 0 = all
  RopeSpec rope;          // this layer's table (Gemma 3's local layers differ)

  bool operator==(const AttentionSpec&) const = default;
};

// How a router's logits become the chosen experts' weights (ties always go
// to the lower expert index).
enum class ExpertGating {
  SoftmaxTopK,  // softmax over all experts, the k largest kept and renormalized to sum 1 (Mixtral, Qwen3-MoE)
  TopKSoftmax,  // the k largest logits, softmaxed among themselves (gpt-oss)
};

// A mixture-of-experts FFN in place of the dense one: per token, a router
// (one logit per expert) picks n_experts_used experts and their weights, and
// the output is the so weighted sum of those experts' gated FFNs (the
// layer's activation, expert_ffn_dim wide). No family here has a shared expert.
struct MoeSpec {
  int64_t n_experts = 0;       // 0: a dense FFN
  int64_t n_experts_used = 0;  // k of the top-k
  int64_t expert_ffn_dim = 0;  // each expert's hidden width
  ExpertGating gating = ExpertGating::SoftmaxTopK;
  bool biases = false;         // the router and every expert matrix add a bias (gpt-oss)

  bool operator==(const MoeSpec&) const = default;
};

// One decoder layer: x += post_attention_norm?(attention(norm(x))), then
// x += post_ffn_norm?(ffn(norm(x))), the FFN dense or a mixture of experts.
struct LayerSpec {
  AttentionSpec attention;
  bool post_attention_norm = false;  // Gemma: the block's output is normed before the residual add
  // gpt-oss stores the FFN's input norm as blk.N.post_attention_norm, not ffn_norm.
  bool ffn_norm_named_post_attention = false;
  FfnActivation activation = FfnActivation::Silu;
  bool post_ffn_norm = false;
  MoeSpec moe;

  bool has_experts() const { return moe.n_experts > 0; }
  bool slides() const { return attention.window > 0; }

  bool operator==(const LayerSpec&) const = default;
};

struct ModelSpec {
  std::string architecture;     // "llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss"
  int64_t n_layers = 0;
  int64_t dim = 0;              // embedding width
  int64_t ffn_dim = 0;          // gated FFN hidden width (feed_forward_length; Mixtral's experts' too)
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;       // GQA: n_heads is a multiple of it
  int64_t head_dim = 0;         // attention.key_length, else dim / n_heads
  int64_t vocab_size = 0;
  int64_t context_length = 0;   // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;  // the model's (global layers') RoPE table
  RopeScaling rope_scaling;
  int64_t rope_dim = 0;         // rotated dims per head (rope.dimension_count)
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  bool has_rope_freqs_tensor = false;  // Llama 3.1 "rope_freqs.weight" factors
  bool tied_embeddings = false;        // no output.weight: the head reuses token_embd
  float attention_scale = 0.0f;        // softmax scale of q.k; 1/sqrt(head_dim) unless the family says otherwise
  float embedding_scale = 1.0f;        // Gemma scales the embeddings by sqrt(dim)
  float final_logit_softcap = 0.0f;    // logits = cap * tanh(logits / cap) when positive
  std::vector<LayerSpec> layers;       // n_layers entries

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  RopeSpec rope() const { return {rope_theta, rope_scaling}; }
  // Every layer a plain Llama layer (what the CUDA tensor split runs so far).
  bool llama_layers() const;
  // Some layer's FFN is a mixture of experts.
  bool has_experts() const;
  bool has_sliding_layers() const;
  // The most experts, experts used and expert width of any layer: what
  // scratch for every layer's mixture holds.
  MoeSpec widest_experts() const;
};

// The blocks that differ from a Llama layer, in words, for `inspect`:
// "q/k norm, post norms, GeGLU, sliding window 1024 on 52 of 62 layers (rope theta 10000)".
std::string describe_layers(const ModelSpec& spec);

// A Llama layer: SwiGLU, no biases, no extra norms, the model's RoPE table.
LayerSpec llama_layer(const ModelSpec& spec);

// Reads and validates the spec, through the builder of general.architecture;
// errors name the key and the file, and an unsupported architecture lists
// the supported ones.
ModelSpec read_model_spec(const GgufHeader& header, const std::string& source);

// "qwen3.": the prefix of the file's architecture keys ("llama." when unnamed),
// for a key read before (or without) a whole spec.
std::string architecture_prefix(const GgufHeader& header);

// The architectures read_model_spec knows, in order.
std::vector<std::string> supported_architectures();

}  // namespace nt
