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

void propose_draft(DraftSource& source, std::span<const int32_t> context, int64_t max_depth, bool tree,
                   int64_t max_nodes, std::vector<int32_t>& chain, DraftTree& draft) {
  if (tree) return source.propose_tree(context, max_depth, max_nodes, draft);
  chain.clear();
  source.propose(context, max_depth, chain);
  draft.assign_chain(chain);
}

void DraftSource::propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) {
  std::vector<int32_t> chain;
  propose(context, std::min(max_depth, max_nodes), chain);
  tree.assign_chain(chain);
}

void check_draft_shape(int64_t draft_max, int64_t tree_tokens) {
  if (draft_max < 1) fail("speculative decoding drafts at least 1 token per pass, not {}", draft_max);
  if (tree_tokens != 0 && tree_tokens < 2) {
    fail("a token tree of {} tokens per pass: at least 2 (the pending token and a draft), or 0 for chains", tree_tokens);
  }
}

SpeculativeGenerator::SpeculativeGenerator(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource& draft,
                                           int64_t draft_max, SeqId seq, int64_t tree_tokens)
    : runner_(runner),
      tokenizer_(tokenizer),
      draft_source_(draft),
      draft_max_(draft_max),
      seq_(seq),
      tree_tokens_(tree_tokens),
      verifier_(runner.config().vocab_size) {
  check_draft_shape(draft_max, tree_tokens);
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
  const Output output = verification_output(sampler);
  sampler.reset();
  for (const int32_t t : prompt) sampler.accept(t);

  // Reuse the cached prefix; at least the last prompt token is evaluated for its pick.
  const auto [mismatch, unused] = std::mismatch(context_.begin(), context_.end(), prompt.begin(), prompt.end());
  const int64_t reuse = runner_.seq_reusable(seq_, std::min<int64_t>(mismatch - context_.begin(), int64_t(prompt.size()) - 1));
  gen.reused_tokens = reuse;
  const auto prefill_start = std::chrono::steady_clock::now();
  // The prompt as one chunk, exactly as Generator prefills it.
  batch_.clear();
  batch_.add_run(prompt.subspan(size_t(reuse)), reuse, seq_, output);
  runner_.forward(batch_, out_);
  // The target's next token, not yet in the cache.
  int32_t pending = output == Output::Argmax ? out_.argmax.at(0) : sampler.sample(out_.logits);
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
    const int64_t length = int64_t(context_.size());
    context_.push_back(pending);
    const int64_t depth = draft_room(draft_max_, options.max_tokens, gen.generated_tokens, context_size, length);
    const int64_t nodes = tree_room(tree_tokens_, context_size, length);
    propose_draft(draft_source_, context_, depth, drafts_tree(runner_, tree_tokens_, length, nodes), nodes, chain_, draft_);
    // Verify: the pending token and the draft in one run, each asking for what the target keeps after it.
    batch_.clear();
    add_verification(batch_, pending, length, seq_, draft_, output);
    runner_.forward(batch_, out_);
    ++spec.passes;
    spec.drafted += int64_t(draft_.size());

    // The kept drafts are in the cache; the target's own last pick is the next pending token.
    const Verification v = verifier_.verify({out_, 0, draft_, draft_source_.distributions()}, sampler,
                                            [&](int32_t token, bool drafted) {
                                              const bool go_on = take(token);
                                              if (drafted && go_on) context_.push_back(token);
                                              return go_on;
                                            });
    spec.accepted += v.accepted;
    pending = v.last;
    more = v.more;
    // Rollback: the cache keeps what context_ holds, the rejected drafts go.
    keep_verified(runner_, seq_, length, verifier_.path(), int64_t(context_.size()) - length - 1);
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
