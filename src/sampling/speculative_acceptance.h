// Speculative rejection sampling at one drafted position (Leviathan et al.
// 2023, Chen et al. 2023): the draft drew token x from q, the target's chain
// gives p. Keeping x with probability min(1, p(x) / q(x)), and otherwise
// drawing from normalize(max(0, p - q)), yields a token distributed exactly
// as p, whatever q is. A deterministic draft (lookup, a greedy draft model)
// has q one-hot at x: x is kept with probability p(x), and a rejection draws
// from p without x.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/token_distribution.h"

namespace nt {

// Whether the target keeps the drafted x, given u uniform in [0, 1). An empty
// q stands for one-hot at x.
bool keeps_draft(std::span<const TokenProbability> p, std::span<const TokenProbability> q, int32_t x, double u);

// draw_after_rejection's buffers, kept by the caller so that a pass allocates nothing.
struct RejectionScratch {
  TokenDistribution residual, draft;
};

// After keeps_draft refused x: the draw at u (uniform in [0, 1)) from
// normalize(max(0, p - q)). When rounding leaves that empty (p and q equal),
// the draw is from p.
int32_t draw_after_rejection(std::span<const TokenProbability> p, std::span<const TokenProbability> q, int32_t x,
                             double u, RejectionScratch& scratch);

}  // namespace nt
