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

// reject_draft's buffers, kept by the caller so that a pass allocates nothing.
struct RejectionScratch {
  TokenDistribution residual, draft;
};

// After keeps_draft refused x: p becomes normalize(max(0, p - q)), the
// distribution the replacement is drawn from (draw_from). When rounding
// leaves that empty (p and q equal), p stays. Several candidates for one
// position (a token tree's children, SpecInfer's multi-step speculative
// sampling) are judged in turn against what the rejections before left, and
// a rejection of all draws from the last residual: exact when each candidate
// was drawn from its q independently of the others (a deterministic
// candidate, q one-hot, always is).
void reject_draft(TokenDistribution& p, std::span<const TokenProbability> q, int32_t x, RejectionScratch& scratch);

}  // namespace nt
