#include "engine/draft_verifier.h"

#include "core/error.h"

namespace nt {

void add_verification(Batch& batch, int32_t pending, int64_t pos, SeqId seq, const DraftTree& draft, Output output) {
  const size_t first = batch.size();
  batch.add(pending, pos, seq, output, true);
  for (size_t i = 0; i < draft.size(); ++i) {
    // Entry parents count within the run, whose entry 0 is the pending token.
    const int32_t parent = draft.parents[i] + 1;
    batch.add(draft.tokens[i], batch.entries[first + size_t(parent)].pos + 1, seq, output, true, parent);
  }
}

void keep_verified(ModelRunner& runner, SeqId seq, int64_t pos, std::span<const int32_t> path, int64_t kept) {
  std::vector<int64_t> positions(static_cast<size_t>(kept));
  for (int64_t i = 0; i < kept; ++i) positions[size_t(i)] = pos + 1 + path[size_t(i)];
  runner.seq_keep(seq, pos + 1, positions);
}

DraftVerifier::Verdict DraftVerifier::greedy(const VerificationRun& run, int32_t node) const {
  const int32_t pick = run.out.argmax.at(size_t(run.out.index.at(run.first + size_t(node + 1))));
  return {pick, run.draft.child(node, pick)};
}

DraftVerifier::Verdict DraftVerifier::sampled(const VerificationRun& run, int32_t node, Sampler& sampler) {
  const size_t slot = size_t(run.out.index.at(run.first + size_t(node + 1)));
  sampler.distribution({run.out.logits.data() + slot * size_t(vocab_), size_t(vocab_)}, target_);
  // The children in order, each against what the refusals before it left.
  for (size_t i = 0; i < run.draft.size(); ++i) {
    if (run.draft.parents[i] != node) continue;
    const int32_t x = run.draft.tokens[i];
    const std::span<const TokenProbability> q = run.drawn_from.empty() ? std::span<const TokenProbability>()
                                                                       : run.drawn_from[i];
    if (keeps_draft(target_, q, x, sampler.next_uniform())) return {x, int32_t(i)};
    reject_draft(target_, q, x, rejection_);
  }
  return {draw_from(target_, sampler.next_uniform()), -1};
}

Verification DraftVerifier::verify(const VerificationRun& run, Sampler& sampler, const TakeToken& take) {
  if (!run.drawn_from.empty() && (run.drawn_from.size() != run.draft.size() || !run.draft.is_chain())) {
    fail("the draft gave {} distributions for {} drafted tokens{}: only a sampled chain carries them",
         run.drawn_from.size(), run.draft.size(), run.draft.is_chain() ? "" : " in a tree");
  }
  const bool greedy_target = sampler.picks_highest_logit();
  path_.clear();
  Verification v;
  for (int32_t node = -1;;) {
    const Verdict verdict = greedy_target ? greedy(run, node) : sampled(run, node, sampler);
    const bool drafted = verdict.node >= 0;
    if (drafted) {
      ++v.accepted;
      path_.push_back(verdict.node);
    }
    v.last = verdict.token;
    v.more = take(verdict.token, drafted);
    if (!drafted || !v.more) return v;
    node = verdict.node;
  }
}

}  // namespace nt
