// The generation loop over a scripted ModelRunner: which positions it
// evaluates (prefill once, one pass per accepted token, cached prefixes
// reused), and each way it stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "spm_test_vocab.h"
#include "tokenizer/synthetic_vocab.h"

namespace nt {
namespace {

constexpr int32_t kVocab = 600;

// A model that predicts script[p] from position p (kFallback past the
// script's end); records every forward call. With run_ahead set, its greedy
// decoding evaluates up to that many steps past the last pick handed over,
// as a GPU with queued steps does.
class ScriptedRunner final : public ModelRunner {
 public:
  struct Call {
    std::vector<int32_t> tokens;
    int64_t pos;
  };

  ScriptedRunner(std::vector<int32_t> script, int64_t context) : script_(std::move(script)) {
    config_.vocab_size = kVocab;
    config_.context_length = context;
    init_pages(KvPages(1, context, context));
  }

  const ModelSpec& config() const override { return config_; }
  std::string description() const override { return "scripted"; }
  uint64_t weight_bytes_per_token() const override { return 0; }
  uint64_t kv_bytes_per_position() const override { return 0; }

  // Each sequence run is one call; an entry's logits put 5 on its scripted token.
  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t>,
                     BatchOutputs& out) override {
    for (const SequenceRun& run : runs) {
      Call call{{}, run.pos};
      for (int64_t i = 0; i < run.count; ++i) call.tokens.push_back(batch.entries[size_t(run.first + i)].token);
      calls.push_back(std::move(call));
    }
    if (batch.entries.back().output == Output::Argmax) ++greedy_calls;
    std::vector<float> row(kVocab);
    // Generation asks for the last token's output only.
    for (size_t i = 0; i + 1 < batch.size(); ++i) ASSERT_EQ(batch.entries[i].output, Output::None);
    for (size_t i = 0; i < batch.size(); ++i) {
      const BatchEntry& e = batch.entries[i];
      if (e.output == Output::None) continue;
      std::fill(row.begin(), row.end(), 0.0f);
      row[size_t(e.pos) < script_.size() ? script_[size_t(e.pos)] : kFallback] = 5.0f;
      const size_t slot = size_t(out.index[i]);
      if (e.output == Output::Logits) std::copy(row.begin(), row.end(), out.logits.begin() + ptrdiff_t(slot * kVocab));
      if (e.output == Output::Argmax) out.argmax[slot] = argmax_first(row);
      if (e.output == Output::Top) {
        Candidates top;
        top.assign(row, batch.top_k);
        out.top[slot].assign(top.view().begin(), top.view().end());
      }
    }
  }
  void copy_pages(std::span<const PageCopy>) override {}
  void copy_rows(std::span<const RowCopy>) override {}

  int64_t decode(int32_t token, int64_t pos, int64_t max_steps, const StepPolicy& policy,
                 const std::function<bool(int32_t)>& on_token) override {
    if (!policy.argmax()) ++sampled_runs;
    if (run_ahead == 0 || !policy.argmax()) return ModelRunner::decode(token, pos, max_steps, policy, on_token);
    std::vector<int32_t> picks;
    int64_t handed = 0;
    while (handed < max_steps) {
      while (int64_t(picks.size()) < std::min(max_steps, handed + 1 + run_ahead)) {
        const int32_t input = picks.empty() ? token : picks.back();
        picks.push_back(forward_greedy({&input, 1}, pos + int64_t(picks.size())));
      }
      if (!on_token(picks[size_t(handed++)])) break;
    }
    return handed;
  }

  static constexpr int32_t kFallback = 300;
  std::vector<Call> calls;
  size_t greedy_calls = 0;
  size_t sampled_runs = 0;
  int64_t run_ahead = 0;

 private:
  std::vector<int32_t> script_;
  ModelSpec config_;
};

GenerationOptions options(int64_t max_tokens, std::vector<int32_t> stop_tokens = {},
                          std::vector<std::string> stop_strings = {}) {
  GenerationOptions o;
  o.max_tokens = max_tokens;
  o.stop_tokens = std::move(stop_tokens);
  o.stop_strings = std::move(stop_strings);
  return o;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

class GeneratorTest : public ::testing::Test {
 protected:
  Tokenizer tokenizer{make_synthetic_bpe_vocab(kVocab, SyntheticVocabStyle::SmolLM2)};
  Sampler sampler{greedy(), kVocab};
  std::string text;

  GenerationStats generate(Generator& g, const std::vector<int32_t>& prompt, const GenerationOptions& o) {
    text.clear();
    return g.generate(prompt, sampler, o, [&](std::string_view piece) { text += piece; });
  }
};

TEST_F(GeneratorTest, PrefillsOnceThenDecodesOneTokenPerPass) {
  ScriptedRunner runner({0, 30, 40, 50, 60}, 64);
  Generator g(runner, tokenizer);
  const auto stats = generate(g, {10, 20}, options(4));
  EXPECT_EQ(g.generated(), (std::vector<int32_t>{30, 40, 50, 60}));
  EXPECT_EQ(text, tokenizer.decode(g.generated()));
  EXPECT_EQ(stats.stop, StopReason::TokenLimit);
  EXPECT_EQ(stats.generated_tokens, 4);
  // The last token is sampled but not evaluated.
  ASSERT_EQ(runner.calls.size(), 4u);
  EXPECT_EQ(runner.calls[0].tokens, (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(runner.calls[0].pos, 0);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(runner.calls[i].tokens, std::vector<int32_t>{g.generated()[i - 1]});
    EXPECT_EQ(runner.calls[i].pos, int64_t(i + 1));
  }
  EXPECT_EQ(stats.decode_passes, 3);
  EXPECT_EQ(g.context(), (std::vector<int32_t>{10, 20, 30, 40, 50}));
}

// Greedy sampling without penalties lets the runner pick the token (a GPU
// then copies 4 bytes instead of the logits); penalties need the logits.
TEST_F(GeneratorTest, GreedyStepsLetTheRunnerPickUnlessPenaltiesApply) {
  ScriptedRunner runner({0, 30, 40, 50, 60}, 64);
  Generator g(runner, tokenizer);
  generate(g, {10, 20}, options(4));
  EXPECT_EQ(runner.greedy_calls, runner.calls.size());
  SamplingParams penalised = greedy();
  penalised.repeat_penalty = 1.3f;
  Sampler with_penalty{penalised, kVocab};
  EXPECT_FALSE(with_penalty.picks_highest_logit());
  ScriptedRunner runner2({0, 30, 40, 50, 60}, 64);
  Generator g2(runner2, tokenizer);
  g2.generate(std::vector<int32_t>{10, 20}, with_penalty, options(4), [](std::string_view) {});
  EXPECT_EQ(runner2.greedy_calls, 0u);
  EXPECT_EQ(runner2.calls.size(), runner.calls.size());
  EXPECT_EQ(g2.generated(), g.generated());  // the scripted logit outweighs the penalty
}

TEST(DecodeGreedy, FeedsEachPickBackUntilToldToStop) {
  ScriptedRunner runner({0, 0, 31, 32, 33, 34, 35}, 8);
  std::vector<int32_t> picks;
  EXPECT_EQ(runner.decode_greedy(5, 2, 4, [&](int32_t t) {
    picks.push_back(t);
    return true;
  }), 4);
  EXPECT_EQ(picks, (std::vector<int32_t>{31, 32, 33, 34}));
  ASSERT_EQ(runner.calls.size(), 4u);
  const std::vector<int32_t> inputs = {5, 31, 32, 33};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(runner.calls[i].tokens, std::vector<int32_t>{inputs[i]});
    EXPECT_EQ(runner.calls[i].pos, int64_t(i + 2));
  }
  runner.calls.clear();
  EXPECT_EQ(runner.decode_greedy(5, 2, 4, [](int32_t t) { return t != 32; }), 2);
  EXPECT_EQ(runner.calls.size(), 2u);
  EXPECT_EQ(runner.decode_greedy(5, 2, 0, [](int32_t) { return true; }), 0);
  EXPECT_EQ(runner.calls.size(), 2u);
  try {
    runner.decode_greedy(5, 6, 3, [](int32_t) { return true; });
    FAIL() << "no error for steps past the context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runner.calls.size(), 2u);
}

// A backend that evaluates steps past the pick that stops generation leaves
// the generator's results, and what the next prompt re-evaluates, unchanged.
TEST_F(GeneratorTest, RunnerRunningAheadGeneratesTheSame) {
  const int32_t eos = tokenizer.vocab().eos();
  const std::vector<int32_t> script = {0, 30, 40, 50, eos, 60, 70, 80, 90};
  auto run = [&](int64_t run_ahead) {
    ScriptedRunner runner(script, 12);
    runner.run_ahead = run_ahead;
    Generator g(runner, tokenizer);
    std::vector<std::pair<GenerationStats, std::vector<int32_t>>> out;
    out.emplace_back(generate(g, {10, 20}, options(10, {eos})), g.generated());  // stops at the end of text
    std::vector<int32_t> next = g.context();
    next.insert(next.end(), {50, 61});
    runner.calls.clear();
    out.emplace_back(generate(g, next, options(3)), g.generated());
    out.emplace_back(GenerationStats{}, std::vector<int32_t>{int32_t(runner.calls.front().pos)});
    runner.calls.clear();
    out.emplace_back(generate(g, g.context(), options(100)), g.generated());  // up to the full context
    return std::pair(out, g.context());
  };
  const auto [want, want_context] = run(0);
  const auto [got, got_context] = run(3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].second, want[i].second) << "call " << i;
    EXPECT_EQ(got[i].first.stop, want[i].first.stop) << "call " << i;
    EXPECT_EQ(got[i].first.generated_tokens, want[i].first.generated_tokens) << "call " << i;
    EXPECT_EQ(got[i].first.decode_passes, want[i].first.decode_passes) << "call " << i;
  }
  EXPECT_EQ(want[0].first.stop, StopReason::StopToken);
  EXPECT_EQ(want[3].first.stop, StopReason::ContextFull);
  EXPECT_EQ(got_context, want_context);
}

// A chain that needs no history decodes through the runner's decode
// (which a GPU runs on the device, ahead of the picks), choosing what the
// sampler chooses from each step's whole row; one with penalties steps
// forward() on the host.
TEST_F(GeneratorTest, SampledChainWithoutHistoryDecodesThroughTheRunner) {
  const std::vector<int32_t> script = {0, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130};
  SamplingParams p;
  p.temperature = 5.0f;  // the script's token weighs e^1 against 1 for each of the rest
  p.top_k = 8;  // the script's token and ids 0..6 (equal logits go lowest id first)
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 99;
  for (const float penalty : {1.0f, 1.3f}) {
    p.repeat_penalty = penalty;
    ScriptedRunner runner(script, 64);
    Generator g(runner, tokenizer);
    Sampler s(p, kVocab), reference(p, kVocab);
    for (const int32_t t : {10, 20}) reference.accept(t);
    text.clear();
    g.generate(std::vector<int32_t>{10, 20}, s, options(8), [&](std::string_view piece) { text += piece; });
    std::vector<int32_t> want;
    for (size_t pos = 1; want.size() < 8; ++pos) {  // the last prompt token sits at position 1
      std::vector<float> row(kVocab, 0.0f);
      row[size_t(script[pos])] = 5.0f;
      want.push_back(reference.sample(row));
      reference.accept(want.back());
    }
    EXPECT_EQ(g.generated(), want) << "repeat penalty " << penalty;
    EXPECT_EQ(runner.sampled_runs, penalty == 1.0f ? 1u : 0u) << "repeat penalty " << penalty;
    EXPECT_LT(std::count_if(want.begin(), want.end(), [&](int32_t t) { return t >= 30; }), 8)
        << "a hot chain draws beyond the script's tokens";
  }
}

TEST(ArgmaxFirst, TakesTheFirstLargestAndNeverNaN) {
  EXPECT_EQ(argmax_first(std::vector<float>{1.0f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(argmax_first(std::vector<float>{NAN, 0.5f, 0.25f}), 1);
  EXPECT_EQ(argmax_first(std::vector<float>{-INFINITY, NAN, -INFINITY}), 0);
  EXPECT_EQ(argmax_first(std::vector<float>{-5.0f}), 0);
}

TEST_F(GeneratorTest, StopTokenEndsGenerationWithoutBeingEmitted) {
  const int32_t eos = tokenizer.vocab().eos();
  ScriptedRunner runner({0, 30, eos}, 64);
  Generator g(runner, tokenizer);
  const auto stats = generate(g, {10, 20}, options(10, {eos}));
  EXPECT_EQ(g.generated(), std::vector<int32_t>{30});
  EXPECT_EQ(stats.stop, StopReason::StopToken);
}

TEST_F(GeneratorTest, ReusesTheCachedPrefixOfTheNextPrompt) {
  ScriptedRunner runner({}, 64);
  Generator g(runner, tokenizer);
  generate(g, {10, 20, 30}, options(2));  // context: 10 20 30 300
  runner.calls.clear();
  const auto stats = generate(g, {10, 20, 30, 300, 77, 78}, options(1));
  EXPECT_EQ(stats.reused_tokens, 4);
  ASSERT_EQ(runner.calls.size(), 1u);
  EXPECT_EQ(runner.calls[0].tokens, (std::vector<int32_t>{77, 78}));
  EXPECT_EQ(runner.calls[0].pos, 4);

  // A prompt equal to the cache still re-evaluates its last token for logits;
  // a diverging one restarts from the first difference.
  runner.calls.clear();
  generate(g, {10, 20, 30, 300, 77, 78}, options(1));
  ASSERT_EQ(runner.calls.size(), 1u);
  EXPECT_EQ(runner.calls[0].tokens, std::vector<int32_t>{78});
  EXPECT_EQ(runner.calls[0].pos, 5);
  runner.calls.clear();
  generate(g, {10, 21, 30}, options(1));
  ASSERT_EQ(runner.calls.size(), 1u);
  EXPECT_EQ(runner.calls[0].tokens, (std::vector<int32_t>{21, 30}));
  EXPECT_EQ(runner.calls[0].pos, 1);
}

TEST_F(GeneratorTest, StopsWhenTheContextIsFull) {
  ScriptedRunner runner({}, 6);
  Generator g(runner, tokenizer);
  const auto stats = generate(g, {10, 20, 30, 40}, options(100));
  EXPECT_EQ(stats.stop, StopReason::ContextFull);
  // Tokens at positions 4 and 5 are evaluated; the one sampled from position 5 is emitted unevaluated.
  EXPECT_EQ(stats.generated_tokens, 3);
  EXPECT_EQ(runner.calls.back().pos, 5);
}

TEST_F(GeneratorTest, StopStringCutsTheTextAndEndsGeneration) {
  const auto words = tokenizer.encode("hello world and more", false);
  ASSERT_GE(words.size(), 3u);
  ScriptedRunner runner(words, 64);  // the prompt's one token at position 0 predicts words[0], ...
  Generator g(runner, tokenizer);
  const auto stats = generate(g, {10}, options(50, {}, {" world"}));
  EXPECT_EQ(stats.stop, StopReason::StopString);
  EXPECT_EQ(text, "hello");
}

// With a SentencePiece vocabulary a reply to a prompt with text continues that
// text: its first piece keeps its space. After BOS alone it starts the text.
TEST(GeneratorText, ContinuesThePromptsTextWithSentencePiece) {
  const Tokenizer spm(test::byte_fallback_spm_vocab({"\xE2\x96\x81" "dog", "\xE2\x96\x81" "was"}));
  const int32_t bos = 1, dog = 259, was = 260;
  Sampler sampler{greedy(), kVocab};
  auto reply = [&](std::vector<int32_t> prompt) {
    std::vector<int32_t> script(prompt.size() - 1, 0);
    script.insert(script.end(), {was, dog});
    ScriptedRunner runner(script, 64);
    Generator g(runner, spm);
    std::string text;
    g.generate(prompt, sampler, options(2), [&](std::string_view piece) { text += piece; });
    return text;
  };
  EXPECT_EQ(reply({bos, dog}), " was dog");  // "dog" was printed as the prompt
  EXPECT_EQ(reply({bos}), "was dog");
}

TEST_F(GeneratorTest, RejectsEmptyAndOverlongPrompts) {
  ScriptedRunner runner({}, 4);
  Generator g(runner, tokenizer);
  EXPECT_THROW(generate(g, {}, options(1)), Error);
  try {
    generate(g, {1, 2, 3, 4, 5}, options(1));
    FAIL() << "no error for a prompt longer than the context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds 4"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(runner.calls.empty());
}

}  // namespace
}  // namespace nt
