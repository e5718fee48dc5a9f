#include "engine/draft_verifier.h"

#include "core/error.h"

namespace nt {

void add_verification(Batch& batch, int32_t pending, int64_t pos, SeqId seq, std::span<const int32_t> draft,
                      Output output) {
  batch.add(pending, pos, seq, output, true);
  for (size_t i = 0; i < draft.size(); ++i) batch.add(draft[i], pos + 1 + int64_t(i), seq, output, true);
}

DraftVerifier::Verdict DraftVerifier::sampled(const VerificationRun& run, size_t row, Sampler& sampler) {
  const size_t slot = size_t(run.out.index.at(run.first + row));
  sampler.distribution({run.out.logits.data() + slot * size_t(vocab_), size_t(vocab_)}, target_);
  if (row == run.draft.size()) return {draw_from(target_, sampler.next_uniform()), false};  // every draft kept
  const int32_t x = run.draft[row];
  const std::span<const TokenProbability> q = run.drawn_from.empty() ? std::span<const TokenProbability>()
                                                                     : run.drawn_from[row];
  if (keeps_draft(target_, q, x, sampler.next_uniform())) return {x, true};
  return {draw_after_rejection(target_, q, x, sampler.next_uniform(), rejection_), false};
}

Verification DraftVerifier::verify(const VerificationRun& run, Sampler& sampler, const TakeToken& take) {
  if (!run.drawn_from.empty() && run.drawn_from.size() != run.draft.size()) {
    fail("the draft gave {} distributions for {} drafted tokens", run.drawn_from.size(), run.draft.size());
  }
  const bool greedy = sampler.picks_highest_logit();
  Verification v;
  for (size_t row = 0;; ++row) {
    Verdict verdict;
    if (greedy) {
      const int32_t pick = run.out.argmax.at(size_t(run.out.index.at(run.first + row)));
      verdict = {pick, row < run.draft.size() && run.draft[row] == pick};
    } else {
      verdict = sampled(run, row, sampler);
    }
    if (verdict.drafted) ++v.accepted;
    v.last = verdict.token;
    v.more = take(verdict.token, verdict.drafted);
    if (!verdict.drafted || !v.more) return v;
  }
}

}  // namespace nt
