#include "sampling/candidates.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace nt {
namespace {

// Highest logit first; equal logits by id, so the order is the same on every
// standard library even though partial_sort is not stable.
// (A lambda, not a function, so the sorts inline it.)
constexpr auto ranks_higher = [](const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
};

}  // namespace

void Candidates::assign(std::span<const float> logits, int64_t keep) {
  const bool top_only = keep > 0 && size_t(keep) < logits.size();
  bool poisoned = false;  // NaN or +inf: either would poison the softmax; -inf is a legitimate "never"
  float top = -INFINITY;   // the whole row's; when top_only, the heap's best at the end
  if (top_only) {
    // A heap of the best `keep` so far whose front ranks lowest; a later id
    // never beats an equal logit. No running maximum: its dependency chain
    // would cost more than the scan.
    items_.assign(keep, {});
    for (size_t i = 0; i < size_t(keep); ++i) {
      poisoned |= !(logits[i] < INFINITY);
      items_[i] = {logits[i], int32_t(i)};
    }
    std::make_heap(items_.begin(), items_.end(), ranks_higher);
    float lowest_kept = items_.front().logit;
    // Blocks with nothing above the lowest kept logit (nearly all of a 128K
    // row once the heap holds the top) cost one branch-free test, which the
    // compiler vectorizes; the rest are walked one logit at a time.
    constexpr size_t kBlock = 64;
    for (size_t begin = size_t(keep); begin < logits.size(); begin += kBlock) {
      const size_t end = std::min(logits.size(), begin + kBlock);
      int enters = 0;
      for (size_t i = begin; i < end; ++i) enters |= int(logits[i] > lowest_kept) | int(!(logits[i] < INFINITY));
      if (!enters) continue;
      for (size_t i = begin; i < end; ++i) {
        const float x = logits[i];
        poisoned |= !(x < INFINITY);
        if (x > lowest_kept) {
          std::pop_heap(items_.begin(), items_.end(), ranks_higher);
          items_.back() = {x, int32_t(i)};
          std::push_heap(items_.begin(), items_.end(), ranks_higher);
          lowest_kept = items_.front().logit;
        }
      }
    }
  } else {
    items_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      poisoned |= !(logits[i] < INFINITY);
      top = std::max(top, logits[i]);
      items_[i] = {logits[i], int32_t(i)};
    }
  }
  if (poisoned) {
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float x) { return !(x < INFINITY); });
    fail("sampler: the logit of token {} is {}", bad - logits.begin(), *bad);
  }
  if (top_only) {
    std::sort_heap(items_.begin(), items_.end(), ranks_higher);
    top = items_.front().logit;
  }
  if (top == -INFINITY) fail("sampler: every one of the {} logits is -inf", logits.size());
  top_logit_ = top;
  sorted_ = top_only ? items_.size() : 0;
}

void Candidates::assign_top(std::span<const Candidate> superset, int64_t keep) {
  if (keep <= 0 || size_t(keep) > superset.size()) {
    fail("sampler: {} top candidates cannot give the {} highest", superset.size(), keep);
  }
  for (const Candidate& c : superset) {
    if (!(c.logit < INFINITY)) fail("sampler: the logit of token {} is {}", c.id, c.logit);
  }
  items_.assign(superset.begin(), superset.end());
  sorted_ = 0;
  sort_prefix(size_t(keep));
  items_.resize(size_t(keep));
  if (items_.front().logit == -INFINITY) fail("sampler: every one of the top {} logits is -inf", superset.size());
  top_logit_ = items_.front().logit;
}

void Candidates::sort_prefix(size_t n) {
  n = std::min(n, items_.size());
  if (n <= sorted_) return;
  // Everything past sorted_ ranks below the sorted prefix, so sorting the head
  // of the rest extends it. A small head is cheapest as a heap (one compare
  // per rejected entry); a large one by selecting it first, then sorting it.
  const auto first = items_.begin() + sorted_, last = items_.begin() + n;
  if (n - sorted_ <= 256) {
    std::partial_sort(first, last, items_.end(), ranks_higher);
  } else {
    std::nth_element(first, last - 1, items_.end(), ranks_higher);
    std::sort(first, last, ranks_higher);
  }
  sorted_ = n;
}

void Candidates::keep_top_k(int64_t k) {
  if (k <= 0 || size_t(k) >= items_.size()) return;
  sort_prefix(size_t(k));
  items_.resize(size_t(k));
}

void Candidates::keep_top_p(float p) {
  if (p >= 1.0f || items_.size() <= 1) return;
  const double top = top_logit_;
  double total = 0.0;
  for (const auto& c : items_) total += std::exp(double(c.logit) - top);

  // Grow the sorted prefix geometrically: the nucleus is usually small.
  const double target = double(p) * total;
  double mass = 0.0;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (i == sorted_) sort_prefix(std::max<size_t>(2 * sorted_, 64));
    mass += std::exp(double(items_[i].logit) - top);
    if (mass >= target) {
      items_.resize(i + 1);
      sorted_ = std::min(sorted_, items_.size());
      return;
    }
  }
}

void Candidates::keep_min_p(float min_p) {
  if (min_p <= 0.0f || items_.empty()) return;
  // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p): no softmax needed.
  const double threshold = double(top_logit_) + std::log(double(min_p));
  const auto kept_end = std::remove_if(items_.begin(), items_.end(),
                                       [&](const Candidate& c) { return double(c.logit) < threshold; });
  items_.erase(kept_end, items_.end());
  // remove_if keeps the order, and any dropped prefix entry drags the whole tail with it.
  sorted_ = std::min(sorted_, items_.size());
}

void Candidates::weights(float temperature, TokenDistribution& out) const {
  if (items_.empty()) fail("sampler: no candidate token left to draw");
  if (!(temperature > 0.0f)) fail("sampler: temperature {} must be positive to draw", temperature);
  const double top = top_logit_;
  out.clear();
  for (const auto& c : items_) out.push_back({c.id, std::exp((double(c.logit) - top) / temperature)});
}

}  // namespace nt
