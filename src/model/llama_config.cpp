#include "model/llama_config.h"

#include "core/error.h"

namespace nt {

LlamaConfig read_llama_config(const GgufHeader& h, const std::string& source) {
  LlamaConfig c;
  try {
    c.architecture = h.get_string("general.architecture");
    if (c.architecture != "llama") {
      fail("architecture '{}' is not supported (only 'llama')", c.architecture);
    }
    const std::string p = c.architecture + ".";
    c.n_layers = h.get_int(p + "block_count");
    c.dim = h.get_int(p + "embedding_length");
    c.ffn_dim = h.get_int(p + "feed_forward_length");
    c.n_heads = h.get_int(p + "attention.head_count");
    c.n_kv_heads = h.get_int(p + "attention.head_count_kv", c.n_heads);
    c.head_dim = h.get_int(p + "attention.key_length", c.n_heads > 0 ? c.dim / c.n_heads : 0);
    c.context_length = h.get_int(p + "context_length");
    c.rms_eps = float(h.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
    c.rope_theta = float(h.get_float(p + "rope.freq_base", 10000.0));
    c.rope_dim = h.get_int(p + "rope.dimension_count", c.head_dim);

    const auto& embd = h.tensor("token_embd.weight");
    c.vocab_size = h.get_int(p + "vocab_size", embd.shape.size() == 2 ? embd.shape[1] : 0);
    c.tied_embeddings = h.find_tensor("output.weight") == nullptr;
    c.has_rope_freqs_tensor = h.find_tensor("rope_freqs.weight") != nullptr;

    const std::string scaling = h.get_string(p + "rope.scaling.type", std::string("none"));
    if (scaling == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::Linear;
      c.rope_scaling.factor = float(h.get_float(p + "rope.scaling.factor"));
    } else if (scaling == "llama3") {
      c.rope_scaling.kind = RopeScaling::Kind::Llama3;
      c.rope_scaling.factor = float(h.get_float(p + "rope.scaling.factor"));
      c.rope_scaling.low_freq_factor = float(h.get_float(p + "rope.scaling.low_freq_factor", 1.0));
      c.rope_scaling.high_freq_factor = float(h.get_float(p + "rope.scaling.high_freq_factor", 4.0));
      c.rope_scaling.original_context = h.get_int(p + "rope.scaling.original_context_length", 8192);
    } else if (scaling != "none") {
      fail("metadata '{}rope.scaling.type' = '{}' is not supported (none, linear, llama3)", p, scaling);
    }
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }

  auto require = [&](bool ok, std::string_view what) {
    if (!ok) fail("{}: inconsistent hyperparameters: {}", source, what);
  };
  require(c.n_layers > 0 && c.dim > 0 && c.ffn_dim > 0, "block_count, embedding_length and feed_forward_length must be positive");
  require(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
          "attention.head_count must be a positive multiple of attention.head_count_kv");
  require(c.head_dim > 0 && c.head_dim % 2 == 0, "head dimension must be positive and even");
  require(c.rope_dim > 0 && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0, "rope.dimension_count must be even and at most the head dimension");
  require(c.vocab_size > 0, "vocabulary size must be positive");
  require(c.context_length > 0, "context_length must be positive");
  return c;
}

}  // namespace nt
