// What the engine needs from a backend: a Llama forward pass over a KV cache.
// The CPU and CUDA backends implement it; generation, chat, perplexity and
// benchmarks are written once against it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/llama_config.h"
#include "sampling/candidates.h"
#include "sampling/sampler.h"

namespace nt {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const LlamaConfig& config() const = 0;
  // Tokens the KV cache holds at most.
  virtual int64_t context_size() const = 0;
  // Backend and placement, for logs: "cpu (2 threads, avx2)".
  virtual std::string description() const = 0;
  // Bytes of weights read per decoded token (for GB/s reports).
  virtual uint64_t weight_bytes_per_token() const = 0;
  // Bytes of one cached position's keys and values over all layers: a decode
  // step reads this much per visible key on top of the weights.
  virtual uint64_t kv_bytes_per_position() const = 0;

  // Runs `tokens` at positions pos, pos+1, ... (overwriting any cached
  // positions from `pos` on). Writes vocab_size logits per token into `logits`
  // when all_logits, else only the last token's. Throws nt::Error when
  // pos + tokens.size() exceeds context_size().
  virtual void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) = 0;

  // Runs `tokens` like forward() and returns the token with the highest logit
  // after the last one (argmax_first of its logits):
  // greedy decoding. A backend may pick it where the logits are instead of
  // copying them out; this default runs forward() and scans the row.
  virtual int32_t forward_greedy(std::span<const int32_t> tokens, int64_t pos);

  // Greedy decoding: runs `token` at `pos`, hands its pick to on_token, runs
  // that pick at pos + 1, and so on, until on_token returns false or
  // max_steps picks are handed over; returns how many were. Every step's
  // position must fit the context (nt::Error otherwise). A backend may run a
  // few steps ahead of on_token; their cache positions are past the last pick
  // and the next forward() from there overwrites them. This default calls
  // forward_greedy per step.
  virtual int64_t decode_greedy(int32_t token, int64_t pos, int64_t max_steps, const std::function<bool(int32_t)>& on_token);

  // Runs `tokens` like forward() and returns in `top` the `keep` (0 < keep <
  // vocab_size) highest logits after the last one, highest first, equal
  // logits lowest id first: what Candidates::assign(row, keep) keeps, with its
  // errors for a NaN or +inf logit. For sampling (Sampler::sample_top): a
  // backend may select them where the logits are; this default runs forward().
  virtual void forward_top(std::span<const int32_t> tokens, int64_t pos, int64_t keep, std::vector<Candidate>& top);

  // Sampled decoding for a chain that runs without history
  // (Sampler::runs_without_history): like decode_greedy, but each step's
  // token is what `sampler` chooses from the step's logits (sample_top on
  // their top). The sampler's random draws are taken in step order; a backend
  // that runs ahead takes up to a few more draws than the picks it hands over.
  // This default steps forward_top and sample_top.
  virtual int64_t decode_sampled(int32_t token, int64_t pos, int64_t max_steps, Sampler& sampler,
                                 const std::function<bool(int32_t)>& on_token);

 private:
  std::vector<float> row_;  // the default forward_greedy's and forward_top's logits
  Candidates row_top_;
  std::vector<Candidate> step_top_;  // the default decode_sampled's
};

// The first index of the largest value; NaN never wins, and 0 when nothing beats -inf.
int32_t argmax_first(std::span<const float> row);

}  // namespace nt
