#include "sampling/token_distribution.h"

#include "core/error.h"

namespace nt {

double probability_of(std::span<const TokenProbability> distribution, int32_t id) {
  for (const TokenProbability& t : distribution) {
    if (t.id == id) return t.p;
  }
  return 0.0;
}

int32_t draw_from(std::span<const TokenProbability> weights, double u) {
  double total = 0.0;
  for (const TokenProbability& t : weights) total += t.p;
  if (!(total > 0.0)) fail("sampler: no token of positive probability to draw");
  const double target = u * total;
  double mass = 0.0;
  int32_t last_possible = -1;
  for (const TokenProbability& t : weights) {
    if (t.p <= 0.0) continue;
    mass += t.p;
    last_possible = t.id;
    if (mass > target) return t.id;
  }
  return last_possible;  // rounding left target at the very end of the mass
}

}  // namespace nt
