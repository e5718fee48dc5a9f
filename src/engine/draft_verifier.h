// The target's judgement of one sequence's verification run, shared by the
// single-sequence SpeculativeGenerator and the batch scheduler: from the
// pending token down the draft tree (a chain or several branches), row by
// row, the token the target keeps after each, until it keeps one of its own.
// Greedy: its argmax, kept as the draft's when a child of the current node
// carries it, so the output is plain greedy decoding's. Sampling: speculative
// rejection sampling (sampling/speculative_acceptance.h), the children of a
// node judged in turn, so the output is distributed as the sampler's chain
// over the target's logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/draft_tree.h"
#include "runtime/batch.h"
#include "runtime/model_runner.h"
#include "sampling/sampler.h"
#include "sampling/speculative_acceptance.h"
#include "sampling/token_distribution.h"

namespace nt {

// A verification run inside a pass's outputs: entry `first` is the pending
// token, entry first + 1 + i draft node i, every one asking for
// Output::Argmax (greedy) or Output::Logits (sampling; penalties apply to the rows in place).
struct VerificationRun {
  BatchOutputs& out;
  size_t first;
  const DraftTree& draft;
  // The distribution each node was drawn from (a chain only); empty: chosen deterministically.
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

// Draft nodes a token tree may hold before a pass of up to `tree_tokens`
// tokens (the pending one and the nodes), for a sequence whose cache holds
// `length` positions and may come to hold `capacity` (the context, or what
// its pages allow): each node takes a cache position in the pass.
inline int64_t tree_room(int64_t tree_tokens, int64_t capacity, int64_t length) {
  return std::min(tree_tokens, capacity - length) - 1;
}

// Whether the sequence drafts a token tree of up to `nodes` nodes this pass
// (with the pending token, from position `length` on): trees are on and the
// runner verifies such a tree exactly; otherwise it drafts a chain.
inline bool drafts_tree(const ModelRunner& runner, int64_t tree_tokens, int64_t length, int64_t nodes) {
  return tree_tokens > 0 && runner.verifies_trees_exactly(length, nodes + 1);
}

// Appends the verification run of sequence `seq`: the pending token at
// `pos`, then the draft's nodes (a token tree run unless it is a chain),
// each asking for `output`. Stepwise: its numbers are those of one-token
// decode steps, so greedy picks are plain greedy decoding's.
void add_verification(Batch& batch, int32_t pending, int64_t pos, SeqId seq, const DraftTree& draft, Output output);

// After the verification run of `seq` whose pending token was at `pos`: the
// first `kept` nodes of the accepted path (verify's path()) stay in the
// cache right after it, moved there from a tree's cache order, and the
// rejected ones go. Nothing is recomputed.
void keep_verified(ModelRunner& runner, SeqId seq, int64_t pos, std::span<const int32_t> path, int64_t kept);

class DraftVerifier {
 public:
  explicit DraftVerifier(int64_t vocab_size) : vocab_(vocab_size) {}

  // Hands the kept tokens to `take` in order, stopping after the first one
  // the target picks itself or when take returns false. The sampler's
  // history must hold every token kept before the run (take adds the rest),
  // so its penalties are the plain decoder's.
  Verification verify(const VerificationRun& run, Sampler& sampler, const TakeToken& take);
  // The nodes the last verify() accepted, root's child first.
  std::span<const int32_t> path() const { return path_; }

 private:
  struct Verdict {
    int32_t token;
    int32_t node;  // the draft node kept, -1: the target's own pick
  };
  Verdict greedy(const VerificationRun& run, int32_t node) const;
  Verdict sampled(const VerificationRun& run, int32_t node, Sampler& sampler);

  int64_t vocab_;
  TokenDistribution target_;  // p at the row being judged, less the children it refused
  RejectionScratch rejection_;
  std::vector<int32_t> path_;
};

}  // namespace nt
