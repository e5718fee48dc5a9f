#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace nt {

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
    }
    inv[size_t(i)] = float(freq);
  }
  return inv;
}

}  // namespace nt
