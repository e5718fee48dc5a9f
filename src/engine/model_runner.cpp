#include "engine/model_runner.h"

#include <cmath>

#include "core/error.h"

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
  row_.resize(size_t(config().vocab_size));
  forward(tokens, pos, row_.data(), false);
  return argmax_first(row_);
}

void ModelRunner::forward_top(std::span<const int32_t> tokens, int64_t pos, int64_t keep, std::vector<Candidate>& top) {
  if (keep <= 0 || keep >= config().vocab_size) {
    fail("the top {} logits of a vocabulary of {}: keep 1 to one less", keep, config().vocab_size);
  }
  row_.resize(size_t(config().vocab_size));
  forward(tokens, pos, row_.data(), false);
  row_top_.assign(row_, keep);
  top.assign(row_top_.view().begin(), row_top_.view().end());
}

int64_t ModelRunner::decode_sampled(int32_t token, int64_t pos, int64_t max_steps, Sampler& sampler,
                                    const std::function<bool(int32_t)>& on_token) {
  if (!sampler.runs_without_history()) fail("decode_sampled runs a chain with a top-k, a temperature and no penalties");
  if (pos < 0 || max_steps < 0 || pos + max_steps > context_size()) {
    fail("context overflow: {} sampled steps from position {} do not fit the KV cache of {} tokens", max_steps, pos,
         context_size());
  }
  for (int64_t step = 0; step < max_steps; ++step) {
    forward_top({&token, 1}, pos + step, sampler.top_needed(), step_top_);
    token = sampler.sample_top(step_top_);
    if (!on_token(token)) return step + 1;
  }
  return max_steps;
}

int64_t ModelRunner::decode_greedy(int32_t token, int64_t pos, int64_t max_steps, const std::function<bool(int32_t)>& on_token) {
  if (pos < 0 || max_steps < 0 || pos + max_steps > context_size()) {
    fail("context overflow: {} greedy steps from position {} do not fit the KV cache of {} tokens", max_steps, pos,
         context_size());
  }
  for (int64_t step = 0; step < max_steps; ++step) {
    token = forward_greedy({&token, 1}, pos + step);
    if (!on_token(token)) return step + 1;
  }
  return max_steps;
}

}  // namespace nt
