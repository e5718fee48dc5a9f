// End to end: CudaLlamaRunner logits against the float64 reference forward on
// small random models written as GGUF files, through every path of forward():
// GEMM prefill, chunked mat-vec prefill, gated mat-vec, graph decode,
// rewinding, chunking past max_batch; and its errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cuda/cuda_runner.h"
#include "gguf/gguf_writer.h"
#include "gpu_test_util.h"
#include "model/tensor_names.h"
#include "reference_llama.h"

namespace nt {
namespace {

struct ModelSpec {
  int64_t dim = 256, ffn = 512, layers = 2, heads = 4, kv_heads = 2, vocab = 320;
  TensorType embd = TensorType::Q8_0, output = TensorType::Q8_0;  // output unused when tied
  TensorType wq = TensorType::Q4_K, wk = TensorType::Q4_K, wv = TensorType::Q6_K, wo = TensorType::Q5_K;
  TensorType gate = TensorType::Q4_K, up = TensorType::Q4_K, down = TensorType::Q6_K;
  bool tied = false;
};

std::string write_model(const ModelSpec& s, const std::string& name) {
  const std::string path = (std::filesystem::path(testing::TempDir()) / name).string();
  GgufWriter w(path);
  w.add_metadata("general.architecture", GgufValue::of_string("llama"));
  w.add_metadata("llama.block_count", GgufValue::of_u32(uint32_t(s.layers)));
  w.add_metadata("llama.embedding_length", GgufValue::of_u32(uint32_t(s.dim)));
  w.add_metadata("llama.feed_forward_length", GgufValue::of_u32(uint32_t(s.ffn)));
  w.add_metadata("llama.attention.head_count", GgufValue::of_u32(uint32_t(s.heads)));
  w.add_metadata("llama.attention.head_count_kv", GgufValue::of_u32(uint32_t(s.kv_heads)));
  w.add_metadata("llama.context_length", GgufValue::of_u32(2048));
  w.add_metadata("llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  w.add_metadata("llama.rope.freq_base", GgufValue::of_f32(10000.0f));
  struct Tensor {
    std::string name;
    TensorType type;
    int64_t rows, cols;
    float lo, hi;
  };
  std::vector<Tensor> tensors;
  const float a = 1.7f / std::sqrt(float(s.dim)), f = 1.7f / std::sqrt(float(s.ffn));
  tensors.push_back({"token_embd.weight", s.embd, s.vocab, s.dim, -1.0f, 1.0f});
  tensors.push_back({"output_norm.weight", TensorType::F32, 1, s.dim, 0.8f, 1.2f});
  if (!s.tied) tensors.push_back({"output.weight", s.output, s.vocab, s.dim, -a, a});
  const int64_t hd = s.dim / s.heads;
  for (int64_t l = 0; l < s.layers; ++l) {
    auto n = [&](const char* part) { return layer_tensor_name(l, part); };
    tensors.push_back({n("attn_norm"), TensorType::F32, 1, s.dim, 0.8f, 1.2f});
    tensors.push_back({n("attn_q"), s.wq, s.heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_k"), s.wk, s.kv_heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_v"), s.wv, s.kv_heads * hd, s.dim, -a, a});
    tensors.push_back({n("attn_output"), s.wo, s.dim, s.heads * hd, -a, a});
    tensors.push_back({n("ffn_norm"), TensorType::F32, 1, s.dim, 0.8f, 1.2f});
    tensors.push_back({n("ffn_gate"), s.gate, s.ffn, s.dim, -a, a});
    tensors.push_back({n("ffn_up"), s.up, s.ffn, s.dim, -a, a});
    tensors.push_back({n("ffn_down"), s.down, s.dim, s.ffn, -f, f});
  }
  for (const Tensor& t : tensors) {
    w.add_tensor(t.name, t.type, t.rows == 1 ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.cols, t.rows});
  }
  for (const Tensor& t : tensors) {
    const auto values = test::random_floats(size_t(t.rows * t.cols), t.lo, t.hi);
    std::vector<uint8_t> bytes(row_bytes(t.type, t.cols) * size_t(t.rows));
    quantize_row(t.type, values.data(), bytes.data(), t.rows * t.cols);
    w.write_tensor_data(bytes);
  }
  w.finish();
  return path;
}

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

TEST(CudaRunner, SmolLM2MatchesReference) {
  const std::string path = std::string(NT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const test::ReferenceLlama ref(*file);
  auto runner = make_cuda_runner(*file, 64);
  const auto tokens = random_tokens(12, ref.config().vocab_size);
  const auto want = ref.logits(tokens);
  std::vector<float> logits(size_t(ref.config().vocab_size));
  runner->forward(std::span(tokens).first(10), 0, logits.data(), false);
  EXPECT_LT(logits_error(logits.data(), want[9]), 5e-2);
  runner->forward(std::span(tokens).subspan(10, 1), 10, logits.data(), false);
  EXPECT_LT(logits_error(logits.data(), want[10]), 5e-2);
}

}  // namespace
}  // namespace nt
