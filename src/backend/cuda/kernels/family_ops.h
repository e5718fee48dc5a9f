// The steps other families add to a Llama layer on the GPU (LayerSpec): Q,
// K and V prepared for the cache (bias, per-head RMSNorm, RoPE over halves),
// a norm on a block's output before the residual add, GeGLU, and the model's
// embedding scale and logit soft-cap. Llama layers launch none of them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/llama_ops.h"

namespace nt {

// What a layer does to Q, K and V between the projections and the cache
// (LayerSpec::attention, ModelSpec::rope_style), in the CPU's order: the
// biases added, each head of Q and K normed, then RoPE.
struct QkvPrep {
  const float* q_bias = nullptr;  // [q_dim]; the three set or none (Qwen2)
  const float* k_bias = nullptr;  // [kv_dim]
  const float* v_bias = nullptr;  // [kv_dim]
  const float* q_norm = nullptr;  // [head_dim]; both set or none (Qwen3, Gemma 3)
  const float* k_norm = nullptr;
  float eps = 0.0f;
  bool halves = false;  // RopeStyle::Halves: pairs (i, i + rope_pairs); else (2i, 2i + 1)
  float magnitude = 1.0f;  // the rotated pairs' scale besides turning (rope_magnitude: YaRN's)
};

// rope_and_store_kv with `prep`'s steps before RoPE: q prepared in place, k
// and v into the cache. One warp per (token, head).
void prepare_qkv_and_store(const RopeKvParams& p, const QkvPrep& prep, cudaStream_t stream);

// x[r] += y[r] / rms(y[r]) * weight for n_rows rows of dim: a block's output
// normed before the residual add (Gemma 3's post-attention and post-FFN norms).
void add_normed(const float* y, const float* weight, int64_t n_rows, int64_t dim, float eps, float* x, cudaStream_t stream);

// h[i] = gelu(gate[i]) * up[i] for i < n, gelu's tanh approximation.
void geglu(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream);

// gpt-oss's clamped SwiGLU for i < n: g * sigmoid(1.702 g) * (u + 1) with
// g = min(gate[i], 7) and u = up[i] clamped to [-7, 7].
void swiglu_oai(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream);

// rows[t] += bias for each of n rows of `width` (an output projection's or a router's bias).
void add_bias_rows(float* rows, const float* bias, int64_t n, int64_t width, cudaStream_t stream);

// x[i] *= scale for i < n (Gemma's embedding scale).
void scale_floats(float* x, int64_t n, float scale, cudaStream_t stream);

// x[i] = cap * tanh(x[i] / cap) for i < n (the final logits' soft-cap).
void soft_cap(float* x, int64_t n, float cap, cudaStream_t stream);

}  // namespace nt
