#include "sampling/speculative_acceptance.h"

#include <algorithm>

namespace nt {
namespace {

constexpr auto by_id = [](const TokenProbability& a, const TokenProbability& b) { return a.id < b.id; };

// q as id-sorted (id, probability) pairs: one-hot at x when q is empty.
void sorted_draft(std::span<const TokenProbability> q, int32_t x, TokenDistribution& out) {
  if (q.empty()) {
    out.assign(1, {x, 1.0});
    return;
  }
  out.assign(q.begin(), q.end());
  std::sort(out.begin(), out.end(), by_id);
}

}  // namespace

bool keeps_draft(std::span<const TokenProbability> p, std::span<const TokenProbability> q, int32_t x, double u) {
  const double qx = q.empty() ? 1.0 : probability_of(q, x);
  // u < p/q without the division; a token q could not draw (qx = 0) is kept when p allows it.
  return u * qx < probability_of(p, x);
}

void reject_draft(TokenDistribution& p, std::span<const TokenProbability> q, int32_t x, RejectionScratch& scratch) {
  // Both as id-sorted lists, merged: a full-vocabulary chain has tens of thousands of tokens.
  TokenDistribution& sorted_q = scratch.draft;
  TokenDistribution& residual = scratch.residual;
  sorted_draft(q, x, sorted_q);
  residual.assign(p.begin(), p.end());
  std::sort(residual.begin(), residual.end(), by_id);
  double total = 0.0;
  auto qi = sorted_q.begin();
  for (TokenProbability& t : residual) {
    while (qi != sorted_q.end() && qi->id < t.id) ++qi;
    const double qp = qi != sorted_q.end() && qi->id == t.id ? qi->p : 0.0;
    t.p = std::max(0.0, t.p - qp);
    total += t.p;
  }
  if (!(total > 0.0)) return;
  for (TokenProbability& t : residual) t.p /= total;
  p.swap(residual);
}

}  // namespace nt
