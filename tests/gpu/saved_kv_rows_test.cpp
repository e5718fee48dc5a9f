// Saved sequence states on CUDA: a sequence's KV rows read back
// (seq_save_rows) and written into another sequence (seq_load_rows) make it
// continue exactly as the original does, resident and in a hybrid split
// whose host layers keep their caches in host memory (their rows then come
// from, and go to, both copies).
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/runner/cuda_runner.h"
#include "gpu_test_util.h"
#include "streaming_budgets.h"
#include "test_models.h"

namespace nt {
namespace {

constexpr int64_t kContext = 128;

std::vector<int32_t> random_tokens(size_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(test::rng());
  return t;
}

// The logits of every entry of `tokens` run on `seq` from `pos` (one pass).
std::vector<float> run_logits(ModelRunner& runner, SeqId seq, std::span<const int32_t> tokens, int64_t pos) {
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.add(tokens[i], pos + int64_t(i), seq, Output::Logits);
  BatchOutputs out;
  runner.forward(batch, out);
  return out.logits;
}

// A prompt and a few one-token steps on `original`, its rows loaded into a
// fresh sequence; then both take the same one-token step and the same
// prompt chunk, which must give the same logits bit for bit (the same passes
// over the same cached rows), and the loaded rows read back as saved.
void check_rows_carry_the_sequence(ModelRunner& runner) {
  const int64_t vocab = runner.config().vocab_size;
  EXPECT_TRUE(runner.saves_kv_rows());
  const SeqId original = runner.seq_alloc();
  const auto prompt = random_tokens(40, vocab), steps = random_tokens(3, vocab);
  run_logits(runner, original, prompt, 0);
  for (size_t i = 0; i < steps.size(); ++i) run_logits(runner, original, {&steps[i], 1}, 40 + int64_t(i));
  const int64_t length = runner.seq_length(original);
  ASSERT_EQ(length, 43);

  const std::vector<uint8_t> saved = runner.seq_save_rows(original);
  ASSERT_EQ(saved.size(), uint64_t(length) * runner.kv_bytes_per_position());
  EXPECT_TRUE(std::any_of(saved.begin(), saved.end(), [](uint8_t b) { return b != 0; })) << "no rows were read";
  const SeqId loaded = runner.seq_alloc();
  runner.seq_load_rows(loaded, length, saved);
  EXPECT_EQ(runner.seq_length(loaded), length);
  EXPECT_TRUE(runner.seq_save_rows(loaded) == saved) << "the loaded rows read back differently";

  const auto next = random_tokens(1, vocab), chunk = random_tokens(20, vocab);
  const std::vector<float> want_step = run_logits(runner, original, next, length);
  EXPECT_EQ(run_logits(runner, loaded, next, length), want_step) << "the one-token step after loading";
  const std::vector<float> want_chunk = run_logits(runner, original, chunk, length + 1);
  EXPECT_EQ(run_logits(runner, loaded, chunk, length + 1), want_chunk) << "the prompt chunk after loading";
}

TEST(SavedKvRows, ResidentSequenceContinuesFromItsRows) {
  const std::string path = write_model(TestModel{}, "nt_saved_rows.gguf");
  const auto file = GgufFile::open(path);
  CudaRunnerOptions o;
  o.max_sequences = 4;
  auto runner = make_cuda_runner(*file, kContext, o);
  check_rows_carry_the_sequence(*runner);
}

// One layer resident, three streamed from pinned RAM, two of those computed by
// the host in one-token passes (whose rows only the host's caches then hold)
// and streamed in prompt passes (whose rows both sides hold).
TEST(SavedKvRows, HybridSequenceContinuesFromItsRows) {
  TestModel model;
  model.layers = 4;
  const std::string path = write_model(model, "nt_saved_rows_hybrid.gguf");
  const auto file = GgufFile::open(path);
  CudaRunnerOptions ring;
  ring.max_sequences = 4;
  CudaRunnerOptions o = test::budgets_for(*file, kContext, 1, 3, ring);
  o.cpu_layers = 2;
  o.cpu_passes = {.all_up_to = 1, .wider = {}};
  o.cpu_threads = 2;
  auto runner = make_cuda_runner(*file, kContext, o);
  ASSERT_NE(runner->description().find("2 computed on the CPU"), std::string::npos) << runner->description();
  check_rows_carry_the_sequence(*runner);
}

}  // namespace
}  // namespace nt
