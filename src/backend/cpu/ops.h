// Element-wise and row-wise ops of the transformer forward pass (f32).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels.h"
#include "model/arch/model_spec.h"

namespace nt::cpu {

// y = x / sqrt(mean(x^2) + eps) * weight; y may alias x.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps,
             const Kernels& k = kernels());

// The heads RoPE turns: the first rope_dim of each head's head_dim values,
// paired as `style` says.
struct RopeHeads {
  int head_dim = 0;
  int rope_dim = 0;
  RopeStyle style = RopeStyle::AdjacentPairs;
  float magnitude = 1.0f;  // the turned pairs are also scaled by it (rope_magnitude: YaRN)
};

// Rotary embedding: pair i of every head (x[2i], x[2i+1] for adjacent pairs,
// x[i], x[i + rope_dim/2] for halves) turns by the angle pos * freq[i],
// i < rope_dim / 2; the values past rope_dim stay. The caller's freq table
// carries any frequency scaling (e.g. Llama 3.1, YaRN).
void rope(float* x, int n_heads, const RopeHeads& heads, int64_t pos, const float* freq);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); out may alias either input.
void swiglu(const float* gate, const float* up, float* out, int64_t n, const Kernels& k = kernels());

// out = gelu(gate) * up with gelu's tanh approximation; out may alias either input.
void geglu(const float* gate, const float* up, float* out, int64_t n);

// out = g * sigmoid(1.702 g) * (u + 1) with g = min(gate, 7), u = clamp(up, -7, 7)
// (gpt-oss's clamped SwiGLU); out may alias either input.
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);

// out = act(gate) * up for the layer's gated-FFN activation; out may alias either input.
void gated_activation(FfnActivation act, const float* gate, const float* up, float* out, int64_t n);

// In-place softmax over n values.
void softmax(float* x, int64_t n, const Kernels& k = kernels());

// y += x (residual connections).
void add_inplace(float* y, const float* x, int64_t n);

// Each of n rows of `width` values (row t at rows + t * width) += bias.
void add_bias_rows(float* rows, const float* bias, int64_t n, int64_t width);

}  // namespace nt::cpu
