// End to end: CudaLlamaRunner logits against the float64 reference forward on
// small random models written as GGUF files, through every path of forward():
// GEMM prefill, chunked mat-vec prefill, gated mat-vec, graph decode,
// rewinding, chunking past max_batch; and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/top_logits.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "gguf/gguf_writer.h"
#include "gpu_test_util.h"
#include "model/tensor_names.h"
#include "reference_llama.h"
#include "sampling/sampler.h"
#include "test_models.h"
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

void check_all_paths(const std::string& path, const CudaRunnerOptions& options, bool folds_norms) {
  const auto file = GgufFile::open(path);
  const test::ReferenceLlama ref(*file);
  const int64_t vocab = ref.config().vocab_size, context = 128;
  auto runner = make_cuda_runner(*file, context, options);
  EXPECT_EQ(runner->context_size(), context);
  EXPECT_EQ(runner->description().find("folded norms") != std::string::npos, folds_norms) << runner->description();
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
  check_all_paths(write_model(TestModel{}, "nt_cuda_kquant.gguf"), CudaRunnerOptions{}, true);
}

// The one-token step as models too wide to fold run it (the 70B): a
// separate RMSNorm launch before Q/K/V and before gate/up.
TEST(CudaRunner, KQuantModelUnfoldedMatchesReference) {
  CudaRunnerOptions options;
  options.fold_norms = false;
  check_all_paths(write_model(TestModel{}, "nt_cuda_kquant_unfolded.gguf"), options, false);
}

TEST(CudaRunner, LegacyTiedModelInSmallChunksMatchesReference) {
  TestModel s;
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
  check_all_paths(write_model(s, "nt_cuda_legacy.gguf"), options, false);
}

TEST(CudaRunner, FloatModelWithoutGraphMatchesReference) {
  TestModel s;
  s.embd = TensorType::BF16;
  s.output = TensorType::F32;
  s.wq = s.wk = s.wv = s.wo = TensorType::F16;
  s.gate = s.up = TensorType::BF16;
  s.down = TensorType::F32;
  s.layers = 1;
  CudaRunnerOptions options;
  options.decode_graph = false;
  check_all_paths(write_model(s, "nt_cuda_float.gguf"), options, false);
}

// Greedy decoding with the picks fed back on the GPU and steps queued ahead:
// the same tokens as stepping forward() and taking argmax_first of its
// logits, across the switch from the short-context graph to the full one,
// and the same again after stopping early and resuming where it stopped.
TEST(CudaRunner, GreedyDecodeFeedsPicksBackOnTheDevice) {
  const auto file = GgufFile::open(write_model(TestModel{}, "nt_cuda_greedy.gguf"));
  const int64_t context = kShortDecodeMaxKeys + 100, start = kShortDecodeMaxKeys - 20, steps = 40;
  auto runner = make_cuda_runner(*file, context);
  const int64_t vocab = runner->config().vocab_size;
  const auto prompt = random_tokens(size_t(start), vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));
  const int32_t first = runner->forward_greedy(prompt, 0);

  std::vector<int32_t> want = {first};
  for (int64_t i = 0; i < steps; ++i) {
    runner->forward(std::span(want).subspan(size_t(i), 1), start + i, logits.data(), false);
    want.push_back(argmax_first(logits));
  }
  want.erase(want.begin());

  std::vector<int32_t> got;
  const auto collect = [&](int64_t stop_after) {
    return [&got, stop_after](int32_t t) {
      got.push_back(t);
      return int64_t(got.size()) < stop_after;
    };
  };
  EXPECT_EQ(runner->decode_greedy(first, start, steps, collect(steps)), steps);
  EXPECT_EQ(got, want);

  got.clear();
  EXPECT_EQ(runner->decode_greedy(first, start, steps, collect(5)), 5);  // steps past the 5th ran ahead
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(runner->decode_greedy(got.back(), start + 5, steps - 5, collect(steps)), steps - 5);
  EXPECT_EQ(got, want);

  EXPECT_THROW(runner->decode_greedy(first, context - 2, 3, collect(steps)), Error);
  EXPECT_THROW(runner->decode_greedy(int32_t(vocab), 0, 1, collect(steps)), Error);
}

// A row's top selected on the GPU: what the sampler's own top-k keeps from
// forward()'s row of the same step, for a prefill and for graph decode steps,
// and through the host path beyond kMaxTopLogits.
TEST(CudaRunner, SelectsTheTopOfTheRowAsTheSamplerWould) {
  TestModel spec;
  spec.vocab = 700;
  const auto file = GgufFile::open(write_model(spec, "nt_cuda_top.gguf"));
  auto runner = make_cuda_runner(*file, 64);
  const auto tokens = random_tokens(20, spec.vocab);
  std::vector<float> row(size_t(spec.vocab));
  std::vector<Candidate> got;
  Candidates want;
  const auto expect_top = [&](std::span<const int32_t> run, int64_t pos, int64_t keep) {
    SCOPED_TRACE(testing::Message() << "position " << pos << ", keep " << keep);
    runner->forward(run, pos, row.data(), false);
    want.assign(row, keep);
    got.assign(3, Candidate{NAN, -1});
    runner->forward_top(run, pos, keep, got);
    ASSERT_EQ(got.size(), size_t(keep));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].id, want.view()[i].id) << "rank " << i;
      EXPECT_EQ(got[i].logit, want.view()[i].logit) << "rank " << i;
    }
  };
  expect_top(std::span(tokens).first(16), 0, 40);
  for (int64_t t = 16; t < 20; ++t) {
    for (const int64_t keep : {int64_t(1), int64_t(104), kMaxTopLogits, kMaxTopLogits + 1}) {
      expect_top(std::span(tokens).subspan(size_t(t), 1), t, keep);
    }
  }
  EXPECT_THROW(runner->forward_top(std::span(tokens).first(1), 0, 0, got), Error);
  EXPECT_THROW(runner->forward_top(std::span(tokens).first(1), 0, spec.vocab, got), Error);
}

// Sampled decoding with the chain run on the GPU (sample_top_and_advance)
// and steps queued ahead: the same tokens as stepping forward_top and the
// host sampler's sample_top with the same seed, for chains that keep a few
// or many candidates, across the switch from the short-context graph to the
// full one.
TEST(CudaRunner, SampledDecodeOnTheDeviceChoosesAsTheHostSampler) {
  TestModel spec;
  spec.vocab = 700;
  const auto file = GgufFile::open(write_model(spec, "nt_cuda_sampled.gguf"));
  const int64_t context = kShortDecodeMaxKeys + 100, start = kShortDecodeMaxKeys - 20, steps = 40;
  auto runner = make_cuda_runner(*file, context);
  const int32_t first = runner->forward_greedy(random_tokens(size_t(start), spec.vocab), 0);
  struct Chain {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  for (const Chain c : {Chain{0.8f, 40, 0.95f, 0.05f}, Chain{1.5f, int32_t(kMaxTopLogits), 1.0f, 0.0f}, Chain{0.4f, 5, 0.5f, 0.2f}}) {
    SCOPED_TRACE(testing::Message() << "T " << c.temperature << ", top_k " << c.top_k);
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    params.seed = test::rng()();
    Sampler host(params, spec.vocab), device(params, spec.vocab);
    ASSERT_TRUE(device.runs_without_history());
    std::vector<int32_t> want;
    std::vector<Candidate> top;
    for (int32_t token = first; int64_t(want.size()) < steps;) {
      runner->forward_top({&token, 1}, start + int64_t(want.size()), host.top_needed(), top);
      token = host.sample_top(top);
      want.push_back(token);
    }
    std::vector<int32_t> got;
    EXPECT_EQ(runner->decode(first, start, steps, device.step_policy(), [&](int32_t t) {
      got.push_back(t);
      return true;
    }), steps);
    EXPECT_EQ(got, want);
    if (c.temperature > 1.0f) {
      EXPECT_GT(std::set<int32_t>(want.begin(), want.end()).size(), 10u) << "a hot chain draws many tokens";
    }
  }
}

// A NaN logit reaches the user as the sampler's error, from the selection on
// the GPU and from sampling on the GPU alike.
TEST(CudaRunner, SamplingRefusesAPoisonedRow) {
  TestModel spec;
  spec.vocab = 700;
  spec.output = TensorType::F32;
  const std::string path = write_model(spec, "nt_cuda_poisoned.gguf");
  const int64_t poisoned = 433;
  {
    const auto clean = GgufFile::open(path);
    const uint64_t at = clean->header().data_offset + clean->header().tensor("output.weight").offset + 4 * uint64_t(poisoned * spec.dim);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = NAN;
    f.seekp(std::streamoff(at));
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  const auto file = GgufFile::open(path);
  auto runner = make_cuda_runner(*file, 64);
  SamplingParams params;
  Sampler sampler(params, spec.vocab);
  std::vector<Candidate> top;
  const auto expect_poisoned = [&](const std::function<void()>& run) {
    try {
      run();
      FAIL() << "expected the sampler's error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the logit of token 433 is nan"), std::string::npos) << e.what();
    }
  };
  const std::vector<int32_t> prompt = {1, 2, 3};
  expect_poisoned([&] { runner->forward_top(prompt, 0, sampler.top_needed(), top); });
  expect_poisoned([&] { runner->forward_top(std::span(prompt).first(1), 3, sampler.top_needed(), top); });
  expect_poisoned([&] { runner->decode(1, 4, 3, sampler.step_policy(), [](int32_t) { return true; }); });
}

TEST(CudaRunner, RefusesContextsThatDoNotFit) {
  const auto file = GgufFile::open(write_model(TestModel{}, "nt_cuda_fit.gguf"));
  try {
    make_cuda_runner(*file, int64_t(1) << 34);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GiB are free"), std::string::npos) << e.what();
  }
}

// SmolLM2 on three real texts (its own tokenizer), against the float64
// reference: a 24-token prefill with every row's logits, then every later
// token as a teacher-forced decode step. Prefill (f16 GEMM) sits at ~0.1% of
// the logits' norm. A decode step's q8 activations move the logits by a few
// percent, and by 6-27% at one position in ten, so one step is a noisy
// sample and the decode bounds are on the distribution (H200: median
// 2.6-3.1%, 90th percentile 5.6-8.2%, worst 12-27%).
TEST(CudaRunner, SmolLM2TracksReference) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const test::ReferenceLlama ref(*file);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  auto runner = make_cuda_runner(*file, 2048);  // positions below kShortDecodeMaxKeys, in a context beyond it
  const char* texts[] = {
      "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
      "movable metal type, oil-based ink and a wooden press adapted from those used to make wine. Books, "
      "which had been copied by hand for centuries, could now be produced in hundreds of identical copies, "
      "and within fifty years presses were at work in more than two hundred European cities.",
      "To make a simple loaf of bread, mix five hundred grams of flour with ten grams of salt, seven grams "
      "of dried yeast and three hundred and fifty millilitres of warm water. Knead the dough for ten "
      "minutes until it is smooth, leave it to rise in a warm place for an hour, then shape it, let it "
      "rise again and bake it at two hundred and twenty degrees for thirty minutes.",
      "def fibonacci(n):\n    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n    a, b = 0, 1\n    out = []\n"
      "    for _ in range(n):\n        out.append(a)\n        a, b = b, a + b\n    return out\n\n"
      "print(fibonacci(10))  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n"};
  constexpr size_t kPrompt = 24;
  std::vector<double> prefill, decode;
  for (const char* text : texts) {
    const auto tokens = tokenizer.encode(text);
    ASSERT_GT(tokens.size(), kPrompt + 40) << text;
    const auto want = ref.logits(tokens);
    const size_t vocab = size_t(ref.config().vocab_size);
    std::vector<float> logits(kPrompt * vocab, NAN);
    runner->forward(std::span(tokens).first(kPrompt), 0, logits.data(), true);
    for (size_t t = 0; t < kPrompt; ++t) prefill.push_back(logits_error(logits.data() + t * vocab, want[t]));
    for (size_t t = kPrompt; t < tokens.size(); ++t) {
      std::fill(logits.begin(), logits.end(), NAN);
      runner->forward(std::span(tokens).subspan(t, 1), int64_t(t), logits.data(), false);
      decode.push_back(logits_error(logits.data(), want[t]));
    }
  }
  struct Bounds {
    const char* what;
    std::vector<double>* errors;
    double median, p90, worst;
  };
  for (const Bounds& b : {Bounds{"prefill rows", &prefill, 5e-3, 1e-2, 2e-2}, Bounds{"decode steps", &decode, 5e-2, 1.2e-1, 3.5e-1}}) {
    std::vector<double>& e = *b.errors;
    std::sort(e.begin(), e.end());
    const double median = e[e.size() / 2], p90 = e[e.size() * 9 / 10];
    std::printf("  %zu %s, logits error against float64: median %.4f, 90th percentile %.4f, worst %.4f\n", e.size(), b.what, median,
                p90, e.back());
    EXPECT_LT(median, b.median) << b.what;
    EXPECT_LT(p90, b.p90) << b.what;
    EXPECT_LT(e.back(), b.worst) << b.what;
  }
}

}  // namespace
}  // namespace nt
