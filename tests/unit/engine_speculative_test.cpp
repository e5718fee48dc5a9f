// Speculative greedy decoding: the n-gram lookup draft on its own, chains
// and token trees; then on the real models, every draft source (chains and
// trees) against plain greedy decoding (whose stories260K output is
// llama2.c's golden ids), the pass accounting with drafts that are known to
// be right or wrong, rollback, and the stepwise run that keeps a
// verification pass's numbers those of one-token steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine/draft_calibration.h"
#include "engine/draft_tree.h"
#include "engine/generator.h"
#include "engine/lookup_draft.h"
#include "engine/model_draft.h"
#include "engine/prompts.h"
#include "engine/self_draft.h"
#include "engine/speculative.h"
#include "engine_test_models.h"
#include "model/quantize_model.h"
#include "sampling_test_util.h"

namespace nt {
namespace {

std::vector<int32_t> lookup(std::vector<int32_t> context, int64_t max, int64_t max_ngram = 3, int64_t min_ngram = 1) {
  LookupDraft draft(max_ngram, min_ngram);
  std::vector<int32_t> out;
  draft.propose(context, max, out);
  return out;
}

TEST(LookupDraft, ProposesWhatFollowedTheLongestMatchingSuffix) {
  // "1 2 3" recurs: what followed it, up to max.
  EXPECT_EQ(lookup({1, 2, 3, 9, 8, 7, 1, 2, 3}, 2), (std::vector<int32_t>{9, 8}));
  // The 2-gram "5 6" beats the more recent 1-gram "6".
  EXPECT_EQ(lookup({5, 6, 4, 6, 7, 5, 6}, 1), (std::vector<int32_t>{4}));
  // Only the last token recurs: its most recent earlier occurrence.
  EXPECT_EQ(lookup({4, 8, 2, 6, 9, 2, 7, 2}, 2), (std::vector<int32_t>{7, 2}));
  // Past the end of the context the continuation repeats what it copied: a loop.
  EXPECT_EQ(lookup({4, 8, 2, 6, 9, 2, 7, 2}, 5), (std::vector<int32_t>{7, 2, 7, 2, 7}));
  EXPECT_EQ(lookup({3, 3}, 5), (std::vector<int32_t>{3, 3, 3, 3, 3}));
  EXPECT_EQ(lookup({5, 1, 2, 3, 1, 2, 3}, 7), (std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1}));
  // max_ngram bounds the match: with 1, the last "3" is matched alone.
  EXPECT_EQ(lookup({1, 2, 3, 5, 0, 3, 6, 1, 2, 3}, 2, 1), (std::vector<int32_t>{6, 1}));
}

TEST(LookupDraft, ProposesNothingForANewTokenOrNoRoom) {
  EXPECT_TRUE(lookup({1, 2, 3, 4}, 8).empty());
  EXPECT_TRUE(lookup({7}, 8).empty());
  EXPECT_TRUE(lookup({1, 2, 1, 2}, 0).empty());
  EXPECT_THROW(LookupDraft(0, 0), Error);
  EXPECT_THROW(LookupDraft(2, 3), Error);
}

TEST(LookupDraft, ByDefaultIgnoresOneTokenMatches) {
  LookupDraft draft;
  std::vector<int32_t> out;
  draft.propose(std::vector<int32_t>{4, 8, 2, 6, 9, 2}, 4, out);
  EXPECT_TRUE(out.empty());
  draft.propose(std::vector<int32_t>{4, 8, 2, 6, 8, 2}, 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{6, 8, 2}));
}

TEST(LookupDraft, APredictionDraftsTheAnswerFromItsFirstToken) {
  LookupDraft draft;
  draft.predict({7, 8, 9, 10});
  std::vector<int32_t> out;
  // The prompt (1 2 3) and a first token that begins the prediction: the rest of it.
  draft.propose(std::vector<int32_t>{1, 2, 3, 7}, 8, out);
  EXPECT_EQ(out, (std::vector<int32_t>{8, 9, 10}));  // it ends with the prediction, no loop
  // A first token the prediction does not begin with: nothing (the context has no match either).
  out.clear();
  draft.propose(std::vector<int32_t>{1, 2, 3, 5}, 8, out);
  EXPECT_TRUE(out.empty());
}

TEST(LookupDraft, APredictionIsReadForwardsAndComesBeforeTheContext) {
  // "4 5" recurs in the prediction: after the first occurrence, the second is next.
  const std::vector<int32_t> prediction = {4, 5, 1, 4, 5, 2, 3};
  LookupDraft draft;
  draft.predict(prediction);
  std::vector<int32_t> out;
  draft.propose(std::vector<int32_t>{9, 4, 5}, 2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 4}));
  out.clear();
  draft.propose(std::vector<int32_t>{9, 4, 5, 1, 4, 5}, 2, out);  // past the first: the second
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3}));
  // A new output (a shorter context) reads from the start again.
  out.clear();
  draft.propose(std::vector<int32_t>{8, 4, 5}, 2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 4}));
  // The prediction before the context's own match ("4 5 6" in the context).
  out.clear();
  draft.propose(std::vector<int32_t>{4, 5, 6, 0, 4, 5}, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{1}));
  // Where the prediction has no match, the context's.
  out.clear();
  draft.propose(std::vector<int32_t>{6, 2, 0, 6, 2}, 3, out);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 6, 2}));
  // A tree: the prediction's continuation, then the context's.
  DraftTree tree;
  draft.propose_tree(std::vector<int32_t>{4, 5, 6, 0, 4, 5}, 2, 8, tree);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{1, 4, 2, 3, 6, 0}));
}

DraftTree lookup_tree(std::vector<int32_t> context, int64_t max_depth, int64_t max_nodes) {
  LookupDraft draft;
  DraftTree tree;
  draft.propose_tree(context, max_depth, max_nodes, tree);
  return tree;
}

TEST(LookupDraft, ATreeBranchesOverEarlierMatchesMostRecentFirst) {
  // "1 2 3" followed by 6, then 5, then 4 (most recent first); each continues with 1.
  const std::vector<int32_t> context = {1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 6, 1, 2, 3};
  DraftTree tree = lookup_tree(context, 2, 8);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{6, 1, 5, 1, 4, 1}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, -1, 2, -1, 4}));
  // The node budget cuts the later matches.
  tree = lookup_tree(context, 2, 3);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{6, 1, 5}));
  // Continuations that start alike share their first nodes.
  tree = lookup_tree({7, 8, 9, 1, 7, 8, 9, 2, 7, 8}, 3, 8);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{9, 2, 7, 1, 7}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 1, 0, 3}));
}

TEST(LookupDraft, ATreeWithRoomForOneBranchIsTheChain) {
  const std::vector<int32_t> context = {5, 6, 4, 6, 7, 5, 6, 1, 2, 5, 6};
  for (const int64_t max : {1, 3, 8}) {
    std::vector<int32_t> chain;
    LookupDraft().propose(context, max, chain);
    const DraftTree tree = lookup_tree(context, max, int64_t(chain.size()));
    EXPECT_EQ(tree.tokens, chain) << max;
    EXPECT_TRUE(tree.is_chain()) << max;
  }
  // A loop's tree is its chain too.
  std::vector<int32_t> loop;
  LookupDraft().propose(std::vector<int32_t>{9, 4, 5, 4, 5}, 6, loop);
  EXPECT_EQ(loop, (std::vector<int32_t>{4, 5, 4, 5, 4, 5}));
  EXPECT_EQ(lookup_tree({9, 4, 5, 4, 5}, 6, 6).tokens, loop);
  EXPECT_TRUE(lookup_tree({1, 2, 3, 4}, 8, 8).empty());
  EXPECT_TRUE(lookup_tree({1, 2, 1, 2}, 0, 8).empty());
}

TEST(DraftTree, NodesFollowTheirParents) {
  DraftTree tree;
  EXPECT_EQ(tree.add(4, -1), 0);
  EXPECT_EQ(tree.add(5, 0), 1);
  EXPECT_EQ(tree.add(6, -1), 2);
  EXPECT_EQ(tree.add(7, 1), 3);
  EXPECT_THROW(tree.add(8, 4), Error);
  EXPECT_THROW(tree.add(8, -2), Error);
  EXPECT_EQ(tree.depth(3), 3);
  EXPECT_EQ(tree.depth(2), 1);
  EXPECT_EQ(tree.child(-1, 6), 2);
  EXPECT_EQ(tree.child(0, 6), -1);
  EXPECT_FALSE(tree.is_chain());
  tree.assign_chain(std::vector<int32_t>{3, 2, 1});
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_TRUE(tree.is_chain());
  // Its verification run: the pending token at 10, each node at its parent's position plus one.
  tree.clear();
  tree.add(4, -1);
  tree.add(5, -1);
  tree.add(6, 1);
  Batch batch;
  add_verification(batch, 9, 10, 3, tree, Output::Argmax);
  ASSERT_EQ(batch.size(), 4u);
  EXPECT_EQ(batch.entries[2].pos, 11);
  EXPECT_EQ(batch.entries[3].pos, 12);
  EXPECT_EQ(batch.entries[3].parent, 2);
  EXPECT_TRUE(sequence_runs(batch).at(0).tree);
  EXPECT_TRUE(batch.entries[3].stepwise);
}

TEST(DraftCalibration, AnswersTheDraftsProbabilityUntilTheTargetSaysOtherwise) {
  DraftCalibration c;
  EXPECT_DOUBLE_EQ(c.acceptance(0.5, true), 0.5);
  EXPECT_DOUBLE_EQ(c.acceptance(0.3, false), 0.3);
  for (int i = 0; i < 100; ++i) {
    c.record(0.5, true, true);    // a likeliest candidate the target always keeps
    c.record(0.3, false, false);  // a runner-up it never does
  }
  EXPECT_GT(c.acceptance(0.5, true), 0.95);
  EXPECT_LT(c.acceptance(0.3, false), 0.05);
  // Other probabilities, and the same probability in the other rank, keep their own counts.
  EXPECT_DOUBLE_EQ(c.acceptance(0.9, true), 0.9);
  EXPECT_DOUBLE_EQ(c.acceptance(0.5, false), 0.5);
}

TEST(StepwiseRuns, ARunIsStepwiseOrNotAsAWhole) {
  Batch batch;
  batch.add(5, 0, 0, Output::None, true);
  batch.add(6, 1, 0, Output::Argmax, true);
  batch.add(7, 0, 1, Output::Argmax);
  const std::vector<SequenceRun> runs = sequence_runs(batch);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(runs[0].stepwise);
  EXPECT_FALSE(runs[1].stepwise);
  batch.add(8, 1, 1, Output::Argmax, true);
  EXPECT_THROW(sequence_runs(batch), Error);
}

std::unique_ptr<ModelRunner> cpu_runner(const std::shared_ptr<const GgufFile>& file, int64_t context,
                                        int64_t sequences = 1, int threads = 0) {
  CpuRunnerOptions options;
  options.context = context;
  options.sequences = sequences;
  options.threads = threads;
  return make_cpu_runner(file, options);
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  StopReason stop = StopReason::TokenLimit;
};

Result plain_greedy(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                    const GenerationOptions& options) {
  Generator generator(runner, tokenizer);
  Sampler sampler(greedy_sampling(), runner.config().vocab_size);
  Result r;
  r.stop = generator.generate(prompt, sampler, options, [&](std::string_view t) { r.text += t; }).stop;
  r.tokens = generator.generated();
  return r;
}

struct SpecResult {
  Result result;
  SpeculativeStats stats;
  int64_t cached = 0;  // the sequence's length afterwards
};

SpecResult speculative(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource& draft, int64_t draft_max,
                       const std::vector<int32_t>& prompt, const GenerationOptions& options, int64_t tree_tokens = 0) {
  SpeculativeGenerator generator(runner, tokenizer, draft, draft_max, 0, tree_tokens);
  Sampler sampler(greedy_sampling(), runner.config().vocab_size);
  SpecResult r;
  r.stats = generator.generate(prompt, sampler, options, [&](std::string_view t) { r.result.text += t; });
  r.result.stop = r.stats.generation.stop;
  r.result.tokens = generator.generated();
  r.cached = runner.seq_length(0);
  EXPECT_EQ(r.cached, int64_t(generator.context().size()));
  return r;
}

// The invariants of any speculative run, whatever drafts it.
void expect_consistent(const SpecResult& r, const std::vector<int32_t>& prompt) {
  const SpeculationStats& s = r.stats.speculation;
  EXPECT_LE(s.accepted, s.drafted);
  EXPECT_EQ(r.stats.generation.decode_tokens, s.passes + s.accepted);
  const int64_t generated = int64_t(r.result.tokens.size());
  // The prefill's pick, then each pass's confirmed drafts and own pick;
  // only a stop token or string ends a pass early.
  if (r.result.stop == StopReason::TokenLimit || r.result.stop == StopReason::ContextFull) {
    EXPECT_EQ(generated, 1 + s.passes + s.accepted);
  } else {
    EXPECT_LE(generated, 1 + s.passes + s.accepted);
  }
  // Rollback: the cache holds the prompt and what was generated, but the last token.
  const int64_t in_cache = int64_t(prompt.size()) + generated - (r.result.stop == StopReason::StopToken ? 0 : 1);
  EXPECT_EQ(r.cached, in_cache);
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.stop, want.stop) << what;
}

// Each draft source, on a fresh runner, against plain greedy decoding;
// with tree_tokens, drafting token trees of that many tokens per pass.
void expect_every_source_matches(const std::shared_ptr<const GgufFile>& file, const Tokenizer& tokenizer,
                                 int64_t context, const std::vector<int32_t>& prompt, const GenerationOptions& options,
                                 const std::vector<int64_t>& self_layers, const std::vector<int64_t>& draft_maxes,
                                 const std::string& what, int64_t tree_tokens = 0) {
  auto plain_runner = cpu_runner(file, context);
  const Result want = plain_greedy(*plain_runner, tokenizer, prompt, options);
  const std::string shape = tree_tokens > 0 ? ", tree " + std::to_string(tree_tokens) : "";
  for (const int64_t draft_max : draft_maxes) {
    {
      auto runner = cpu_runner(file, context);
      LookupDraft draft;
      const SpecResult got = speculative(*runner, tokenizer, draft, draft_max, prompt, options, tree_tokens);
      expect_same(got.result, want, what + ", lookup, draft-max " + std::to_string(draft_max) + shape);
      expect_consistent(got, prompt);
    }
    for (const int64_t layers : self_layers) {
      auto runner = cpu_runner(file, context);
      SelfDraft draft(*runner, 0, layers);
      const SpecResult got = speculative(*runner, tokenizer, draft, draft_max, prompt, options, tree_tokens);
      expect_same(got.result, want,
                  what + ", self " + std::to_string(layers) + " layers, draft-max " + std::to_string(draft_max) + shape);
      expect_consistent(got, prompt);
    }
  }
}

struct Stories {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

Stories open_stories() {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) return {};
  Stories s;
  s.file = GgufFile::open(path);
  s.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(s.file->header(), path));
  return s;
}

TEST(SpeculativeStories, PlainGreedyIsLlama2csAndEveryDraftSourceIsPlainGreedy) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::vector<int32_t> golden = test::stories260k_golden_ids();
  ASSERT_EQ(golden.size(), 64u) << "golden ids not found in the shared models' README (format changed?)";
  GenerationOptions options;
  options.max_tokens = 64;
  auto runner = cpu_runner(s.file, 256);
  ASSERT_EQ(plain_greedy(*runner, *s.tokenizer, {1}, options).tokens, golden) << "plain greedy left llama2.c's path";

  const int64_t n_layers = runner->config().n_layers;
  ASSERT_GE(n_layers, 3);
  const std::vector<int64_t> self_layers = {1, default_self_draft_layers(n_layers), n_layers - 1};
  expect_every_source_matches(s.file, *s.tokenizer, 256, {1}, options, self_layers, {1, 3, 8}, "BOS");
  options.max_tokens = 200;
  for (const std::string prompt : {"Once upon a time", "Lily and Tom went to the park. Lily and Tom"}) {
    expect_every_source_matches(s.file, *s.tokenizer, 256, s.tokenizer->encode(prompt, true), options, self_layers,
                                {2, 8}, prompt);
  }
}

TEST(SpeculativeStories, TokenTreesFromEverySourceArePlainGreedy) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  GenerationOptions options;
  options.max_tokens = 200;
  const int64_t n_layers = cpu_runner(s.file, 16)->config().n_layers;
  for (const std::string prompt : {"Once upon a time", "Lily and Tom went to the park. Lily and Tom"}) {
    for (const int64_t tree_tokens : {4, 16}) {
      expect_every_source_matches(s.file, *s.tokenizer, 256, s.tokenizer->encode(prompt, true), options,
                                  {1, n_layers - 1}, {3, 8}, prompt, tree_tokens);
    }
  }
  // A tree that fills the context: its nodes need positions too.
  options.max_tokens = 300;
  expect_every_source_matches(s.file, *s.tokenizer, 40, s.tokenizer->encode("Once upon a time", true), options, {2},
                              {8}, "context full", 16);
}

TEST(SpeculativeStories, StopsLikePlainGreedyAtStopStringsTokensAndAFullContext) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::vector<int32_t> prompt = s.tokenizer->encode("Once upon a time", true);
  GenerationOptions options;
  options.max_tokens = 300;
  options.stop_strings = {"."};
  expect_every_source_matches(s.file, *s.tokenizer, 256, prompt, options, {2}, {8}, "stop string");
  options.stop_strings = {};
  options.stop_tokens = {2};  // EOS
  expect_every_source_matches(s.file, *s.tokenizer, 512, prompt, options, {2}, {8}, "stop token");
  options.stop_tokens = {};
  expect_every_source_matches(s.file, *s.tokenizer, 40, prompt, options, {2}, {8}, "context full");
}

// Drafts what plain greedy decoding gives (`truth`: prompt and output), with
// `right` tokens of each draft correct and the rest wrong; checks that each
// pass finds the cache rolled back to just before the context's last token.
class ScriptedDraft final : public DraftSource {
 public:
  ScriptedDraft(const ModelRunner& runner, std::vector<int32_t> truth, int64_t right)
      : runner_(runner), truth_(std::move(truth)), right_(right) {}
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override {
    EXPECT_EQ(runner_.seq_length(0), int64_t(context.size()) - 1) << "the cache was not rolled back";
    for (int64_t i = 0; i < max; ++i) {
      const int32_t t = truth_.at(context.size() + size_t(i));
      draft.push_back(i < right_ ? t : (t + 1) % runner_.config().vocab_size);
    }
  }

 private:
  const ModelRunner& runner_;
  std::vector<int32_t> truth_;
  int64_t right_;
};

// Plain greedy decoding's 61 tokens after "Once upon a time": what scripted drafts propose from.
struct Truth {
  std::vector<int32_t> prompt;
  GenerationOptions options;
  Result want;
  std::vector<int32_t> text;  // the prompt, then the tokens
};

Truth greedy_truth(const Stories& s) {
  Truth t;
  t.prompt = s.tokenizer->encode("Once upon a time", true);
  t.options.max_tokens = 61;
  auto plain_runner = cpu_runner(s.file, 256);
  t.want = plain_greedy(*plain_runner, *s.tokenizer, t.prompt, t.options);
  t.text = t.prompt;
  t.text.insert(t.text.end(), t.want.tokens.begin(), t.want.tokens.end());
  return t;
}

TEST(SpeculativeStories, AcceptsExactlyTheRightPrefixOfEachDraft) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const Truth t = greedy_truth(s);
  ASSERT_EQ(t.want.tokens.size(), 61u);
  const std::vector<int32_t>& prompt = t.prompt;
  const GenerationOptions& options = t.options;
  const Result& want = t.want;

  const int64_t draft_max = 5;
  for (const int64_t right : {int64_t(0), int64_t(2), draft_max}) {
    auto runner = cpu_runner(s.file, 256);
    ScriptedDraft draft(*runner, t.text, right);
    const SpecResult got = speculative(*runner, *s.tokenizer, draft, draft_max, prompt, options);
    expect_same(got.result, want, "right " + std::to_string(right));
    expect_consistent(got, prompt);
    // After the prefill's pick, 60 tokens from passes of up to right + 1
    // (a full draft of 5 yields 6); each pass drafts min(5, what is left - 1).
    const int64_t per_pass = right + 1;
    const int64_t passes = (60 + per_pass - 1) / per_pass;
    EXPECT_EQ(got.stats.speculation.passes, passes) << right;
    EXPECT_EQ(got.stats.speculation.accepted, 60 - passes) << right;
    if (right == draft_max) EXPECT_EQ(got.stats.speculation.drafted, 60 - passes);
    // One token a pass: pass i drafts min(5, 59 - i).
    if (right == 0) EXPECT_EQ(got.stats.speculation.drafted, 55 * 5 + 4 + 3 + 2 + 1 + 0);
  }
}

// Drafts a tree in which each of plain greedy decoding's next tokens
// (`truth`) is the second child of the one before, after a wrong first
// child: every pass keeps a path whose rows must move down the cache.
class ScriptedTreeDraft final : public DraftSource {
 public:
  ScriptedTreeDraft(const ModelRunner& runner, std::vector<int32_t> truth) : runner_(runner), truth_(std::move(truth)) {}
  void propose(std::span<const int32_t>, int64_t, std::vector<int32_t>&) override {
    ADD_FAILURE() << "a tree draft was asked for a chain";
  }
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override {
    EXPECT_EQ(runner_.seq_length(0), int64_t(context.size()) - 1) << "the cache was not rolled back";
    tree.clear();
    int32_t node = -1;
    for (int64_t i = 0; i < max_depth && int64_t(tree.size()) + 2 <= max_nodes; ++i) {
      const int32_t t = truth_.at(context.size() + size_t(i));
      tree.add((t + 1) % int32_t(runner_.config().vocab_size), node);
      node = tree.add(t, node);
    }
  }

 private:
  const ModelRunner& runner_;
  std::vector<int32_t> truth_;
};

TEST(SpeculativeStories, ATreeKeepsTheRightPathAndMovesItsRowsDown) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const Truth t = greedy_truth(s);
  ASSERT_EQ(t.want.tokens.size(), 61u);
  for (const int64_t depth : {1, 4}) {
    auto runner = cpu_runner(s.file, 256);
    ScriptedTreeDraft draft(*runner, t.text);
    // Room for two children a level.
    const SpecResult got = speculative(*runner, *s.tokenizer, draft, depth, t.prompt, t.options, 2 * depth + 1);
    expect_same(got.result, t.want, "depth " + std::to_string(depth));
    expect_consistent(got, t.prompt);
    // As the chain whose drafts are all right: after the prefill's pick, 60
    // tokens in passes of up to depth + 1, with two nodes per drafted token.
    const int64_t passes = (60 + depth) / (depth + 1);
    EXPECT_EQ(got.stats.speculation.passes, passes) << depth;
    EXPECT_EQ(got.stats.speculation.accepted, 60 - passes) << depth;
    EXPECT_EQ(got.stats.speculation.drafted, 2 * (60 - passes)) << depth;
  }
}

TEST(SpeculativeStories, TheCacheAfterRollbackContinuesLikeAFreshOne) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::vector<int32_t> prompt = s.tokenizer->encode("Lily", true);
  GenerationOptions options;
  options.max_tokens = 40;
  auto runner = cpu_runner(s.file, 256);
  SelfDraft draft(*runner, 0, 1);  // a shallow draft: many rejected positions were written
  SpeculativeGenerator generator(*runner, *s.tokenizer, draft, 8);
  Sampler sampler(greedy_sampling(), runner->config().vocab_size);
  generator.generate(prompt, sampler, options, [](std::string_view) {});
  // The next prompt reuses the cache up to where the two diverge.
  std::vector<int32_t> next = generator.context();
  next.resize(next.size() - 5);
  next.push_back(s.tokenizer->encode(" dog", false).at(0));
  std::string text;
  const SpeculativeStats stats = generator.generate(next, sampler, options, [&](std::string_view t) { text += t; });
  EXPECT_EQ(stats.generation.reused_tokens, int64_t(next.size()) - 1);
  auto fresh = cpu_runner(s.file, 256);
  const Result want = plain_greedy(*fresh, *s.tokenizer, next, options);
  EXPECT_EQ(generator.generated(), want.tokens);
  EXPECT_EQ(text, want.text);
}

TEST(SpeculativeStories, RefusesAnEmptyDraftBudgetAndSelfDraftsOfNoOrEveryLayer) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  auto runner = cpu_runner(s.file, 64);
  const int64_t n_layers = runner->config().n_layers;
  EXPECT_THROW(SelfDraft(*runner, 0, 0), Error);
  EXPECT_THROW(SelfDraft(*runner, 0, n_layers), Error);
  LookupDraft draft;
  EXPECT_THROW(SpeculativeGenerator(*runner, *s.tokenizer, draft, 0), Error);
  EXPECT_THROW(SpeculativeGenerator(*runner, *s.tokenizer, draft, 8, 0, 1), Error);  // a tree of the pending token alone
  EXPECT_THROW(SpeculativeGenerator(*runner, *s.tokenizer, draft, 8, 0, -4), Error);
}

// The distribution of the second and third generated tokens (the first two a
// verification pass decides) under the target's chain: summed over every
// path to them, from the target's own logits through the sampler tests'
// float64 chain.
struct Marginals {
  std::vector<double> second, third;
};

// The penalties as sampler.h states them, over the window of `history`.
std::vector<float> penalised(std::vector<float> row, const std::vector<int32_t>& history, const SamplingParams& p) {
  const size_t window = p.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.repeat_last_n));
  std::map<int32_t, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    float& logit = row[size_t(token)];
    logit = logit > 0.0f ? logit / p.repeat_penalty : logit * p.repeat_penalty;
    logit -= float(count) * p.frequency_penalty + p.presence_penalty;
  }
  return row;
}

Marginals target_marginals(const std::shared_ptr<const GgufFile>& file, const std::vector<int32_t>& prompt,
                           const SamplingParams& params) {
  auto runner = cpu_runner(file, 64, 1, 1);
  const size_t vocab = size_t(runner->config().vocab_size);
  std::vector<float> row(vocab);
  std::vector<int32_t> history = prompt;
  // The chain after `history`, whose last token is run at its position.
  const auto chain = [&] {
    runner->forward({&history.back(), 1}, int64_t(history.size()) - 1, row.data(), false);
    return test::chain_probabilities(penalised(row, history, params), params);
  };
  runner->forward(prompt, 0, row.data(), false);
  const std::vector<double> first = test::chain_probabilities(penalised(row, history, params), params);
  Marginals m{std::vector<double>(vocab), std::vector<double>(vocab)};
  for (int32_t a = 0; a < int32_t(vocab); ++a) {
    if (first[size_t(a)] == 0.0) continue;
    history.push_back(a);
    const std::vector<double> second = chain();
    for (int32_t b = 0; b < int32_t(vocab); ++b) {
      const double path = first[size_t(a)] * second[size_t(b)];
      if (path == 0.0) continue;
      m.second[size_t(b)] += path;
      history.push_back(b);
      const std::vector<double> third = chain();
      history.pop_back();
      for (size_t c = 0; c < vocab; ++c) m.third[c] += path * third[c];
    }
    history.pop_back();
  }
  return m;
}

struct SampledCounts {
  std::vector<int64_t> second, third;
  SpeculationStats speculation;
};

using DraftFactory = std::function<std::unique_ptr<DraftSource>(ModelRunner& target)>;

// `runs` speculative generations of 4 tokens with 2 drafted per pass (along
// each path of a tree of tree_tokens), seeds 1, 2, ...
SampledCounts sample_speculatively(const Stories& s, const std::vector<int32_t>& prompt, const SamplingParams& params,
                                   const DraftFactory& make_draft, int64_t runs, int64_t tree_tokens) {
  auto runner = cpu_runner(s.file, 64, 1, 1);  // one thread: faster than two on so small a model
  const std::unique_ptr<DraftSource> draft = make_draft(*runner);
  SpeculativeGenerator generator(*runner, *s.tokenizer, *draft, 2, 0, tree_tokens);
  GenerationOptions options;
  options.max_tokens = 4;
  const size_t vocab = size_t(runner->config().vocab_size);
  SampledCounts c{std::vector<int64_t>(vocab), std::vector<int64_t>(vocab), {}};
  for (int64_t i = 0; i < runs; ++i) {
    SamplingParams seeded = params;
    seeded.seed = uint64_t(i + 1);
    Sampler sampler(seeded, int64_t(vocab));
    const SpeculationStats spec = generator.generate(prompt, sampler, options, [](std::string_view) {}).speculation;
    c.speculation.passes += spec.passes;
    c.speculation.drafted += spec.drafted;
    c.speculation.accepted += spec.accepted;
    const std::vector<int32_t>& out = generator.generated();
    EXPECT_EQ(out.size(), 4u);
    ++c.second.at(size_t(out.at(1)));
    ++c.third.at(size_t(out.at(2)));
  }
  return c;
}

void expect_follows(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n,
                    const std::string& what) {
  for (size_t id = 0; id < probs.size(); ++id) {
    if (probs[id] == 0.0) {
      EXPECT_EQ(counts[id], 0) << what << ": token " << id << " cannot follow";
    }
  }
  const auto [stat, df] = test::chi_square(counts, probs, n);
  ASSERT_GT(df, 0) << what;
  EXPECT_LT(stat, test::chi_square_bound(df)) << what << ", df " << df;
}

// Rejection sampling keeps the target's distribution, whichever draft
// proposes: drafts are accepted and rejected many times each.
void expect_target_distribution(const Stories& s, const SamplingParams& params, const DraftFactory& make_draft,
                                const std::string& what,
                                const std::string& prompt_text = "Once upon a time, there was a little",
                                int64_t tree_tokens = 0) {
  const std::vector<int32_t> prompt = s.tokenizer->encode(prompt_text, true);
  const Marginals want = target_marginals(s.file, prompt, params);
  const int64_t runs = 8000;
  const SampledCounts got = sample_speculatively(s, prompt, params, make_draft, runs, tree_tokens);
  const SpeculationStats& spec = got.speculation;
  EXPECT_GT(spec.accepted, runs / 50) << what;
  EXPECT_GT(spec.drafted - spec.accepted, runs / 50) << what;
  expect_follows(got.second, want.second, runs, what + ", second token");
  expect_follows(got.third, want.third, runs, what + ", third token");
}

SamplingParams hot_chain() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 8;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

// A hotter, wider chain than hot_chain's, for a draft whose q differs from p everywhere.
SamplingParams hotter_chain() {
  SamplingParams p = hot_chain();
  p.temperature = 1.5f;
  p.top_k = 12;
  return p;
}

// A self draft of all but the last layer (shallower drafts of this model are
// hardly ever accepted), picking with `params`.
DraftFactory deep_self_draft(const SamplingParams& params) {
  return [params](ModelRunner& target) {
    return std::make_unique<SelfDraft>(target, 0, target.config().n_layers - 1, params);
  };
}

TEST(SpeculativeSamplingStories, ADeterministicDraftKeepsTheTargetsDistribution) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // Greedy picks: each drafted token's q is one-hot.
  expect_target_distribution(s, hot_chain(), deep_self_draft(greedy_sampling()), "hot chain");
  SamplingParams defaults;  // llama-cli's: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  expect_target_distribution(s, defaults, deep_self_draft(greedy_sampling()), "default chain");
}

TEST(SpeculativeSamplingStories, ASamplingDraftKeepsTheTargetsDistribution) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // Sampling a hotter, wider chain than the target's.
  expect_target_distribution(s, hot_chain(), deep_self_draft(hotter_chain()), "hot chain");
}

TEST(SpeculativeSamplingStories, APenalisedChainKeepsTheTargetsDistribution) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // p carries the penalties of the prompt and the tokens kept so far, which
  // this prompt's likely continuation repeats; the draft samples the chain
  // without them (draft_sampling), so q differs from p.
  SamplingParams penalised_chain = hot_chain();
  penalised_chain.repeat_penalty = 1.8f;
  penalised_chain.frequency_penalty = 0.4f;
  penalised_chain.presence_penalty = 0.6f;
  expect_target_distribution(s, penalised_chain, deep_self_draft(draft_sampling(penalised_chain)), "penalties",
                             "Lily and Tom went to the park. Lily and Tom");
}

TEST(SpeculativeSamplingStories, ATokenTreeKeepsTheTargetsDistribution) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // Up to 5 drafted nodes below the pending token, 2 deep: siblings are
  // judged in turn against what the refusals before them left.
  expect_target_distribution(s, hot_chain(), deep_self_draft(hot_chain()), "tree of 6",
                             "Once upon a time, there was a little", 6);
}

// stories260K re-encoded as Q4_0: a draft model close to the target but not it.
std::string stories_q4_0() {
  struct Quantized {
    std::string path;
    Quantized() {
      const std::string f32 = test::stories260k_gguf();
      if (f32.empty()) return;
      path = (std::filesystem::path(::testing::TempDir()) / ("nt_stories_q4_0_" + std::to_string(getpid()) + ".gguf")).string();
      quantize_model(f32, path, QuantScheme::Q4_0, 1);
    }
    ~Quantized() {
      if (!path.empty()) std::filesystem::remove(path);
    }
  };
  static const Quantized quantized;
  return quantized.path;
}

TEST(SpeculativeStories, ADraftModelIsPlainGreedyAndStaysInStepWithTheContext) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  GenerationOptions options;
  options.max_tokens = 200;
  const std::vector<int32_t> prompt = s.tokenizer->encode("Once upon a time", true);
  auto plain_runner = cpu_runner(s.file, 256);
  const Result want = plain_greedy(*plain_runner, *s.tokenizer, prompt, options);
  // The target itself as its draft, and the target re-encoded as Q4_0.
  const std::vector<std::pair<std::string, double>> drafts = {{test::stories260k_gguf(), 0.9}, {stories_q4_0(), 0.4}};
  for (const auto& [draft_path, least_acceptance] : drafts) {
    for (const int64_t draft_max : {1, 4, 8}) {
      const std::string what = draft_path + ", draft-max " + std::to_string(draft_max);
      auto target = cpu_runner(s.file, 256);
      auto draft_runner = cpu_runner(GgufFile::open(draft_path), 256);
      ModelDraft draft(*draft_runner, 0, greedy_sampling());
      const SpecResult got = speculative(*target, *s.tokenizer, draft, draft_max, prompt, options);
      expect_same(got.result, want, what);
      expect_consistent(got, prompt);
      // A draft out of step with the context (a cache not truncated after a
      // rejection) would propose for the wrong text and be refused.
      EXPECT_GT(got.stats.speculation.acceptance(), least_acceptance) << what;
    }
  }
  // The target as its own draft: its chains keep every token, and its trees,
  // whose candidates' chances are learnt from what the target kept, must come
  // close (its softmax alone would spend the tree on runners-up it never keeps).
  {
    double chain = 0;
    for (const int64_t tree_tokens : {0, 24}) {
      auto target = cpu_runner(s.file, 512);
      auto draft_runner = cpu_runner(s.file, 512);
      ModelDraft draft(*draft_runner, 0, greedy_sampling());
      GenerationOptions long_run;
      long_run.max_tokens = 400;
      const SpecResult got = speculative(*target, *s.tokenizer, draft, 8, prompt, long_run, tree_tokens);
      if (tree_tokens == 0) chain = got.stats.speculation.tokens_per_pass();
      if (tree_tokens > 0) EXPECT_GT(got.stats.speculation.tokens_per_pass(), 0.95 * chain);
    }
  }
  // Trees from the Q4_0 draft: plain greedy, and more tokens per pass than its chains.
  double chain_tokens_per_pass = 0;
  for (const int64_t tree_tokens : {0, 16}) {
    auto target = cpu_runner(s.file, 256);
    auto draft_runner = cpu_runner(GgufFile::open(stories_q4_0()), 256);
    ModelDraft draft(*draft_runner, 0, greedy_sampling());
    const SpecResult got = speculative(*target, *s.tokenizer, draft, 4, prompt, options, tree_tokens);
    expect_same(got.result, want, "Q4_0 draft, tree " + std::to_string(tree_tokens));
    expect_consistent(got, prompt);
    if (tree_tokens == 0) {
      chain_tokens_per_pass = got.stats.speculation.tokens_per_pass();
    } else {
      EXPECT_GT(got.stats.speculation.tokens_per_pass(), chain_tokens_per_pass);
    }
  }
}

TEST(SpeculativeSamplingStories, ASamplingDraftModelKeepsTheTargetsDistribution) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> draft_file = GgufFile::open(stories_q4_0());
  std::vector<std::unique_ptr<ModelRunner>> draft_runners;
  const DraftFactory quantized_draft = [&](ModelRunner&) {
    draft_runners.push_back(cpu_runner(draft_file, 64, 1, 1));
    return std::make_unique<ModelDraft>(*draft_runners.back(), 0, hotter_chain());
  };
  expect_target_distribution(s, hot_chain(), quantized_draft, "Q4_0 draft");
}

TEST(DraftVocabulary, AMismatchNamesTheFirstDifferingTokenOrTheSizes) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const Vocabulary& stories = s.tokenizer->vocab();
  EXPECT_NO_THROW(check_same_vocabulary(stories, 512, "a.gguf", stories, 512, "b.gguf"));
  VocabSpec changed = stories.spec();
  changed.tokens[300] = "\n<changed>";
  const Vocabulary other(changed);
  try {
    check_same_vocabulary(stories, 512, "a.gguf", other, 512, "b.gguf");
    ADD_FAILURE() << "a changed token was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("token 300"), std::string::npos) << message;
    EXPECT_NE(message.find("'\\x0a<changed>'"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + stories.text(300) + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("b.gguf"), std::string::npos) << message;
  }
  VocabSpec shorter = stories.spec();
  shorter.tokens.pop_back();
  if (!shorter.scores.empty()) shorter.scores.pop_back();
  if (!shorter.token_types.empty()) shorter.token_types.pop_back();
  try {
    check_same_vocabulary(stories, 512, "a.gguf", Vocabulary(shorter), 511, "b.gguf");
    ADD_FAILURE() << "a shorter vocabulary was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("511 tokens"), std::string::npos) << message;
    EXPECT_NE(message.find("512"), std::string::npos) << message;
  }
}

struct SmolLM2 {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

SmolLM2 open_smollm2() {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) return {};
  SmolLM2 m;
  m.file = GgufFile::open(path);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.file->header(), path));
  return m;
}

EncodedPrompt chat(const Tokenizer& tokenizer, const std::string& user) {
  const auto templ = ChatTemplate::for_tokenizer(tokenizer, "");
  const std::vector<ChatMessage> messages = {{"user", user}};
  return encode_conversation(tokenizer, templ, messages);
}

const char* kPassage =
    "The lighthouse stood at the end of the harbour wall. Every night the keeper climbed its hundred and twelve "
    "steps, trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather book.";

// A stepwise run's rows against one-token steps of the same tokens, bit for bit.
void expect_stepwise_run_is_steps(const std::shared_ptr<const GgufFile>& file, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& run) {
  auto runner = cpu_runner(file, 128, 2);
  const int64_t vocab = runner->config().vocab_size;
  ASSERT_GE(run.size(), 8u);  // past the CPU's GEMM threshold
  const SeqId steps = 0, stepwise = runner->seq_alloc();
  BatchOutputs out;
  Batch batch;
  for (const SeqId seq : {steps, stepwise}) {
    batch.clear();
    batch.add_run(prompt, 0, seq, Output::None);
    runner->forward(batch, out);
  }
  std::vector<float> want;
  for (size_t i = 0; i < run.size(); ++i) {
    batch.clear();
    batch.add(run[i], int64_t(prompt.size() + i), steps, Output::Logits);
    runner->forward(batch, out);
    want.insert(want.end(), out.logits.begin(), out.logits.end());
  }
  batch.clear();
  for (size_t i = 0; i < run.size(); ++i) batch.add(run[i], int64_t(prompt.size() + i), stepwise, Output::Logits, true);
  runner->forward(batch, out);
  ASSERT_EQ(out.logits.size(), size_t(vocab) * run.size());
  EXPECT_EQ(std::memcmp(out.logits.data(), want.data(), want.size() * sizeof(float)), 0)
      << "a stepwise run's logits are not bit-identical to one-token steps";
}

TEST(SpeculativeStories, StepwiseRunsGiveTheLogitsOfOneTokenSteps) {
  const Stories s = open_stories();
  if (!s.file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // An odd run and an even one: stories260K's FFN (172) is no multiple of the vector width.
  const std::vector<int32_t> prompt = s.tokenizer->encode("Once upon a time", true);
  for (const std::string text : {" there was a little girl named Lily.", " there was a big dog. He liked to play"}) {
    expect_stepwise_run_is_steps(s.file, prompt, s.tokenizer->encode(text, false));
  }
}

TEST(SpeculativeSmolLM2, StepwiseRunsGiveTheLogitsOfOneTokenSteps) {
  const SmolLM2 m = open_smollm2();
  if (!m.file) GTEST_SKIP() << "the default SmolLM2 model is absent";
  expect_stepwise_run_is_steps(m.file, m.tokenizer->encode("The capital of France is", true),
                               m.tokenizer->encode(" Paris, and the capital of Italy is Rome.", false));
}

TEST(SpeculativeSmolLM2, EveryDraftSourceIsPlainGreedyOnChatCodeAndRepetition) {
  const SmolLM2 m = open_smollm2();
  if (!m.file) GTEST_SKIP() << "the default SmolLM2 model is absent";
  const int64_t n_layers = cpu_runner(m.file, 16)->config().n_layers;
  GenerationOptions options;
  options.max_tokens = 64;
  const std::vector<EncodedPrompt> prompts = {
      chat(*m.tokenizer, "Give me three tips for staying healthy."),
      encode_completion(*m.tokenizer, "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
      chat(*m.tokenizer, std::string("Repeat this text word for word:\n\n") + kPassage),
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    options.stop_tokens = prompts[i].stop_tokens;
    expect_every_source_matches(m.file, *m.tokenizer, 512, prompts[i].tokens, options,
                                {default_self_draft_layers(n_layers)}, {8}, "prompt " + std::to_string(i));
  }
}

TEST(SpeculativeSmolLM2, LookupYieldsSeveralTokensPerPassWhenTheReplyRepeatsAPassage) {
  const SmolLM2 m = open_smollm2();
  if (!m.file) GTEST_SKIP() << "the default SmolLM2 model is absent";
  const EncodedPrompt prompt = chat(*m.tokenizer, std::string("Repeat this text word for word:\n\n") + kPassage);
  GenerationOptions options;
  options.max_tokens = 64;
  options.stop_tokens = prompt.stop_tokens;
  auto runner = cpu_runner(m.file, 512);
  LookupDraft draft;
  const SpecResult got = speculative(*runner, *m.tokenizer, draft, 8, prompt.tokens, options);
  std::printf("lookup on a repeated passage: %.2f tokens per pass, %lld of %lld drafted accepted\n",
              got.stats.speculation.tokens_per_pass(), (long long)got.stats.speculation.accepted,
              (long long)got.stats.speculation.drafted);
  EXPECT_GT(got.stats.speculation.tokens_per_pass(), 2.0);
}

}  // namespace
}  // namespace nt
