#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace nt {
namespace {

// YaRN's correction range: below pair `low` frequencies stay as trained,
// above `high` they are divided by the factor, and a linear ramp blends
// between. The reference engine fixes beta_fast 32 and beta_slow 1 (whatever
// rope.scaling.yarn_beta_* say) and computes the range in float, floored
// and ceiled, which this follows for its integer ends.
constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;

float yarn_corr_dim(int64_t rope_dim, int64_t original_context, float beta, float theta) {
  return float(rope_dim) * std::log(float(original_context) / (beta * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(theta));
}

// The share of pair i's trained frequency that YaRN keeps (1: all, 0: divided by the factor).
double yarn_extrapolation(const RopeSpec& rope, int64_t rope_dim, int64_t i) {
  const auto& s = rope.scaling;
  const float low = std::max(0.0f, std::floor(yarn_corr_dim(rope_dim, s.original_context, kYarnBetaFast, rope.theta)));
  const float high =
      std::min(float(rope_dim - 1), std::ceil(yarn_corr_dim(rope_dim, s.original_context, kYarnBetaSlow, rope.theta)));
  const double y = (double(i) - double(low)) / double(std::max(0.001f, high - low));
  return 1.0 - std::clamp(y, 0.0, 1.0);
}

}  // namespace

std::vector<float> rope_inv_freqs(const ModelSpec& c, const float* freq_factors) {
  return rope_inv_freqs(c.rope(), c.rope_dim, freq_factors);
}

std::vector<float> rope_inv_freqs(const RopeSpec& rope, int64_t rope_dim, const float* freq_factors) {
  const int64_t pairs = rope_dim / 2;
  std::vector<float> inv(static_cast<size_t>(pairs));
  const auto& s = rope.scaling;
  for (int64_t i = 0; i < pairs; ++i) {
    double freq = std::pow(double(rope.theta), -2.0 * double(i) / double(rope_dim));
    if (freq_factors) {
      freq /= double(freq_factors[i]);
    } else if (s.kind == RopeScaling::Kind::Linear) {
      freq /= double(s.factor);
    } else if (s.kind == RopeScaling::Kind::Llama3) {
      // Long wavelengths are stretched by `factor`, short ones kept, and the
      // band between blended linearly in 1/wavelength.
      const double wavelen = 2.0 * std::numbers::pi / freq;
      const double low_wavelen = double(s.original_context) / double(s.low_freq_factor);
      const double high_wavelen = double(s.original_context) / double(s.high_freq_factor);
      if (wavelen > low_wavelen) {
        freq /= double(s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (double(s.original_context) / wavelen - double(s.low_freq_factor)) /
                              (double(s.high_freq_factor) - double(s.low_freq_factor));
        freq = (1.0 - smooth) * freq / double(s.factor) + smooth * freq;
      }
    } else if (s.kind == RopeScaling::Kind::Yarn) {
      const double keep = yarn_extrapolation(rope, rope_dim, i);
      freq = (1.0 - keep) * freq / double(s.factor) + keep * freq;
    }
    inv[size_t(i)] = float(freq);
  }
  return inv;
}

float rope_magnitude(const RopeSpec& rope) {
  const auto& s = rope.scaling;
  if (s.kind != RopeScaling::Kind::Yarn) return 1.0f;
  return s.attn_factor * (s.factor > 1.0f ? 1.0f + 0.1f * std::log(s.factor) : 1.0f);
}

}  // namespace nt
