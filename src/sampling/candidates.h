// The tokens still in the running while a sampler chain narrows the vocabulary.
// Each filter keeps a subset; the list stays sorted by logit (highest first)
// only as far as some filter needed it, so top-k over a 128K vocabulary costs a
// scan with a heap of k (assign's keep) or a partial sort, never a full sort.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/token_distribution.h"

namespace nt {

struct Candidate {
  float logit;
  int32_t id;
};

class Candidates {
 public:
  // Every token of the vocabulary, in id order; or, when 0 < keep < the
  // vocabulary, only the keep highest in order (what keep_top_k(keep) would
  // leave), chosen in the same pass without storing the rest.
  void assign(std::span<const float> logits, int64_t keep = 0);

  // The keep highest of `superset` in order, where superset holds at least
  // the keep highest of some row (in any order): what assign(row, keep)
  // would keep. A backend that selects a row's top where the logits are
  // hands over only those.
  void assign_top(std::span<const Candidate> superset, int64_t keep);

  // The k highest logits (ties broken by the sort); k <= 0 or >= size keeps all.
  void keep_top_k(int64_t k);

  // The smallest highest-first prefix whose softmax mass reaches p; p >= 1 keeps all.
  void keep_top_p(float p);

  // Tokens whose probability is at least min_p times the top one's; min_p <= 0 keeps all.
  void keep_min_p(float min_p);

  // The candidates in their order, each weighted exp((logit - top) / temperature):
  // softmax(logit / temperature) before its division by the total, which
  // draw_from (a draw) and a normalisation (the distribution) share.
  void weights(float temperature, TokenDistribution& out) const;

  std::span<const Candidate> view() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  // Makes items_[0, n) the n highest logits, in descending order.
  void sort_prefix(size_t n);

  std::vector<Candidate> items_;
  float top_logit_ = 0.0f;  // no filter ever drops the top candidate, so this holds throughout
  size_t sorted_ = 0;  // items_[0, sorted_) are the top sorted_, descending
};

}  // namespace nt
