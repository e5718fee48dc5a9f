#include "engine/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace nt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

SpeculativeGenerator::SpeculativeGenerator(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource& draft,
                                           int64_t draft_max, SeqId seq)
    : runner_(runner), tokenizer_(tokenizer), draft_source_(draft), draft_max_(draft_max), seq_(seq) {
  if (draft_max < 1) fail("speculative decoding drafts at least 1 token per pass, not {}", draft_max);
}

SpeculativeGenerator::Verdict SpeculativeGenerator::greedy_verdict(size_t row) const {
  const int32_t pick = out_.argmax[row];
  return {pick, row < draft_.size() && draft_[row] == pick};
}

SpeculativeGenerator::Verdict SpeculativeGenerator::sampled_verdict(size_t row, Sampler& sampler) {
  const size_t vocab = size_t(runner_.config().vocab_size);
  // The sampler's history holds every token kept before this row, so its penalties are the plain decoder's.
  sampler.distribution({out_.logits.data() + row * vocab, vocab}, target_);
  if (row == draft_.size()) return {draw_from(target_, sampler.next_uniform()), false};  // every draft kept
  const int32_t x = draft_[row];
  const std::span<const TokenDistribution> drawn_from = draft_source_.distributions();
  const std::span<const TokenProbability> q = drawn_from.empty() ? std::span<const TokenProbability>() : drawn_from[row];
  if (keeps_draft(target_, q, x, sampler.next_uniform())) return {x, true};
  return {draw_after_rejection(target_, q, x, sampler.next_uniform(), rejection_), false};
}

SpeculativeStats SpeculativeGenerator::generate(std::span<const int32_t> prompt, Sampler& sampler,
                                                const GenerationOptions& options, const TextSink& on_text) {
  if (prompt.empty()) fail("empty prompt: nothing to condition generation on");
  const int64_t context_size = runner_.context_size();
  if (int64_t(prompt.size()) > context_size) {
    fail("the prompt has {} tokens but the context holds {} (raise -c, up to the model's {})", prompt.size(),
         context_size, runner_.config().context_length);
  }
  SpeculativeStats stats;
  GenerationStats& gen = stats.generation;
  SpeculationStats& spec = stats.speculation;
  gen.prompt_tokens = int64_t(prompt.size());
  // Greedy without penalties verifies by the runner's picks; any other chain needs the rows.
  const bool greedy = sampler.picks_highest_logit();
  const Output output = greedy ? Output::Argmax : Output::Logits;
  sampler.reset();
  for (const int32_t t : prompt) sampler.accept(t);

  // Reuse the cached prefix; at least the last prompt token is evaluated for its pick.
  const auto [mismatch, unused] = std::mismatch(context_.begin(), context_.end(), prompt.begin(), prompt.end());
  const int64_t reuse = std::min<int64_t>(mismatch - context_.begin(), int64_t(prompt.size()) - 1);
  gen.reused_tokens = reuse;
  const auto prefill_start = std::chrono::steady_clock::now();
  // The prompt as one chunk, exactly as Generator prefills it.
  batch_.clear();
  batch_.add_run(prompt.subspan(size_t(reuse)), reuse, seq_, output);
  runner_.forward(batch_, out_);
  // The target's next token, not yet in the cache.
  int32_t pending = greedy ? out_.argmax.at(0) : sampler.sample(out_.logits);
  gen.prefill_seconds = seconds_since(prefill_start);
  context_.assign(prompt.begin(), prompt.end());

  Completion completion(tokenizer_, options, context_size, prompt);
  const auto take = [&](int32_t token) {
    const bool more = completion.take(token, int64_t(context_.size()), sampler, on_text);
    gen.generated_tokens = int64_t(completion.generated().size());
    return more;
  };
  const auto decode_start = std::chrono::steady_clock::now();
  for (bool more = take(pending); more;) {
    // Draft no more than the pass may yield: up to the token limit, and
    // within the context. So only a stop token or a stop string ends
    // generation inside a pass.
    const int64_t length = int64_t(context_.size());
    const int64_t room = std::min(options.max_tokens - gen.generated_tokens, context_size - length) - 1;
    context_.push_back(pending);
    draft_.clear();
    draft_source_.propose(context_, std::min(draft_max_, room), draft_);
    const size_t drawn = draft_source_.distributions().size();
    if (drawn != 0 && drawn != draft_.size()) {
      fail("the draft gave {} distributions for {} drafted tokens", drawn, draft_.size());
    }

    // Verify: the pending token and the draft in one run, each asking for
    // what the target keeps after it. The run is stepwise: its numbers are
    // those of one-token decode steps, so greedy picks are plain greedy
    // decoding's.
    batch_.clear();
    batch_.add(pending, length, seq_, output, true);
    for (size_t i = 0; i < draft_.size(); ++i) batch_.add(draft_[i], length + 1 + int64_t(i), seq_, output, true);
    runner_.forward(batch_, out_);
    ++spec.passes;
    spec.drafted += int64_t(draft_.size());

    // Each row in turn, until one keeps a token other than the drafted one
    // (the target's own, the next pending token) or generation stops: the
    // kept drafts are in the cache.
    for (size_t row = 0; more; ++row) {
      const Verdict v = greedy ? greedy_verdict(row) : sampled_verdict(row, sampler);
      if (v.drafted) ++spec.accepted;
      more = take(v.token);
      pending = v.token;
      if (!v.drafted) break;
      if (more) context_.push_back(v.token);
    }
    // Rollback: the cache keeps what context_ holds, the rejected drafts go.
    runner_.seq_truncate(seq_, int64_t(context_.size()));
  }
  gen.decode_seconds = seconds_since(decode_start);
  gen.decode_passes = spec.passes;
  gen.decode_tokens = spec.passes + spec.accepted;
  // The last token taken is not in the cache yet; the next prompt re-evaluates it.
  completion.finish(on_text);
  gen.stop = completion.stop();
  generated_ = completion.generated();
  return stats;
}

}  // namespace nt
