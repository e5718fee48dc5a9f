// Picks the next token from a row of logits.
//
// The chain follows llama.cpp's default (common_params_sampling):
//   penalties -> top-k -> top-p -> min-p -> temperature -> seeded draw.
// Top-p and min-p therefore see temperature-1 probabilities renormalised over
// what the earlier filters kept; temperature only reshapes the final draw.
// temperature <= 0 means greedy: penalties, then the highest logit.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "sampling/candidates.h"
#include "sampling/step_policy.h"
#include "sampling/token_distribution.h"

namespace nt {

// Defaults are llama-cli's.
// A number added to one token's logit before the chain (OpenAI's
// logit_bias): -100 all but bans the token, +100 all but forces it.
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;

  bool operator==(const LogitBias&) const = default;
};

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: whole vocabulary
  float top_p = 0.95f;             // 1: off
  float min_p = 0.05f;             // 0: off
  float repeat_penalty = 1.0f;     // 1: off
  int32_t repeat_last_n = 64;      // penalty window; 0: off, < 0: everything since reset()
  float frequency_penalty = 0.0f;  // 0: off
  float presence_penalty = 0.0f;   // 0: off
  uint64_t seed = 0;               // same seed, same logits -> same tokens, on any platform
  std::vector<LogitBias> logit_bias;  // added after the penalties, before top-k
};

// Greedy decoding's parameters: temperature 0, no penalties.
SamplingParams greedy_sampling();

// How often each token occurs in the penalty window.
using TokenCounts = std::unordered_map<int32_t, int32_t>;

// For each token seen count > 0 times: the repetition penalty divides a
// positive logit and multiplies a negative one (so it always lowers it), then
// logit -= count * frequency_penalty + presence_penalty.
void apply_penalties(std::span<float> logits, const TokenCounts& counts, const SamplingParams& params);

// 53 random bits as a double in [0, 1): the same on every platform, unlike
// std::uniform_real_distribution whose algorithm the standard leaves open.
double uniform_from_bits(uint64_t bits);

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t vocab_size);

  // Chooses a token; logits (vocab_size entries) are penalised in place.
  int32_t sample(std::span<float> logits);

  // The distribution sample() draws from, without drawing: the chain's
  // surviving tokens with their probabilities (one token of probability 1
  // when greedy). Logits are penalised in place. Speculative sampling
  // compares it with a draft's.
  void distribution(std::span<float> logits, TokenDistribution& out);

  // How many of a row's highest logits sample_top needs to choose exactly as
  // sample() would from the whole row: the top-k (1 when greedy) plus every
  // token the penalties may lower, since lowering only moves a token down.
  // 0 when the chain needs the whole row (no top-k). Grows with the window.
  int64_t top_needed() const;

  // Chooses as sample() would from a row whose top_needed() highest logits,
  // unpenalised, are `top` (in any order): a backend can select them where
  // the logits are and copy out a few hundred bytes instead of the row.
  int32_t sample_top(std::span<const Candidate> top);

  // Whether the chain is top-k, top-p, min-p and a draw at a positive
  // temperature with no penalties: it needs only the row's top_k and the
  // random draws, no history, so a backend can run it where the logits are
  // (ModelRunner::decode with step_policy(); the CUDA one repeats these float64 steps in
  // the same order, and its exp may differ in the last bit).
  bool runs_without_history() const;

  // This chain as a decode's step policy (step_policy.h): its top,
  // temperature, top-p and min-p, sample_top as the chooser and next_uniform
  // as the draws, both on this sampler, which must outlive the decode.
  // nt::Error unless runs_without_history().
  StepPolicy step_policy();

  // The uniform draw in [0, 1) the next sample() or sample_top() would take;
  // for a backend that runs the chain itself, in step order.
  double next_uniform();

  // Records a token of the running text (prompt or generated) for the penalties.
  void accept(int32_t token);

  // Forgets the history and restarts the random sequence from the seed.
  void reset();

  const SamplingParams& params() const { return params_; }

  // Greedy without penalties: sample() would return the row's highest logit
  // untouched, so a backend may pick it itself (ModelRunner::forward_greedy).
  bool picks_highest_logit() const { return params_.temperature <= 0.0f && !has_penalties() && params_.logit_bias.empty(); }

 private:
  bool has_penalties() const;
  // Adds the logit biases to the tokens of `logits` (a whole row).
  void apply_biases(std::span<float> logits) const;
  // The candidates after the penalties and top-k (one when greedy).
  void narrow(std::span<float> logits);
  // Top-p and min-p, then the weights of the final draw into weights_.
  void weigh_candidates();
  // The chain after the penalties and top-k: top-p, min-p and the draw.
  int32_t draw_from_candidates();

  SamplingParams params_;
  int64_t vocab_size_;
  std::deque<int32_t> recent_;  // the penalty window, oldest first
  TokenCounts recent_counts_;
  Candidates candidates_;
  std::vector<Candidate> penalised_top_;  // sample_top's copy of its input
  TokenDistribution weights_;             // the final draw's
  std::mt19937_64 rng_;  // the standard fixes mt19937_64's output sequence exactly
};

}  // namespace nt
