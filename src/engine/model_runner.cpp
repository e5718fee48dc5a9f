#include "engine/model_runner.h"

#include <cmath>

namespace nt {

int32_t argmax_first(std::span<const float> row) {
  float best = -INFINITY;
  size_t index = 0;  // also the answer when no value beats -inf
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] > best) {
      best = row[i];
      index = i;
    }
  }
  return int32_t(index);
}

int32_t ModelRunner::forward_greedy(std::span<const int32_t> tokens, int64_t pos) {
  greedy_logits_.resize(size_t(config().vocab_size));
  forward(tokens, pos, greedy_logits_.data(), false);
  return argmax_first(greedy_logits_);
}

}  // namespace nt
