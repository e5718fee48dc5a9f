// Llama hyperparameters, read from GGUF metadata under the architecture prefix
// ("llama.block_count", ...), with the defaults the format specifies.
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_file.h"

namespace nt {

struct RopeScaling {
  enum class Kind { None, Linear, Llama3 } kind = Kind::None;
  float factor = 1.0f;             // linear: positions divided by factor
  float low_freq_factor = 1.0f;    // llama3
  float high_freq_factor = 4.0f;   // llama3
  int64_t original_context = 8192; // llama3
};

struct LlamaConfig {
  std::string architecture;     // "llama"
  int64_t n_layers = 0;
  int64_t dim = 0;              // embedding width
  int64_t ffn_dim = 0;          // SwiGLU hidden width
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;       // GQA: n_heads is a multiple of it
  int64_t head_dim = 0;         // attention.key_length, else dim / n_heads
  int64_t vocab_size = 0;
  int64_t context_length = 0;   // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int64_t rope_dim = 0;         // rotated dims per head (rope.dimension_count)
  RopeScaling rope_scaling;
  bool has_rope_freqs_tensor = false;  // Llama 3.1 "rope_freqs.weight" factors
  bool tied_embeddings = false;        // no output.weight: the head reuses token_embd

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the config; errors name the key and the file.
LlamaConfig read_llama_config(const GgufHeader& header, const std::string& source);

}  // namespace nt
