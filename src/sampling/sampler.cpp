#include "sampling/sampler.h"

#include <cmath>

#include "core/error.h"

namespace nt {

namespace {

float penalised(float logit, int32_t count, const SamplingParams& params) {
  logit = logit > 0.0f ? logit / params.repeat_penalty : logit * params.repeat_penalty;
  return logit - (float(count) * params.frequency_penalty + params.presence_penalty);
}

}  // namespace

SamplingParams greedy_sampling() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

void apply_penalties(std::span<float> logits, const TokenCounts& counts, const SamplingParams& params) {
  for (const auto& [token, count] : counts) {
    if (count <= 0) continue;
    if (token < 0 || size_t(token) >= logits.size()) fail("sampler: penalised token {} is outside the vocabulary", token);
    logits[size_t(token)] = penalised(logits[size_t(token)], count, params);
  }
}

double uniform_from_bits(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& params, int64_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {
  if (vocab_size <= 0) fail("sampler: vocabulary size {} must be positive", vocab_size);
  if (!std::isfinite(params.temperature)) fail("sampler: temperature {} must be finite", params.temperature);
  if (!(params.top_p >= 0.0f && params.top_p <= 1.0f)) fail("sampler: top_p {} must lie in [0, 1]", params.top_p);
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) fail("sampler: min_p {} must lie in [0, 1]", params.min_p);
  if (!(params.repeat_penalty > 0.0f && std::isfinite(params.repeat_penalty)))
    fail("sampler: repeat_penalty {} must be positive", params.repeat_penalty);
  if (!std::isfinite(params.frequency_penalty) || !std::isfinite(params.presence_penalty))
    fail("sampler: frequency_penalty {} and presence_penalty {} must be finite", params.frequency_penalty,
         params.presence_penalty);
  for (const LogitBias& b : params.logit_bias) {
    if (b.token < 0 || b.token >= vocab_size) {
      fail("sampler: logit_bias names token {}, outside the vocabulary of {}", b.token, vocab_size);
    }
    if (!std::isfinite(b.bias)) fail("sampler: logit_bias of token {} is {}; give a finite number", b.token, b.bias);
  }
}

void Sampler::apply_biases(std::span<float> logits) const {
  for (const LogitBias& b : params_.logit_bias) logits[size_t(b.token)] += b.bias;
}

bool Sampler::has_penalties() const {
  return params_.repeat_last_n != 0 &&
         (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f);
}

void Sampler::narrow(std::span<float> logits) {
  if (int64_t(logits.size()) != vocab_size_)
    fail("sampler: got {} logits for a vocabulary of {}", logits.size(), vocab_size_);
  if (has_penalties()) apply_penalties(logits, recent_counts_, params_);
  apply_biases(logits);
  // Top-k during the scan: a 128K vocabulary costs one pass and no copy.
  const bool greedy = params_.temperature <= 0.0f;
  candidates_.assign(logits, greedy ? 1 : params_.top_k);
}

int32_t Sampler::sample(std::span<float> logits) {
  narrow(logits);
  return draw_from_candidates();
}

void Sampler::distribution(std::span<float> logits, TokenDistribution& out) {
  narrow(logits);
  if (params_.temperature <= 0.0f) {
    out.assign(1, {candidates_.view()[0].id, 1.0});
    return;
  }
  weigh_candidates();
  double total = 0.0;
  for (const TokenProbability& t : weights_) total += t.p;
  out.clear();
  for (const TokenProbability& t : weights_) out.push_back({t.id, t.p / total});
}

int64_t Sampler::top_needed() const {
  const bool greedy = params_.temperature <= 0.0f;
  if (!greedy && params_.top_k <= 0) return 0;
  int64_t needed = greedy ? 1 : params_.top_k;
  if (has_penalties()) needed += int64_t(recent_counts_.size());
  // A raised token may come from anywhere in the row; a lowered one only moves down.
  for (const LogitBias& b : params_.logit_bias) {
    if (b.bias > 0.0f) return 0;
    ++needed;
  }
  return needed < vocab_size_ ? needed : 0;
}

int32_t Sampler::sample_top(std::span<const Candidate> top) {
  const int64_t needed = top_needed();
  if (needed == 0) fail("sampler: this chain (top_k {}) needs every logit, not the top", params_.top_k);
  if (int64_t(top.size()) < needed) fail("sampler: got the top {} logits where the chain needs {}", top.size(), needed);
  penalised_top_.assign(top.begin(), top.end());
  if (has_penalties()) {
    for (Candidate& c : penalised_top_) {
      const auto it = recent_counts_.find(c.id);
      if (it != recent_counts_.end() && it->second > 0) c.logit = penalised(c.logit, it->second, params_);
    }
  }
  for (const LogitBias& b : params_.logit_bias) {  // lowering only: top_needed() said so
    for (Candidate& c : penalised_top_) {
      if (c.id == b.token) c.logit += b.bias;
    }
  }
  const bool greedy = params_.temperature <= 0.0f;
  candidates_.assign_top(penalised_top_, greedy ? 1 : params_.top_k);
  return draw_from_candidates();
}

void Sampler::weigh_candidates() {
  candidates_.keep_top_p(params_.top_p);
  candidates_.keep_min_p(params_.min_p);
  candidates_.weights(params_.temperature, weights_);
}

int32_t Sampler::draw_from_candidates() {
  if (params_.temperature <= 0.0f) return candidates_.view()[0].id;
  weigh_candidates();
  return draw_from(weights_, next_uniform());
}

bool Sampler::runs_without_history() const {
  return params_.temperature > 0.0f && top_needed() > 0 && !has_penalties() && params_.logit_bias.empty();
}

StepPolicy Sampler::step_policy() {
  if (!runs_without_history()) fail("a decode's sampling step policy is a chain with a top-k, a temperature and no penalties");
  StepPolicy p;
  p.top_k = top_needed();
  p.temperature = params_.temperature;
  p.top_p = params_.top_p;
  p.min_p = params_.min_p;
  p.choose = [this](std::span<const Candidate> top) { return sample_top(top); };
  p.draw = [this] { return next_uniform(); };
  return p;
}

double Sampler::next_uniform() { return uniform_from_bits(rng_()); }

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= vocab_size_) fail("sampler: accepted token {} is outside the vocabulary of {}", token, vocab_size_);
  if (params_.repeat_last_n == 0) return;
  recent_.push_back(token);
  ++recent_counts_[token];
  if (params_.repeat_last_n > 0 && recent_.size() > size_t(params_.repeat_last_n)) {
    const int32_t oldest = recent_.front();
    recent_.pop_front();
    if (--recent_counts_[oldest] == 0) recent_counts_.erase(oldest);
  }
}

void Sampler::reset() {
  recent_.clear();
  recent_counts_.clear();
  rng_.seed(params_.seed);
}

}  // namespace nt
