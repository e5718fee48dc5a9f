// Element-wise and row-wise ops of the transformer forward pass (f32).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels.h"

namespace nt::cpu {

// y = x / sqrt(mean(x^2) + eps) * weight; y may alias x.
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps,
             const Kernels& k = kernels());

// Rotary embedding, GGUF/llama convention: the adjacent pair (x[2i], x[2i+1])
// of every head turns by the angle pos * freq[i], i < head_dim / 2. The
// caller's freq table carries any frequency scaling (e.g. Llama 3.1).
void rope(float* x, int n_heads, int head_dim, int64_t pos, const float* freq);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); out may alias either input.
void swiglu(const float* gate, const float* up, float* out, int64_t n, const Kernels& k = kernels());

// In-place softmax over n values.
void softmax(float* x, int64_t n, const Kernels& k = kernels());

// y += x (residual connections).
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace nt::cpu
