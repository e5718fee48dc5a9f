// Teacher forcing's per-position score, and the chunked pass that hands out
// every position's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "engine/logit_rows.h"
#include "engine/teacher_forcing.h"

namespace nt {
namespace {

TEST(ScoreStep, TopMarginAndGapOverTheReference) {
  const std::vector<float> row = {0.5f, 2.0f, 7.0f, -1.0f};
  const ForcedStep agree = score_step(row, 2);
  EXPECT_EQ(agree.top, 2);
  EXPECT_FLOAT_EQ(agree.margin, 5.0f);
  EXPECT_FLOAT_EQ(agree.gap, 0.0f);
  const ForcedStep differ = score_step(row, 3);
  EXPECT_EQ(differ.reference, 3);
  EXPECT_EQ(differ.top, 2);
  EXPECT_FLOAT_EQ(differ.gap, 8.0f);
  // Equal logits: the first is the top, and the margin is 0.
  const ForcedStep tie = score_step(std::vector<float>{1.0f, 4.0f, 4.0f}, 2);
  EXPECT_EQ(tie.top, 1);
  EXPECT_FLOAT_EQ(tie.margin, 0.0f);
  EXPECT_THROW(score_step(row, 4), Error);
}

// Position p's logits start {p, token}: what each pass evaluated shows in its rows.
class EchoRunner final : public ModelRunner {
 public:
  static constexpr int64_t kVocab = 2000;
  EchoRunner() {
    config_.vocab_size = kVocab;
    config_.context_length = 1000;
    init_pages(KvPages(1, 1000, 1000));
  }
  const ModelSpec& config() const override { return config_; }
  std::string description() const override { return "echo"; }
  uint64_t weight_bytes_per_token() const override { return 0; }
  uint64_t kv_bytes_per_position() const override { return 0; }
  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t>,
                     BatchOutputs& out) override {
    EXPECT_EQ(runs.size(), 1u);
    const bool every_row =
        std::all_of(batch.entries.begin(), batch.entries.end(), [](const BatchEntry& e) { return e.output == Output::Logits; });
    calls.push_back({runs[0].pos, runs[0].count, every_row});
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch.entries[i].output != Output::Logits) continue;
      float* row = out.logits.data() + out.index[i] * kVocab;
      row[0] = float(batch.entries[i].pos);
      row[1] = float(batch.entries[i].token);
    }
  }
  void copy_pages(std::span<const PageCopy>) override {}
  void copy_rows(std::span<const RowCopy>) override {}

  struct Call {
    int64_t pos, count;
    bool all_logits;
  };
  std::vector<Call> calls;

 private:
  ModelSpec config_;
};

TEST(ForEachLogitRow, HandsOutEachPositionFromTheFirstInChunks) {
  EchoRunner runner;
  std::vector<int32_t> tokens(150);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(1000 + i);
  std::vector<int64_t> positions;
  for_each_logit_row(runner, tokens, 10, [&](int64_t pos, std::span<const float> row) {
    ASSERT_EQ(row.size(), size_t(EchoRunner::kVocab));
    EXPECT_EQ(row[0], float(pos));
    EXPECT_EQ(row[1], float(tokens[size_t(pos)]));
    positions.push_back(pos);
  });
  ASSERT_EQ(positions.size(), 140u);
  for (size_t i = 0; i < positions.size(); ++i) EXPECT_EQ(positions[i], int64_t(10 + i));
  // The ten positions before the first in one pass without rows, then the rest.
  ASSERT_GE(runner.calls.size(), 2u);
  EXPECT_EQ(runner.calls[0].pos, 0);
  EXPECT_EQ(runner.calls[0].count, 10);
  EXPECT_FALSE(runner.calls[0].all_logits);
  int64_t next = 10;
  for (size_t c = 1; c < runner.calls.size(); ++c) {
    EXPECT_EQ(runner.calls[c].pos, next);
    EXPECT_TRUE(runner.calls[c].all_logits);
    next += runner.calls[c].count;
  }
  EXPECT_EQ(next, 150);
  EXPECT_THROW(for_each_logit_row(runner, tokens, 150, [](int64_t, std::span<const float>) {}), Error);
}

}  // namespace
}  // namespace nt
