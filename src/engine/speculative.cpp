#include "engine/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace nt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

SamplingParams greedy_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

}  // namespace

SpeculativeGenerator::SpeculativeGenerator(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource& draft,
                                           int64_t draft_max, SeqId seq)
    : runner_(runner),
      tokenizer_(tokenizer),
      draft_source_(draft),
      draft_max_(draft_max),
      seq_(seq),
      greedy_(greedy_params(), runner.config().vocab_size) {
  if (draft_max < 1) fail("speculative decoding drafts at least 1 token per pass, not {}", draft_max);
}

SpeculativeStats SpeculativeGenerator::generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                                                const TextSink& on_text) {
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

  // Reuse the cached prefix; at least the last prompt token is evaluated for its pick.
  const auto [mismatch, unused] = std::mismatch(context_.begin(), context_.end(), prompt.begin(), prompt.end());
  const int64_t reuse = std::min<int64_t>(mismatch - context_.begin(), int64_t(prompt.size()) - 1);
  gen.reused_tokens = reuse;
  const auto prefill_start = std::chrono::steady_clock::now();
  // The prompt as one chunk, exactly as Generator prefills it.
  batch_.clear();
  batch_.add_run(prompt.subspan(size_t(reuse)), reuse, seq_, Output::Argmax);
  runner_.forward(batch_, out_);
  int32_t pending = out_.argmax.at(0);  // the target's next token, not yet in the cache
  gen.prefill_seconds = seconds_since(prefill_start);
  context_.assign(prompt.begin(), prompt.end());

  greedy_.reset();
  Completion completion(tokenizer_, options, context_size, prompt);
  const auto take = [&](int32_t token) {
    const bool more = completion.take(token, int64_t(context_.size()), greedy_, on_text);
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

    // Verify: the pending token and the draft in one run, each asking for the
    // target's pick after it. The run is stepwise: its numbers are those of
    // one-token decode steps, so the picks are plain greedy decoding's.
    batch_.clear();
    batch_.add(pending, length, seq_, Output::Argmax, true);
    for (size_t i = 0; i < draft_.size(); ++i) batch_.add(draft_[i], length + 1 + int64_t(i), seq_, Output::Argmax, true);
    runner_.forward(batch_, out_);
    const int64_t drafted = int64_t(draft_.size());
    int64_t accepted = 0;
    while (accepted < drafted && draft_[size_t(accepted)] == out_.argmax[size_t(accepted)]) ++accepted;
    ++spec.passes;
    spec.drafted += drafted;
    spec.accepted += accepted;

    // The confirmed drafts are in the cache; the last pick is the next pending token.
    for (int64_t j = 0; j <= accepted && more; ++j) {
      const int32_t token = out_.argmax[size_t(j)];
      more = take(token);
      if (more && j < accepted) context_.push_back(token);
      pending = token;
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
