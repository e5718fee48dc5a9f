// RoPE frequencies per rotated pair, with every scaling scheme folded in, so
// backends only compute angle = position * inv_freq[i] and rotate the adjacent
// pair (2i, 2i+1) of each head (GGUF's Llama convention).
#pragma once

#include <vector>

#include "model/arch/model_spec.h"

namespace nt {

// rope_dim / 2 inverse frequencies. `freq_factors` (Llama 3.1's rope_freqs
// tensor, rope_dim / 2 values) divides them when given; otherwise the
// rope.scaling.* keys apply.
std::vector<float> rope_inv_freqs(const RopeSpec& rope, int64_t rope_dim, const float* freq_factors);

// The model's own table (its global layers').
std::vector<float> rope_inv_freqs(const ModelSpec& config, const float* freq_factors);

// What the rotated pairs are multiplied by besides turning: 1, except under
// YaRN, which scales them by attn_factor * (1 + 0.1 ln factor) so that the
// attention logits keep their sharpness at long range (the reference
// engine's net scale).
float rope_magnitude(const RopeSpec& rope);

}  // namespace nt
