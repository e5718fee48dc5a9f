#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace nt::cpu {

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps, const Kernels& k) {
  const float mean_square = k.dot_f32(x, x, n) / float(n);
  const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * weight[i];
}

void rope(float* x, int n_heads, const RopeHeads& heads, int64_t pos, const float* freq) {
  const int pairs = heads.rope_dim / 2;
  // Pair i is (first + i * step, first + i * step + partner).
  const bool adjacent = heads.style == RopeStyle::AdjacentPairs;
  const int step = adjacent ? 2 : 1, partner = adjacent ? 1 : pairs;
  // Angles in double: pos * freq reaches thousands of radians at long contexts.
  static thread_local std::vector<float> cos_sin;
  cos_sin.resize(2 * size_t(pairs));
  for (int i = 0; i < pairs; ++i) {
    const double angle = double(pos) * double(freq[i]);
    cos_sin[2 * i] = float(std::cos(angle)) * heads.magnitude;
    cos_sin[2 * i + 1] = float(std::sin(angle)) * heads.magnitude;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * heads.head_dim;
    for (int i = 0; i < pairs; ++i) {
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      float& a = v[i * step];
      float& b = v[i * step + partner];
      const float a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, const Kernels& k) {
  k.silu_mul(gate, up, out, n);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  // gpt-oss's constants, which its files do not carry.
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
  }
}

void gated_activation(FfnActivation act, const float* gate, const float* up, float* out, int64_t n) {
  switch (act) {
    case FfnActivation::Silu: swiglu(gate, up, out, n); break;
    case FfnActivation::GeluTanh: geglu(gate, up, out, n); break;
    case FfnActivation::SwigluOai: swiglu_oai(gate, up, out, n); break;
  }
}

void softmax(float* x, int64_t n, const Kernels& k) {
  if (n <= 0) return;
  const float max = *std::max_element(x, x + n);
  const float inv_sum = 1.0f / k.exp_sum(x, n, max);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias_rows(float* rows, const float* bias, int64_t n, int64_t width) {
  for (int64_t t = 0; t < n; ++t) add_inplace(rows + t * width, bias, width);
}

}  // namespace nt::cpu
