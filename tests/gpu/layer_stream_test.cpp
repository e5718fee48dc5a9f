// Tiered weight streaming: a CUDA runner whose layers stream from pinned RAM
// and/or storage must compute what the all-resident runner computes (the same
// kernels read the same re-laid weights, so logits agree to rounding noise and
// greedy tokens are identical), for several splits of layers across the three
// tiers, prefill chunks and decode steps; and budgets that cannot hold one
// streamed layer fail with the planner's message.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <utility>

#include "backend/cuda/runner/cuda_runner.h"
#include "gguf/gguf_writer.h"
#include "gpu_test_util.h"
#include "model/arch/model_spec.h"
#include "model/tensor_names.h"
#include "quant/quant.h"
#include "streaming_budgets.h"
#include "test_models.h"

namespace nt {
namespace {

// Eight layers, so budgets can split them over all three tiers with more
// streamed layers than ring slots.
TestModel streaming_spec() {
  TestModel s;
  s.layers = 8;
  return s;
}

constexpr int64_t kContext = 128;

struct Run {
  std::vector<float> prefill_logits;  // every row of the prompt chunks
  std::vector<std::vector<float>> decode_logits;
  std::vector<int32_t> tokens;  // greedy
};

Run run(const GgufFile& file, CudaRunnerOptions options, const std::vector<int32_t>& prompt, int64_t vocab,
        const std::string& tiers = {}) {
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  options.on_load_progress = [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); };
  auto runner = make_cuda_runner(file, kContext, options);
  std::printf("  %s\n", runner->description().c_str());
  EXPECT_NE(runner->description().find(tiers), std::string::npos) << "expected " << tiers;
  // Load progress climbs to one total: the resident upload, then the RAM tier.
  EXPECT_FALSE(progress.empty());
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_EQ(progress[i].second, progress.back().second);
    if (i) {
      EXPECT_GE(progress[i].first, progress[i - 1].first);
    }
  }
  if (!progress.empty()) {
    EXPECT_EQ(progress.back().first, progress.back().second);
  }
  Run r;
  r.prefill_logits.assign(prompt.size() * size_t(vocab), NAN);
  // A GEMM-sized chunk, then a mat-vec-sized one, each with every row's logits.
  runner->forward(std::span(prompt).first(40), 0, r.prefill_logits.data(), true);
  runner->forward(std::span(prompt).subspan(40), 40, r.prefill_logits.data() + 40 * vocab, true);
  std::vector<float> logits(static_cast<size_t>(vocab));
  int32_t token = prompt.back();
  for (int64_t pos = int64_t(prompt.size()); pos < int64_t(prompt.size()) + 8; ++pos) {
    if (pos > int64_t(prompt.size())) {
      std::fill(logits.begin(), logits.end(), NAN);
      runner->forward(std::span(&token, 1), pos - 1, logits.data(), false);
      r.decode_logits.push_back(logits);
    } else {
      std::copy_n(r.prefill_logits.end() - vocab, vocab, logits.begin());
    }
    token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(token);
  }
  return r;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return worst / scale;
}

void expect_file_streams_like_resident(const std::string& path, int64_t layers, int64_t vocab, const CudaRunnerOptions& base,
                                       std::vector<std::array<int64_t, 2>> splits) {
  const auto file = GgufFile::open(path);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> prompt(52);
  for (auto& t : prompt) t = dist(test::rng());
  const Run want = run(*file, base, prompt, vocab);
  for (const auto& [vram, ram] : splits) {
    SCOPED_TRACE(testing::Message() << vram << " vram, " << ram << " ram, " << layers - vram - ram << " disk layers");
    const Run got = run(*file, test::budgets_for(*file, kContext, vram, ram, base), prompt, vocab,
                        fmt::format("layers {} vram + {} ram + {} disk", vram, ram, layers - vram - ram));
    EXPECT_LT(max_relative_difference(got.prefill_logits, want.prefill_logits), 1e-5);
    ASSERT_EQ(got.decode_logits.size(), want.decode_logits.size());
    for (size_t i = 0; i < got.decode_logits.size(); ++i) {
      EXPECT_LT(max_relative_difference(got.decode_logits[i], want.decode_logits[i]), 1e-5) << "decode step " << i;
    }
    EXPECT_EQ(got.tokens, want.tokens);
  }
}

void expect_streaming_matches_resident(const TestModel& spec, const std::string& name, const CudaRunnerOptions& base,
                                       std::vector<std::array<int64_t, 2>> splits) {
  expect_file_streams_like_resident(write_model(spec, name), spec.layers, spec.vocab, base, std::move(splits));
}

TEST(LayerStreaming, MixedKQuantsMatchResidentAcrossTiers) {
  // {vram, ram} of 8 layers: RAM only, storage only, all three tiers twice.
  expect_streaming_matches_resident(streaming_spec(), "nt_stream_kquant.gguf", CudaRunnerOptions{},
                                    {{2, 6}, {0, 0}, {1, 2}, {4, 1}, {5, 3}});
}

TEST(LayerStreaming, FusedAndFloatLayersInSmallChunksMatchResident) {
  TestModel s = streaming_spec();
  s.wq = s.wk = s.wv = TensorType::Q8_0;  // fused QKV
  s.up = TensorType::Q8_0;                // gate and up apart
  s.down = TensorType::F16;               // file layout kept: a plain device copy
  CudaRunnerOptions o;
  o.max_batch = 16;  // several prefill chunks, each a pass over the streamed layers
  o.ring_slots = 3;
  expect_streaming_matches_resident(s, "nt_stream_fused.gguf", o, {{1, 1}, {0, 2}, {2, 6}});
  o.ring_slots = 2;
  o.io = IoBackend::Mmap;
  expect_streaming_matches_resident(s, "nt_stream_mmap.gguf", o, {{1, 2}});
}

// Copies of the next pass's first RAM-tier layers issued while a pass ends
// (stream_run_ahead): kept by the passes that repeat it (prompt chunks,
// decode steps), and a disk layer among the first stops them.
TEST(LayerStreaming, RunAheadMatchesResident) {
  CudaRunnerOptions o;
  o.stream_run_ahead = true;
  expect_streaming_matches_resident(streaming_spec(), "nt_stream_ahead.gguf", o, {{2, 6}, {1, 2}, {0, 8}});
  o.ring_slots = 3;
  o.max_batch = 16;
  // Three tiers with three slots need more disk layers than slots (streaming_budgets.h).
  expect_streaming_matches_resident(streaming_spec(), "nt_stream_ahead3.gguf", o, {{2, 6}, {2, 1}});
}

TEST(LayerStreaming, SmolLM2AcrossThreeTiersMatchesResident) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const ModelSpec config = read_model_spec(file->header(), path);
  // 30 layers: a third in each tier, then a few resident with the rest streamed.
  expect_file_streams_like_resident(path, config.n_layers, config.vocab_size, CudaRunnerOptions{}, {{10, 10}, {3, 20}});
}

TEST(LayerStreaming, BudgetsTooSmallForOneLayerFailClearly) {
  const auto file = GgufFile::open(write_model(streaming_spec(), "nt_stream_small.gguf"));
  CudaRunnerOptions o;
  o.vram_budget = uint64_t(1) << 50;
  o.ram_budget = uint64_t(1) << 50;
  const CudaPlacement all = plan_cuda_placement(*file, kContext, o);
  o.vram_budget = all.plan.vram_fixed + 1;  // no room for the layer ring
  try {
    make_cuda_runner(*file, kContext, o);
    FAIL() << "expected a VRAM budget error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("VRAM budget"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too small"), std::string::npos) << e.what();
  }
  o.vram_budget = all.plan.vram_fixed + 6 * all.footprint.layers[0].resident_bytes;  // streams from storage
  o.ram_budget = 0;  // no room for the staging slots
  try {
    make_cuda_runner(*file, kContext, o);
    FAIL() << "expected a RAM budget error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RAM budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nt
