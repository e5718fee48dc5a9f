// The target's judgement of one sequence's verification run, shared by the
// single-sequence SpeculativeGenerator and the batch scheduler: row by row,
// the token the target keeps after the pending token and each draft, until
// it keeps one of its own. Greedy: its argmax, kept as the draft when they
// agree, so the output is plain greedy decoding's. Sampling: speculative
// rejection sampling (sampling/speculative_acceptance.h), so the output is
// distributed as the sampler's chain over the target's logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>

#include "runtime/batch.h"
#include "sampling/sampler.h"
#include "sampling/speculative_acceptance.h"
#include "sampling/token_distribution.h"

namespace nt {

// A verification run inside a pass's outputs: entry `first` is the pending
// token, entry first + 1 + i draft token i, every one asking for
// Output::Argmax (greedy) or Output::Logits (sampling; penalties apply to the rows in place).
struct VerificationRun {
  BatchOutputs& out;
  size_t first;
  std::span<const int32_t> draft;
  // The distribution each draft token was drawn from; empty: chosen deterministically.
  std::span<const TokenDistribution> drawn_from;
};

// Takes a kept token (drafted: it is the draft's); false when generation stops there.
using TakeToken = std::function<bool(int32_t token, bool drafted)>;

struct Verification {
  int64_t accepted = 0;  // drafted tokens kept
  int32_t last = 0;      // the last token taken: the next pending one
  bool more = false;     // whether generation goes on
};

// The verification pass's output kind for a sampler.
inline Output verification_output(const Sampler& sampler) {
  return sampler.picks_highest_logit() ? Output::Argmax : Output::Logits;
}

// Tokens to draft before a pass at most, for a sequence whose cache holds
// `length` positions and which has generated `generated` of max_tokens: what
// the pass may yield stays within the token limit and the context, so that
// only a stop token or a stop string ends generation inside a pass.
inline int64_t draft_room(int64_t draft_max, int64_t max_tokens, int64_t generated, int64_t context_size,
                          int64_t length) {
  return std::min(draft_max, std::min(max_tokens - generated, context_size - length) - 1);
}

// Appends the verification run of sequence `seq`: the pending token at `pos`,
// then the draft, each asking for `output`. Stepwise: its numbers are those
// of one-token decode steps, so greedy picks are plain greedy decoding's.
void add_verification(Batch& batch, int32_t pending, int64_t pos, SeqId seq, std::span<const int32_t> draft,
                      Output output);

class DraftVerifier {
 public:
  explicit DraftVerifier(int64_t vocab_size) : vocab_(vocab_size) {}

  // Hands the kept tokens to `take` in order, stopping after the first one
  // the target picks itself or when take returns false. The sampler's
  // history must hold every token kept before the run (take adds the rest),
  // so its penalties are the plain decoder's.
  Verification verify(const VerificationRun& run, Sampler& sampler, const TakeToken& take);

 private:
  struct Verdict {
    int32_t token;
    bool drafted;
  };
  Verdict sampled(const VerificationRun& run, size_t row, Sampler& sampler);

  int64_t vocab_;
  TokenDistribution target_;  // p at the row being judged
  RejectionScratch rejection_;
};

}  // namespace nt
