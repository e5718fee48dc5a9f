// A sampler chain's distribution over the tokens it may still pick: a sparse
// list of (id, probability), each id once, summing to 1. Speculative decoding
// compares the target's distribution with the one a draft drew from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace nt {

struct TokenProbability {
  int32_t id;
  double p;
};

using TokenDistribution = std::vector<TokenProbability>;

// The probability of `id`: 0 when the list leaves it out.
double probability_of(std::span<const TokenProbability> distribution, int32_t id);

// The token at cumulative mass u (in [0, 1)) of the list, in its order; the
// weights need not sum to 1 (they are scaled by their total), and tokens of
// weight 0 are never drawn.
int32_t draw_from(std::span<const TokenProbability> weights, double u);

}  // namespace nt
