// Teacher forcing: the model reads a reference continuation (another engine's
// tokens) instead of its own picks, and each position is scored by what the
// model would have picked there. Where the reference engine picked greedily,
// a disagreement at a position with a large margin is a real difference; at a
// near tie it is rounding.
#pragma once

#include <cstdint>
#include <span>

namespace nt {

struct ForcedStep {
  int32_t reference = 0;  // the token the reference put next
  int32_t top = 0;        // our highest logit (the first of equals)
  float margin = 0;       // our top logit over our second highest
  float gap = 0;          // our top logit over the reference token's: 0 when they agree
};

// Scores one row of logits against the reference's next token.
ForcedStep score_step(std::span<const float> row, int32_t reference);

}  // namespace nt
