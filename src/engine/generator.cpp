#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace nt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double GenerationStats::prefill_tokens_per_second() const {
  const int64_t evaluated = prompt_tokens - reused_tokens;
  return prefill_seconds > 0 ? double(evaluated) / prefill_seconds : 0.0;
}

double GenerationStats::decode_tokens_per_second() const {
  return decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0.0;
}

Generator::Generator(ModelRunner& runner, const Tokenizer& tokenizer)
    : runner_(runner), tokenizer_(tokenizer), logits_(size_t(runner.config().vocab_size)) {}

GenerationStats Generator::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerationOptions& options,
                                    const std::function<void(std::string_view)>& on_text) {
  if (prompt.empty()) fail("empty prompt: nothing to condition generation on");
  if (int64_t(prompt.size()) > runner_.context_size()) {
    fail("the prompt has {} tokens but the context holds {} (raise -c, up to the model's {})", prompt.size(),
         runner_.context_size(), runner_.config().context_length);
  }
  GenerationStats stats;
  stats.prompt_tokens = int64_t(prompt.size());

  // Reuse the cached prefix; at least the last prompt token is evaluated for its logits.
  const auto [mismatch, unused] = std::mismatch(context_.begin(), context_.end(), prompt.begin(), prompt.end());
  const int64_t reuse = runner_.seq_reusable(0, std::min<int64_t>(mismatch - context_.begin(), int64_t(prompt.size()) - 1));
  stats.reused_tokens = reuse;
  // The penalty window holds the prompt before its last token is evaluated:
  // how much of the row the sampler needs depends on it.
  sampler.reset();
  for (const auto t : prompt) sampler.accept(t);
  // Greedy without penalties needs only the best token, and a chain with a
  // top-k only the row's top: the backend can pick or select them on its side
  // of the bus instead of returning every logit.
  const bool runner_picks = sampler.picks_highest_logit();
  const auto evaluate = [&](std::span<const int32_t> tokens, int64_t pos) {
    if (runner_picks) return runner_.forward_greedy(tokens, pos);
    if (const int64_t needed = sampler.top_needed(); needed > 0) {
      runner_.forward_top(tokens, pos, needed, top_);
      return sampler.sample_top(top_);
    }
    runner_.forward(tokens, pos, logits_.data(), false);
    return sampler.sample(logits_);
  };
  const auto prefill_start = std::chrono::steady_clock::now();
  const int32_t picked = evaluate(prompt.subspan(size_t(reuse)), reuse);
  stats.prefill_seconds = seconds_since(prefill_start);
  context_.assign(prompt.begin(), prompt.end());

  Completion completion(tokenizer_, options, runner_.context_size(), prompt);
  // Takes a sampled token: false when generation stops before evaluating it.
  const auto take = [&](int32_t token) {
    const bool more = completion.take(token, int64_t(context_.size()), sampler, on_text);
    stats.generated_tokens = int64_t(completion.generated().size());
    return more;
  };
  const auto decode_start = std::chrono::steady_clock::now();
  if (runner_picks || sampler.runs_without_history()) {
    // The runner picks each step's token itself (greedy, or a chain that needs
    // no history) and feeds it back, and may run ahead of `take`.
    int32_t input = picked;
    if (take(input)) {
      const int64_t pos = int64_t(context_.size());
      const int64_t steps = std::min(options.max_tokens - stats.generated_tokens, runner_.context_size() - pos);
      const auto on_pick = [&](int32_t pick) {
        context_.push_back(input);
        input = pick;
        return take(pick);
      };
      stats.decode_passes = runner_.decode(input, pos, steps, runner_picks ? StepPolicy{} : sampler.step_policy(), on_pick);
    }
  } else {
    for (int32_t token = picked; take(token);) {
      const int32_t next = evaluate({&token, 1}, int64_t(context_.size()));
      ++stats.decode_passes;
      context_.push_back(token);
      token = next;
    }
  }
  stats.decode_seconds = seconds_since(decode_start);
  stats.decode_tokens = stats.decode_passes;
  // The last sampled token is not in the KV cache yet; the next prompt re-evaluates it.
  completion.finish(on_text);
  stats.stop = completion.stop();
  generated_ = completion.generated();
  return stats;
}

}  // namespace nt
