// Token trees on the CPU backend: a tree run's rows attend to the cached
// prefix and to their own ancestors only, rotated for their depth, so each
// node's logits are bit for bit those of a chain run of its root-to-node path
// (both stepwise: the kernels of one-token steps); and an accepted path's
// rows, moved to consecutive positions (seq_keep), continue exactly as the
// chain's cache does. The chains are the reference: nothing is hard-coded.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine_test_models.h"

namespace nt {
namespace {

// A tree below the pending token (entry 0): per entry, its token and parent
// within the run. Branches at the root and at entry 1, the deepest node 4
// levels down, and nodes whose ancestors are not the entries just before them.
struct TreeSpec {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
};

TreeSpec spec_tree() {
  return {{403, 407, 261, 378, 300, 291, 376, 400, 428, 286},
          {-1, 0, 0, 1, 2, 1, 3, 5, 6, 4}};
}

// Entry i's root-to-node path as tokens.
std::vector<int32_t> path_tokens(const TreeSpec& tree, int32_t i) {
  std::vector<int32_t> path;
  for (int32_t n = i; n >= 0; n = tree.parents[size_t(n)]) path.insert(path.begin(), tree.tokens[size_t(n)]);
  return path;
}

void add_tree(Batch& batch, const TreeSpec& tree, int64_t pos, SeqId seq, bool stepwise) {
  const size_t first = batch.size();
  for (size_t i = 0; i < tree.tokens.size(); ++i) {
    const int32_t parent = tree.parents[i];
    const int64_t at = parent < 0 ? pos : batch.entries[first + size_t(parent)].pos + 1;
    batch.add(tree.tokens[i], at, seq, Output::Logits, stepwise, parent);
  }
}

struct Fixture {
  std::unique_ptr<ModelRunner> runner;
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 300, 429};
  int64_t vocab = 0;
};

Fixture open_runner(int64_t sequences, int64_t max_batch) {
  Fixture f;
  const std::string path = test::stories260k_gguf();
  if (path.empty()) return f;
  CpuRunnerOptions options;
  options.context = 128;
  options.sequences = sequences;
  options.max_batch = max_batch;
  f.runner = make_cpu_runner(GgufFile::open(path), options);
  f.vocab = f.runner->config().vocab_size;
  Batch batch;
  BatchOutputs out;
  for (SeqId seq = 0; seq < sequences; ++seq) {
    if (seq > 0) f.runner->seq_alloc();
    batch.clear();
    batch.add_run(f.prompt, 0, seq, Output::None);
    f.runner->forward(batch, out);
  }
  return f;
}

// The last row's logits of `tokens` run stepwise as a chain after the prompt on `seq`.
std::vector<float> chain_logits(Fixture& f, SeqId seq, const std::vector<int32_t>& tokens) {
  f.runner->seq_truncate(seq, int64_t(f.prompt.size()));
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.add(tokens[i], int64_t(f.prompt.size() + i), seq, i + 1 == tokens.size() ? Output::Logits : Output::None, true);
  }
  BatchOutputs out;
  f.runner->forward(batch, out);
  return out.logits;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every node of a stepwise tree pass gets the logits of its path's chain,
// also when the pass is cut into chunks of `max_batch` (ancestors in an
// earlier chunk) and when another sequence's chain shares the pass.
void expect_tree_rows_are_chain_rows(int64_t max_batch) {
  Fixture f = open_runner(3, max_batch);
  if (!f.runner) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const TreeSpec tree = spec_tree();
  const std::vector<int32_t> other = {291, 376, 400};
  Batch batch;
  add_tree(batch, tree, int64_t(f.prompt.size()), 0, true);
  batch.add_run(other, int64_t(f.prompt.size()), 1, Output::Logits);
  BatchOutputs out;
  f.runner->forward(batch, out);
  ASSERT_TRUE(sequence_runs(batch).at(0).tree);
  EXPECT_EQ(f.runner->seq_length(0), int64_t(f.prompt.size() + tree.tokens.size()));
  for (int32_t i = 0; i < int32_t(tree.tokens.size()); ++i) {
    const std::vector<float> want = chain_logits(f, 2, path_tokens(tree, i));
    EXPECT_TRUE(same_bits(out.logits_of(size_t(i), f.vocab), want)) << "node " << i << ", chunks of " << max_batch;
  }
  // The chain beside the tree (chunked kernels, as a prompt): what it gets alone.
  Batch alone;
  alone.add_run(other, int64_t(f.prompt.size()), 2, Output::Logits);
  f.runner->seq_truncate(2, int64_t(f.prompt.size()));
  BatchOutputs alone_out;
  f.runner->forward(alone, alone_out);
  EXPECT_TRUE(same_bits(out.logits_of(batch.size() - 1, f.vocab), alone_out.logits)) << "chunks of " << max_batch;
}

TEST(CpuTokenTree, EachNodeSeesItsAncestorsOnlyAsItsPathsChainWould) { expect_tree_rows_are_chain_rows(256); }

TEST(CpuTokenTree, AncestorsInAnEarlierChunkAreSeenToo) { expect_tree_rows_are_chain_rows(3); }

TEST(CpuTokenTree, TheChildrenOfOneNodeDifferSoTheMaskIsNotCausal) {
  Fixture f = open_runner(1, 256);
  if (!f.runner) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  // Nodes 1 and 2 are siblings: were node 2 to see node 1 (a causal mask), its row would change.
  const TreeSpec tree = spec_tree();
  Batch batch;
  add_tree(batch, tree, int64_t(f.prompt.size()), 0, true);
  BatchOutputs out;
  f.runner->forward(batch, out);
  const std::vector<float> causal = chain_logits(f, 0, {tree.tokens[0], tree.tokens[1], tree.tokens[2]});
  EXPECT_FALSE(same_bits(out.logits_of(2, f.vocab), causal)) << "the comparison cannot tell the masks apart";
}

// Keeps the path to `node` after a tree pass and runs `next` after it: the
// logits are the chain's that ran the path and `next`.
void expect_kept_path_continues_as_its_chain(int32_t node) {
  Fixture f = open_runner(2, 256);
  if (!f.runner) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const TreeSpec tree = spec_tree();
  const int64_t start = int64_t(f.prompt.size());
  Batch batch;
  add_tree(batch, tree, start, 0, true);
  BatchOutputs out;
  f.runner->forward(batch, out);
  // The path below the root, as cache positions of the tree pass.
  std::vector<int64_t> kept;
  for (int32_t n = node; n > 0; n = tree.parents[size_t(n)]) kept.insert(kept.begin(), start + n);
  f.runner->seq_keep(0, start + 1, kept);
  ASSERT_EQ(f.runner->seq_length(0), start + 1 + int64_t(kept.size()));
  const int32_t next = 428;
  Batch step;
  step.add(next, start + 1 + int64_t(kept.size()), 0, Output::Logits, true);
  f.runner->forward(step, out);
  std::vector<int32_t> chain = path_tokens(tree, node);
  chain.push_back(next);
  EXPECT_TRUE(same_bits(out.logits, chain_logits(f, 1, chain))) << "path to node " << node;
}

TEST(CpuTokenTree, AKeptPathContinuesAsItsChain) {
  expect_kept_path_continues_as_its_chain(8);  // entries 1, 3, 6, 8: moved down
  expect_kept_path_continues_as_its_chain(9);  // entries 2, 4, 9
  expect_kept_path_continues_as_its_chain(0);  // nothing kept past the pending token
}

TEST(CpuTokenTree, KeepingRefusesPositionsThatCannotMoveThere) {
  Fixture f = open_runner(1, 256);
  if (!f.runner) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const int64_t length = f.runner->seq_length(0);
  EXPECT_THROW(f.runner->seq_keep(0, 2, std::vector<int64_t>{1}), Error);            // before its place
  EXPECT_THROW(f.runner->seq_keep(0, 2, std::vector<int64_t>{4, 3}), Error);         // not increasing
  EXPECT_THROW(f.runner->seq_keep(0, 2, std::vector<int64_t>{length}), Error);       // not held
  EXPECT_EQ(f.runner->seq_length(0), length);
}

}  // namespace
}  // namespace nt
