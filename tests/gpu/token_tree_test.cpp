// Token trees on the CUDA runner: a tree pass's rows see the cached prefix
// and their own ancestors only, rotated for their depth (each node's logits
// against a chain pass of its root-to-node path), an accepted path's rows
// move down their slot (seq_keep) and continue as the chain's would, and
// speculative decoding with trees gives plain greedy decoding's tokens:
// stories260K resident, streamed and with CPU layers (float weights follow
// llama2.c's path exactly), SmolLM2 resident and streamed. The SmolLM2 chain
// test beside them is the control: verification runs of several tokens round
// as the CUDA runner's multi-row kernels do, trees or not.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/runner/cuda_runner.h"
#include "engine/generator.h"
#include "engine/lookup_draft.h"
#include "engine/self_draft.h"
#include "engine/speculative.h"
#include "gpu_test_util.h"
#include "stories.h"
#include "streaming_budgets.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

struct Model {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

Model open_model(const std::string& path) {
  Model m;
  m.file = GgufFile::open(path);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.file->header(), path));
  return m;
}

// Entries of a tree below the pending token (entry 0): parents within the run.
const std::vector<int32_t> kTokens = {403, 407, 261, 378, 300, 291, 376, 400, 428, 286};
const std::vector<int32_t> kParents = {-1, 0, 0, 1, 2, 1, 3, 5, 6, 4};
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 300, 429};

std::vector<int32_t> path_tokens(int32_t node) {
  std::vector<int32_t> path;
  for (int32_t n = node; n >= 0; n = kParents[size_t(n)]) path.insert(path.begin(), kTokens[size_t(n)]);
  return path;
}

void prefill(ModelRunner& runner, SeqId seq) {
  runner.seq_truncate(seq, 0);
  Batch batch;
  batch.add_run(kPrompt, 0, seq, Output::None);
  BatchOutputs out;
  runner.forward(batch, out);
}

// The tree after the prompt on `seq`, every entry asking for its logits.
BatchOutputs tree_pass(ModelRunner& runner, SeqId seq) {
  prefill(runner, seq);
  Batch batch;
  for (size_t i = 0; i < kTokens.size(); ++i) {
    const int32_t parent = kParents[i];
    const int64_t pos = parent < 0 ? int64_t(kPrompt.size()) : batch.entries[size_t(parent)].pos + 1;
    batch.add(kTokens[i], pos, seq, Output::Logits, true, parent);
  }
  BatchOutputs out;
  runner.forward(batch, out);
  return out;
}

// The logits after `tokens` run as a chain after the prompt on `seq`.
std::vector<float> chain_logits(ModelRunner& runner, SeqId seq, const std::vector<int32_t>& tokens) {
  prefill(runner, seq);
  Batch batch;
  batch.add_run(tokens, int64_t(kPrompt.size()), seq, Output::Logits);
  for (BatchEntry& e : batch.entries) e.stepwise = true;
  BatchOutputs out;
  runner.forward(batch, out);
  return out.logits;
}

double relative(std::span<const float> got, const std::vector<float>& want) {
  return test::relative_error(std::vector<float>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()));
}

using Placements = std::vector<std::pair<std::string, CudaRunnerOptions>>;

Placements stories_placements(const GgufFile& file, int64_t context) {
  CudaRunnerOptions two;
  two.max_sequences = 2;
  // stories260K's 5 layers: 1 in VRAM and 4 in pinned RAM, 2 of those computed by the host.
  CudaRunnerOptions hybrid = test::budgets_for(file, context, 1, 4, two);
  hybrid.cpu_layers = 2;
  hybrid.cpu_passes.all_up_to = 64;  // the host computes its layers in the tree passes
  hybrid.cpu_threads = 4;
  CudaRunnerOptions streamed_host = hybrid;
  streamed_host.cpu_passes.all_up_to = 1;  // tree passes stream the host's layers: their rows cross
  CudaRunnerOptions shared_host = streamed_host;
  shared_host.cpu_passes.wider = {{64, 1}};  // tree passes: one host layer on each side
  return {{"resident", two},
          {"streamed", test::budgets_for(file, context, 1, 1, two)},
          {"CPU layers", hybrid},
          {"CPU layers, streamed in trees", streamed_host},
          {"CPU layers, one of them streamed in trees", shared_host}};
}

TEST(TokenTreeGpu, EachNodeSeesItsAncestorsOnlyAsItsPathsChainWould) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const Model m = open_model(path);
  const int64_t vocab = int64_t(m.tokenizer->vocab().size());
  for (const auto& [name, options] : stories_placements(*m.file, 128)) {
    SCOPED_TRACE(name);
    auto runner = make_cuda_runner(*m.file, 128, options);
    const SeqId other = runner->seq_alloc();
    const BatchOutputs tree = tree_pass(*runner, 0);
    for (int32_t i = 0; i < int32_t(kTokens.size()); ++i) {
      const std::vector<float> chain = chain_logits(*runner, other, path_tokens(i));
      EXPECT_LT(relative(tree.logits_of(size_t(i), vocab), chain), 1e-4) << "node " << i;
    }
    // Siblings: were node 2 to see node 1, it would be the chain of the three.
    const std::vector<float> causal = chain_logits(*runner, other, {kTokens[0], kTokens[1], kTokens[2]});
    EXPECT_GT(relative(tree.logits_of(2, vocab), causal), 1e-2);
  }
}

TEST(TokenTreeGpu, AKeptPathContinuesAsItsChain) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const Model m = open_model(path);
  const int32_t next = 428;
  for (const auto& [name, options] : stories_placements(*m.file, 128)) {
    for (const int32_t node : {8, 9}) {  // entries 1, 3, 6, 8 and 2, 4, 9: moved down the slot
      SCOPED_TRACE(name + ", node " + std::to_string(node));
      auto runner = make_cuda_runner(*m.file, 128, options);
      const SeqId other = runner->seq_alloc();
      tree_pass(*runner, 0);
      const int64_t start = int64_t(kPrompt.size());
      std::vector<int64_t> kept;
      for (int32_t n = node; n > 0; n = kParents[size_t(n)]) kept.insert(kept.begin(), start + n);
      runner->seq_keep(0, start + 1, kept);
      Batch step;
      step.add(next, start + 1 + int64_t(kept.size()), 0, Output::Logits, true);
      BatchOutputs out;
      runner->forward(step, out);
      std::vector<int32_t> chain = path_tokens(node);
      chain.push_back(next);
      // The step runs the one-token kernels (on the host, with CPU layers) and the chain a pass's: rounding apart.
      EXPECT_LT(relative(out.logits, chain_logits(*runner, other, chain)), 1e-3);
    }
  }
}

struct Decoded {
  std::vector<int32_t> tokens;
  SpeculationStats speculation;
};

Decoded plain(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt, int64_t n) {
  Generator generator(runner, tokenizer);
  Sampler greedy(greedy_sampling(), runner.config().vocab_size);
  GenerationOptions options;
  options.max_tokens = n;
  generator.generate(prompt, greedy, options, [](std::string_view) {});
  return {generator.generated(), {}};
}

Decoded speculated(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource& draft, const std::vector<int32_t>& prompt,
                   int64_t n, int64_t tree_tokens) {
  SpeculativeGenerator generator(runner, tokenizer, draft, 8, 0, tree_tokens);
  Sampler greedy(greedy_sampling(), runner.config().vocab_size);
  GenerationOptions options;
  options.max_tokens = n;
  const SpeculativeStats stats = generator.generate(prompt, greedy, options, [](std::string_view) {});
  return {generator.generated(), stats.speculation};
}

// Lookup and a half-depth self draft, with trees of `tree_tokens` (0: chains), against plain greedy on each placement.
void expect_trees_are_plain_greedy(const Model& m, int64_t context, const Placements& placements,
                                   const std::vector<std::vector<int32_t>>& prompts, int64_t n, int64_t tree_tokens) {
  auto resident = make_cuda_runner(*m.file, context, CudaRunnerOptions{});
  for (const std::vector<int32_t>& prompt : prompts) {
    const Decoded want = plain(*resident, *m.tokenizer, prompt, n);
    for (const auto& [name, options] : placements) {
      auto runner = make_cuda_runner(*m.file, context, options);
      LookupDraft lookup;
      const Decoded by_lookup = speculated(*runner, *m.tokenizer, lookup, prompt, n, tree_tokens);
      EXPECT_EQ(by_lookup.tokens, want.tokens) << name << ", lookup, tree " << tree_tokens;
      SelfDraft self(*runner, 0, default_self_draft_layers(runner->config().n_layers));
      const Decoded by_self = speculated(*runner, *m.tokenizer, self, prompt, n, tree_tokens);
      EXPECT_EQ(by_self.tokens, want.tokens) << name << ", self draft, tree " << tree_tokens;
      std::printf("%s, tree %lld: lookup %.2f, self draft %.2f tokens per pass\n", name.c_str(),
                  static_cast<long long>(tree_tokens), by_lookup.speculation.tokens_per_pass(),
                  by_self.speculation.tokens_per_pass());
    }
  }
}

TEST(TokenTreeGpu, Stories260KTreesArePlainGreedy) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const Model m = open_model(path);
  const std::vector<std::vector<int32_t>> prompts = {
      m.tokenizer->encode("Once upon a time", true), m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom", true)};
  for (const int64_t tree_tokens : {4, 16, 48}) {
    expect_trees_are_plain_greedy(m, 256, stories_placements(*m.file, 256), prompts, 120, tree_tokens);
  }
}

std::vector<std::vector<int32_t>> smollm2_prompts(const Tokenizer& tokenizer) {
  return {tokenizer.encode("The lighthouse stood at the end of the harbour wall. Every night the keeper climbed its "
                           "hundred and twelve steps.\n\nThe lighthouse stood", true),
          tokenizer.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", true)};
}

Placements smollm2_placements(const GgufFile& file, int64_t context) {
  return {{"resident", CudaRunnerOptions{}}, {"streamed", test::budgets_for(file, context, 10, 10, CudaRunnerOptions{})}};
}

TEST(TokenTreeGpu, SmolLM2TreesArePlainGreedy) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model(path);
  for (const int64_t tree_tokens : {16, 64}) {
    expect_trees_are_plain_greedy(m, 512, smollm2_placements(*m.file, 512), smollm2_prompts(*m.tokenizer), 48,
                                  tree_tokens);
  }
}

// A generation that crosses the short-context decode's 1024 keys: trees of
// the lookup draft run as stepwise rows before, and the runner asks for
// chains once a tree's rows would attend past it (verifies_trees_exactly),
// so the output stays plain greedy decoding's on both sides.
TEST(TokenTreeGpu, SmolLM2TreesBecomeChainsPastTheShortContextDecode) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model(path);
  std::string text;
  for (int i = 0; i < 54; ++i) text += "The lighthouse stood at the end of the harbour wall. Every night the keeper climbed. ";
  const std::vector<int32_t> prompt = m.tokenizer->encode(text, true);
  const int64_t context = 2048, tree_tokens = 64, n = 128;
  ASSERT_LT(int64_t(prompt.size()) + tree_tokens, 1024);
  ASSERT_GT(int64_t(prompt.size()) + n, 1024);
  auto resident = make_cuda_runner(*m.file, context, CudaRunnerOptions{});
  const Decoded want = plain(*resident, *m.tokenizer, prompt, n);
  for (const auto& [name, options] : smollm2_placements(*m.file, context)) {
    auto runner = make_cuda_runner(*m.file, context, options);
    EXPECT_TRUE(runner->verifies_trees_exactly(int64_t(prompt.size()), tree_tokens)) << name;
    EXPECT_FALSE(runner->verifies_trees_exactly(1024 - tree_tokens / 2, tree_tokens)) << name;
    LookupDraft lookup;
    const Decoded got = speculated(*runner, *m.tokenizer, lookup, prompt, n, tree_tokens);
    EXPECT_EQ(got.tokens, want.tokens) << name;
    EXPECT_GT(got.speculation.accepted, 0) << name;
  }
}

// The control: chains on the same prompts and placements.
TEST(TokenTreeGpu, SmolLM2ChainsArePlainGreedy) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model(path);
  expect_trees_are_plain_greedy(m, 512, smollm2_placements(*m.file, 512), smollm2_prompts(*m.tokenizer), 48, 0);
}

TEST(TokenTreeGpu, RefusesATreeLongerThanTheBatch) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const Model m = open_model(path);
  CudaRunnerOptions o;
  o.max_batch = 4;
  auto runner = make_cuda_runner(*m.file, 128, o);
  Batch batch;
  for (int32_t i = 0; i < 5; ++i) batch.add(kTokens[size_t(i)], i == 0 ? 0 : 1, 0, Output::Argmax, true, i == 0 ? -1 : 0);
  BatchOutputs out;
  EXPECT_THROW(runner->forward(batch, out), Error);
}

}  // namespace
}  // namespace nt
