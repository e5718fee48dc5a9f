// Causal attention over the f16 KV cache, for decode (one token) and prefill
// (many): flash-style online softmax over tiles of keys, any context length.
// The key range is split over several blocks when the query tiles alone
// would not fill the GPU; a second kernel merges the splits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nt {

struct AttentionParams {
  const float* q = nullptr;          // token t, head h at q + t*q_stride + h*head_dim (RoPE applied)
  int64_t q_stride = 0;
  const uint16_t* k_cache = nullptr; // this layer: [n_kv_heads][context][head_dim] f16
  const uint16_t* v_cache = nullptr;
  int64_t context = 0;
  float* out = nullptr;              // token t, head h at out + t*out_stride + h*head_dim
  int64_t out_stride = 0;
  const int32_t* pos = nullptr;      // device: position of token 0; token t sees keys 0..pos+t
  int64_t n_tokens = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int n_splits = 1;                  // key-range splits; > 1 needs `partials`
  float* partials = nullptr;         // attention_partials_floats() floats
};

// Splits that fill the GPU for n_tokens queries when up to max_keys keys are visible.
int attention_splits(int64_t n_tokens, int n_heads, int n_kv_heads, int head_dim, int64_t max_keys, int multiprocessors);

size_t attention_partials_floats(int64_t n_tokens, int n_heads, int head_dim, int n_splits);

void attention(const AttentionParams& p, cudaStream_t stream);

}  // namespace nt
