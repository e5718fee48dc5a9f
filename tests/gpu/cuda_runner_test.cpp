// End to end: CudaLlamaRunner logits against the float64 reference forward on
// small random models written as GGUF files, through every path of forward():
// GEMM prefill, chunked mat-vec prefill, gated mat-vec, graph decode,
// rewinding, chunking past max_batch; and its errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cuda/cuda_runner.h"
#include "gguf/gguf_writer.h"
#include "gpu_test_util.h"
#include "test_models.h"
#include "model/tensor_names.h"
#include "reference_llama.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(test::rng());
  return t;
}

double logits_error(const float* got, const std::vector<double>& want) {
  return test::relative_error(std::vector<float>(got, got + want.size()), want);
}

// q8 activations and the f16 KV cache leave about 1% on these random models.
constexpr double kTolerance = 3e-2;

void check_all_paths(const std::string& path, const CudaRunnerOptions& options) {
  const auto file = GgufFile::open(path);
  const test::ReferenceLlama ref(*file);
  const int64_t vocab = ref.config().vocab_size, context = 128;
  auto runner = make_cuda_runner(*file, context, options);
  EXPECT_EQ(runner->context_size(), context);
  EXPECT_GT(runner->weight_bytes_per_token(), 0u);
  std::printf("  %s\n", runner->description().c_str());

  const auto tokens = random_tokens(100, vocab);
  const auto want = ref.logits(tokens);
  std::vector<float> logits(size_t(100 * vocab), NAN);
  double worst = 0.0;
  auto expect_row = [&](const float* got, int64_t position, const char* what) {
    const double e = logits_error(got, want[size_t(position)]);
    worst = std::max(worst, e);
    EXPECT_LT(e, kTolerance) << what << " at position " << position;
  };

  // Prefill of 70 tokens with every row's logits.
  runner->forward(std::span(tokens).first(70), 0, logits.data(), true);
  for (int64_t t = 0; t < 70; ++t) expect_row(logits.data() + t * vocab, t, "prefill");
  // Three single-token decode steps.
  for (int64_t t = 70; t < 73; ++t) {
    std::fill(logits.begin(), logits.end(), NAN);
    runner->forward(std::span(tokens).subspan(size_t(t), 1), t, logits.data(), false);
    expect_row(logits.data(), t, "decode");
  }
  // Greedy steps pick on the GPU what argmax_first picks from the same step's
  // logits: one token (the decode graph where enabled) and a 70-token prefill.
  for (int64_t t = 70; t < 73; ++t) {
    runner->forward(std::span(tokens).subspan(size_t(t), 1), t, logits.data(), false);
    const int32_t want = argmax_first(std::span(logits).first(size_t(vocab)));
    EXPECT_EQ(runner->forward_greedy(std::span(tokens).subspan(size_t(t), 1), t), want) << "greedy step at position " << t;
  }
  runner->forward(std::span(tokens).first(70), 0, logits.data(), false);
  const int32_t want_prefill = argmax_first(std::span(logits).first(size_t(vocab)));
  EXPECT_EQ(runner->forward_greedy(std::span(tokens).first(70), 0), want_prefill) << "greedy prefill";

  // 12 tokens (chunked mat-vec below the default GEMM threshold), then 5
  // (gated mat-vec) with the last logits only.
  runner->forward(std::span(tokens).subspan(73, 12), 73, logits.data(), true);
  for (int64_t t = 73; t < 85; ++t) expect_row(logits.data() + (t - 73) * vocab, t, "12-token chunk");
  runner->forward(std::span(tokens).subspan(85, 5), 85, logits.data(), false);
  expect_row(logits.data(), 89, "5-token chunk");

  // Rewind: overwrite positions 10.. with other tokens.
  auto rewound = std::vector<int32_t>(tokens.begin(), tokens.begin() + 10);
  const auto other = random_tokens(6, vocab);
  rewound.insert(rewound.end(), other.begin(), other.end());
  runner->forward(other, 10, logits.data(), false);
  const double e = logits_error(logits.data(), ref.logits(rewound).back());
  worst = std::max(worst, e);
  EXPECT_LT(e, kTolerance) << "after rewinding to position 10";
  runner->forward(std::span(rewound).subspan(15, 1), 15, logits.data(), false);  // graph decode after rewind
  EXPECT_LT(logits_error(logits.data(), ref.logits(rewound).back()), kTolerance) << "decode after rewind";
  std::printf("  worst relative logits error %.2e\n", worst);

  // Errors: context overflow and bad token ids.
  EXPECT_THROW(runner->forward(std::span(tokens).first(2), context - 1, logits.data(), false), Error);
  const std::vector<int32_t> bad = {int32_t(vocab)};
  EXPECT_THROW(runner->forward(bad, 0, logits.data(), false), Error);
}

TEST(CudaRunner, KQuantModelMatchesReference) {
  check_all_paths(write_model(ModelSpec{}, "nt_cuda_kquant.gguf"), CudaRunnerOptions{});
}

TEST(CudaRunner, LegacyTiedModelInSmallChunksMatchesReference) {
  ModelSpec s;
  s.dim = 128;
  s.ffn = 352;
  s.heads = 4;
  s.kv_heads = 1;
  s.layers = 3;
  s.embd = TensorType::F16;
  s.tied = true;
  s.wq = s.wk = s.wv = TensorType::Q4_0;  // one fused QKV matrix
  s.wo = TensorType::Q8_0;
  s.gate = TensorType::Q5_1;
  s.up = TensorType::Q5_0;  // formats differ: gate and up run apart
  s.down = TensorType::Q4_1;
  CudaRunnerOptions options;
  options.max_batch = 32;       // 70 tokens: chunks of 32, 32 and 6
  options.gemm_min_tokens = 16;
  check_all_paths(write_model(s, "nt_cuda_legacy.gguf"), options);
}

TEST(CudaRunner, FloatModelWithoutGraphMatchesReference) {
  ModelSpec s;
  s.embd = TensorType::BF16;
  s.output = TensorType::F32;
  s.wq = s.wk = s.wv = s.wo = TensorType::F16;
  s.gate = s.up = TensorType::BF16;
  s.down = TensorType::F32;
  s.layers = 1;
  CudaRunnerOptions options;
  options.decode_graph = false;
  check_all_paths(write_model(s, "nt_cuda_float.gguf"), options);
}

TEST(CudaRunner, RefusesContextsThatDoNotFit) {
  const auto file = GgufFile::open(write_model(ModelSpec{}, "nt_cuda_fit.gguf"));
  try {
    make_cuda_runner(*file, int64_t(1) << 34);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GiB are free"), std::string::npos) << e.what();
  }
}

// The real model on a real prompt (its own tokenizer): with 10 random token
// ids the q8 activations cost 6-11% of the logits' norm in 3 of 41 H200 runs,
// so the 5% bound failed at random; the prompt passes it every time.
TEST(CudaRunner, SmolLM2MatchesReference) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const test::ReferenceLlama ref(*file);
  auto runner = make_cuda_runner(*file, 64);
  const auto tokens = Tokenizer::from_gguf(file->header(), path)
                          .encode("The quick brown fox jumps over the lazy dog. The capital of France is");
  ASSERT_GE(tokens.size(), 8u);
  const size_t n = tokens.size();
  const auto want = ref.logits(tokens);
  std::vector<float> logits(size_t(ref.config().vocab_size));
  runner->forward(std::span(tokens).first(n - 1), 0, logits.data(), false);
  EXPECT_LT(logits_error(logits.data(), want[n - 2]), 5e-2);
  runner->forward(std::span(tokens).subspan(n - 1, 1), int64_t(n - 1), logits.data(), false);
  EXPECT_LT(logits_error(logits.data(), want[n - 1]), 5e-2);
}

}  // namespace
}  // namespace nt
