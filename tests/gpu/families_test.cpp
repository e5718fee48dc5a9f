// Qwen2, Qwen3 and Gemma 3 layers, and mixtures of experts (Mixtral-style
// Llama, Qwen3-MoE, gpt-oss with its sinks, biases, YaRN, clamped SwiGLU
// and MXFP4 experts), on CUDA against the CPU runner on the tiny presets
// (`make-model --preset tiny-qwen2|tiny-qwen3|tiny-gemma3|tiny-mixtral|tiny-qwen3moe|tiny-gpt-oss`),
// whose numbers the CPU's own tests pin to a float64 reference: a prompt's
// logits row by row, decode steps teacher-forced with the CPU's picks, and
// greedy decoding; resident, streamed from RAM and storage, in a hybrid
// split, and decode batches of several sequences. Prompts run past
// tiny-gemma3's window (16), so its local layers mask; a check beside them
// shows that ignoring the window would move the logits far past the bound.
//
// The bound: both backends multiply quantized matrices with 8-bit activations
// (the GPU's prompt chunks take f16 GEMMs) and cache K and V in f16, each
// about 1% from the float64 reference on such models (the CUDA runner's
// tests bound it at 3e-2), so the two differ by at most about the sum.
// Picks are compared where the CPU's margin between its two best logits
// exceeds six times the RMS of the two backends' logit differences at that
// step (the rounding then decides with odds far below 1e-6), counting tokens
// tied for the top as one: the synthetic models draw their head's rows from
// a pool, so several tokens share each logit, and argmax_first takes the
// first of them on both backends. On f32 weights (differences ~5e-4) nearly
// every pick clears it and at least half must; quantized ones' margins are
// mostly within their rounding, so their picks are compared where they clear
// it, without a count.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/multi_gpu/pipeline_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "gpu_test_util.h"
#include "model/presets.h"
#include "model/synthetic_model.h"
#include "planning/multi_gpu_plan.h"
#include "streaming_budgets.h"

namespace nt {
namespace {

constexpr int64_t kContext = 256;
constexpr double kTolerance = 6e-2;
constexpr int kSteps = 12;

std::string model_path(const std::string& preset, const std::string& scheme, const std::string& tag = "") {
  return (std::filesystem::path(testing::TempDir()) / fmt::format("nt_{}_{}{}.gguf", preset, scheme, tag)).string();
}

// The preset written once per test binary run, quantized with `scheme`.
std::string family_model(const std::string& preset, const std::string& scheme) {
  const std::string path = model_path(preset, scheme);
  if (!std::filesystem::exists(path)) {
    write_synthetic_model(*find_model_preset(preset), *quant_scheme_from_name(scheme), 7, path);
  }
  return path;
}

std::vector<int32_t> random_tokens(size_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(test::rng());
  return t;
}

std::unique_ptr<ModelRunner> cpu_runner(const std::shared_ptr<const GgufFile>& file, int64_t sequences = 1) {
  CpuRunnerOptions o;
  o.context = kContext;
  o.sequences = sequences;
  return make_cpu_runner(file, o);
}

// A mixture of experts chooses its experts by comparing router logits: where
// two are closer than the backends' rounding, a row may take the other
// expert on one of them and move by more than the bound. Such rows are rare
// (none, or one of a test's rows, on these models); they are let through up
// to `outliers` of them, each still within kRoutedAway.
constexpr double kRoutedAway = 0.5;

struct RowCheck {
  double worst = 0.0;  // relative error over the rows checked
  int picks = 0;       // rows whose argmax was compared
  int outliers = 0;    // rows past kTolerance, within kRoutedAway: at most
  int allowed_outliers = 0;
};

// Whether the CPU's pick over `want` is clear of the rounding between the
// backends' rows (the file comment's margin).
bool callable(std::span<const float> got, std::span<const float> want) {
  double squares = 0.0;
  for (size_t i = 0; i < want.size(); ++i) squares += double(got[i] - want[i]) * double(got[i] - want[i]);
  const float top = *std::max_element(want.begin(), want.end());
  float runner_up = -INFINITY;
  for (const float v : want) {
    if (v < top) runner_up = std::max(runner_up, v);
  }
  return double(top - runner_up) > 6.0 * std::sqrt(squares / double(want.size()));
}

// One row of CUDA logits against the CPU's: within the bound, and the same
// argmax where the CPU's margin leaves the rounding no say.
void check_row(std::span<const float> got, std::span<const float> want, const std::string& what, RowCheck& check) {
  const double e = test::relative_error(std::vector<float>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()));
  check.worst = std::max(check.worst, e);
  if (e >= kTolerance && e < kRoutedAway && check.outliers < check.allowed_outliers) {
    ++check.outliers;
    std::printf("  %s: relative error %.2e, past the bound (an expert chosen on a near tie)\n", what.c_str(), e);
    return;
  }
  EXPECT_LT(e, kTolerance) << what;
  if (callable(got, want)) {
    ++check.picks;
    EXPECT_EQ(argmax_first(got), argmax_first(want)) << what;
  }
}

// A prompt of 40 tokens with every row's logits, then kSteps one-token steps
// on the CPU's picks, each step's logits against the CPU's.
RowCheck check_against_cpu(ModelRunner& cuda, ModelRunner& cpu, int outliers = 0) {
  const int64_t vocab = cpu.config().vocab_size;
  RowCheck check;
  check.allowed_outliers = outliers;
  const auto prompt = random_tokens(40, vocab);
  std::vector<float> got(prompt.size() * size_t(vocab)), want(got.size());
  cuda.forward(prompt, 0, got.data(), true);
  cpu.forward(prompt, 0, want.data(), true);
  const auto row = [&](const std::vector<float>& v, size_t r) { return std::span(v).subspan(r * size_t(vocab), size_t(vocab)); };
  for (size_t r = 0; r < prompt.size(); ++r) check_row(row(got, r), row(want, r), fmt::format("prompt row {}", r), check);
  int32_t token = argmax_first(row(want, prompt.size() - 1));
  for (int step = 0; step < kSteps; ++step) {
    const int64_t pos = int64_t(prompt.size()) + step;
    cuda.forward({&token, 1}, pos, got.data(), false);
    cpu.forward({&token, 1}, pos, want.data(), false);
    check_row(row(got, 0), row(want, 0), fmt::format("decode step at position {}", pos), check);
    token = argmax_first(row(want, 0));
  }
  return check;
}

// Greedy decoding (the CUDA runner's decode graphs where it has them)
// against the CPU's, up to the first pick too close to call (the CUDA
// logits of the CPU's path from one prompt pass giving the differences).
void check_greedy(ModelRunner& cuda, ModelRunner& cpu, bool float_weights) {
  const int64_t vocab = cpu.config().vocab_size;
  const auto prompt = random_tokens(24, vocab);
  std::vector<int32_t> got = {cuda.forward_greedy(prompt, 0)};
  cuda.decode_greedy(got[0], int64_t(prompt.size()), kSteps - 1, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  std::vector<float> want_rows(size_t(kSteps * vocab));
  std::vector<int32_t> path = prompt, want;
  cpu.forward(prompt, 0, want_rows.data(), false);
  for (int step = 0; step < kSteps; ++step) {
    const std::span<float> row = std::span(want_rows).subspan(size_t(step * vocab), size_t(vocab));
    want.push_back(argmax_first(row));
    path.push_back(want.back());
    if (step + 1 < kSteps) cpu.forward({&want.back(), 1}, int64_t(path.size()) - 1, want_rows.data() + (step + 1) * vocab, false);
  }
  std::vector<float> got_rows(path.size() * size_t(vocab));
  cuda.forward(path, 0, got_rows.data(), true);
  int compared = 0;
  for (int step = 0; step < kSteps; ++step) {
    const std::span<const float> w(want_rows.data() + step * vocab, size_t(vocab));
    const std::span<const float> g(got_rows.data() + (prompt.size() - 1 + size_t(step)) * size_t(vocab), size_t(vocab));
    if (!callable(g, w)) break;
    ASSERT_EQ(got[size_t(step)], want[size_t(step)]) << "greedy pick " << step;
    ++compared;
  }
  std::printf("  %d greedy picks compared\n", compared);
  if (float_weights) EXPECT_GE(compared, kSteps / 2) << "picks too close to compare";
}

// A 40-token prompt's logits and four decode steps' from both runners, bit for bit.
void expect_same_logits(ModelRunner& got_runner, ModelRunner& want_runner) {
  const int64_t vocab = want_runner.config().vocab_size;
  const auto tokens = random_tokens(44, vocab);
  std::vector<float> got(40 * size_t(vocab)), want(got.size());
  got_runner.forward(std::span(tokens).first(40), 0, got.data(), true);
  want_runner.forward(std::span(tokens).first(40), 0, want.data(), true);
  EXPECT_TRUE(got == want) << "the prompt's logits";
  for (int64_t pos = 40; pos < 44; ++pos) {
    got_runner.forward(std::span(tokens).subspan(size_t(pos), 1), pos, got.data(), false);
    want_runner.forward(std::span(tokens).subspan(size_t(pos), 1), pos, want.data(), false);
    EXPECT_TRUE(std::equal(want.begin(), want.begin() + vocab, got.begin())) << "decode step at position " << pos;
  }
}

struct Case {
  std::string preset, scheme;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.preset + "_" + info.param.scheme;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CudaFamilies : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    path_ = family_model(GetParam().preset, GetParam().scheme);
    file_ = GgufFile::open(path_);
    cpu_ = cpu_runner(file_);
  }
  int64_t layers() const { return cpu_->config().n_layers; }
  bool float_weights() const { return GetParam().scheme == "f32"; }

  std::string path_;
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<ModelRunner> cpu_;
};

TEST_P(CudaFamilies, ResidentMatchesTheCpu) {
  auto cuda = make_cuda_runner(*file_, kContext);
  std::printf("  %s\n", cuda->description().c_str());
  const RowCheck check = check_against_cpu(*cuda, *cpu_);
  std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
  if (float_weights()) EXPECT_GE(check.picks, (40 + kSteps) / 2) << "of " << 40 + kSteps << " rows";
  cpu_ = cpu_runner(file_);
  check_greedy(*cuda, *cpu_, float_weights());
}

// The first layers resident, one streamed from pinned RAM, the last three
// from storage (more than the ring's two slots, which the planner would
// otherwise pin): the streamer moves every role the layers hold.
TEST_P(CudaFamilies, StreamedMatchesTheCpu) {
  auto cuda = make_cuda_runner(*file_, kContext, test::budgets_for(*file_, kContext, layers() - 4, 1, {}));
  std::printf("  %s\n", cuda->description().c_str());
  const RowCheck check = check_against_cpu(*cuda, *cpu_);
  std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
}

// Two of the RAM tier's layers computed by the host in one-token passes,
// streamed in the prompt's.
TEST_P(CudaFamilies, HybridMatchesTheCpu) {
  CudaRunnerOptions o = test::budgets_for(*file_, kContext, 1, layers() - 1, {});
  o.cpu_layers = 2;
  o.cpu_passes = {.all_up_to = 1, .wider = {}};
  o.cpu_threads = 2;
  auto cuda = make_cuda_runner(*file_, kContext, o);
  ASSERT_NE(cuda->description().find("2 computed on the CPU"), std::string::npos) << cuda->description();
  const RowCheck check = check_against_cpu(*cuda, *cpu_);
  std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
}

// Three sequences of different lengths, prefilled one by one, then decoded
// in batches of all three, every step's logits against the CPU's batches of
// the same entries: through the multi-sequence attention launches, and as
// stepwise rows (each computed as its one-token step, which small models'
// decode batches take by default).
void check_batched(const GgufFile& file, ModelRunner& cpu, int64_t stepwise_steps_max, bool float_weights,
                   CudaRunnerOptions o = {}, int outliers = 0) {
  o.max_sequences = 4;
  o.stepwise_steps_max = stepwise_steps_max;
  auto cuda = make_cuda_runner(file, kContext, o);
  const int64_t vocab = cpu.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {random_tokens(30, vocab), random_tokens(9, vocab), random_tokens(50, vocab)};
  std::vector<SeqId> cuda_seqs, cpu_seqs;
  RowCheck check;
  check.allowed_outliers = outliers;
  for (size_t i = 0; i < prompts.size(); ++i) {
    cuda_seqs.push_back(cuda->seq_alloc());
    cpu_seqs.push_back(cpu.seq_alloc());
  }
  const auto run = [&](ModelRunner& runner, const std::vector<SeqId>& seqs, const std::vector<int32_t>& tokens,
                       const std::vector<int64_t>& pos) {
    Batch batch;
    for (size_t i = 0; i < seqs.size(); ++i) batch.add(tokens[i], pos[i], seqs[i], Output::Logits);
    BatchOutputs out;
    runner.forward(batch, out);
    return out.logits;
  };
  std::vector<int32_t> tokens(prompts.size());
  std::vector<int64_t> pos(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (const auto& [runner, seqs] : {std::pair{cuda.get(), &cuda_seqs}, std::pair{&cpu, &cpu_seqs}}) {
      Batch batch;
      batch.add_run(std::span(prompts[i]).first(prompts[i].size() - 1), 0, (*seqs)[i], Output::None);
      BatchOutputs out;
      runner->forward(batch, out);
    }
    tokens[i] = prompts[i].back();
    pos[i] = int64_t(prompts[i].size()) - 1;
  }
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> got = run(*cuda, cuda_seqs, tokens, pos), want = run(cpu, cpu_seqs, tokens, pos);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto row = [&](const std::vector<float>& v) { return std::span(v).subspan(i * size_t(vocab), size_t(vocab)); };
      check_row(row(got), row(want), fmt::format("sequence {} at position {}", i, pos[i]), check);
      tokens[i] = argmax_first(row(want));
      ++pos[i];
    }
  }
  std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
  if (float_weights) EXPECT_GE(check.picks, 3 * kSteps / 2) << "of " << 3 * kSteps << " rows";
}

TEST_P(CudaFamilies, BatchedDecodeMatchesTheCpu) {
  for (const int64_t stepwise : {int64_t(0), int64_t(-1)}) {
    SCOPED_TRACE(stepwise == 0 ? "batched kernels" : "stepwise rows");
    cpu_ = cpu_runner(file_, 4);
    check_batched(*file_, *cpu_, stepwise, float_weights());
  }
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, CudaFamilies,
                         testing::ValuesIn(std::vector<Case>{{"tiny-qwen2", "f32"},
                                                             {"tiny-qwen2", "q8_0"},
                                                             {"tiny-qwen2", "q4_k_m"},
                                                             {"tiny-qwen3", "f32"},
                                                             {"tiny-qwen3", "q8_0"},
                                                             {"tiny-qwen3", "q4_k_m"},
                                                             {"tiny-gemma3", "f32"},
                                                             {"tiny-gemma3", "q8_0"},
                                                             {"tiny-gemma3", "q4_k_m"}}),
                         case_name);

// Mixtures of experts (tiny-mixtral, tiny-qwen3moe: 4 layers of 8 experts,
// 2 chosen a token; tiny-gpt-oss: 4 chosen): every expert in VRAM, and three of the 32 cached in
// front of pinned RAM, so that a pass misses and evicts in every layer and a
// prompt's layer needs more experts than the cache has slots. When every
// miss is copied, the cache only changes where an expert's weights are read
// from, and every row sums its experts in ascending order, so both give the
// same logits bit for bit. Misses the CPU computes (all of them, or the
// measured split's share) match the CPU runner as the GPU's own products do.
class CudaExperts : public CudaFamilies {
 protected:
  static CudaRunnerOptions cached(ExpertMisses misses = ExpertMisses::Link, int64_t slots = 3) {
    CudaRunnerOptions o;
    o.max_vram_experts = slots;
    o.expert_misses = misses;
    return o;
  }
};

std::string misses_name(ExpertMisses m) {
  return m == ExpertMisses::Link ? "misses copied" : m == ExpertMisses::Cpu ? "misses on the CPU" : "misses split";
}

TEST_P(CudaExperts, ResidentMatchesTheCpu) {
  auto cuda = make_cuda_runner(*file_, kContext);
  std::printf("  %s\n", cuda->description().c_str());
  EXPECT_NE(cuda->description().find("all 32 experts in VRAM"), std::string::npos) << cuda->description();
  const RowCheck check = check_against_cpu(*cuda, *cpu_, 1);
  std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
  if (float_weights()) EXPECT_GE(check.picks, (40 + kSteps) / 2) << "of " << 40 + kSteps << " rows";
  cpu_ = cpu_runner(file_);
  check_greedy(*cuda, *cpu_, float_weights());
}

TEST_P(CudaExperts, CachedExpertsMatchTheCpu) {
  for (const ExpertMisses misses : {ExpertMisses::Link, ExpertMisses::Cpu, ExpertMisses::Auto}) {
    SCOPED_TRACE(misses_name(misses));
    auto cuda = make_cuda_runner(*file_, kContext, cached(misses));
    std::printf("  %s: %s\n", misses_name(misses).c_str(), cuda->description().c_str());
    EXPECT_NE(cuda->description().find("3 of 32 experts cached in VRAM"), std::string::npos) << cuda->description();
    cpu_ = cpu_runner(file_);
    const RowCheck check = check_against_cpu(*cuda, *cpu_, 1);
    std::printf("  worst relative logits error %.2e, %d picks compared\n", check.worst, check.picks);
    cpu_ = cpu_runner(file_);
    check_greedy(*cuda, *cpu_, float_weights());
    // Where the misses went: never to the CPU when copied, every one when it takes them.
    const ExpertTraffic t = cuda->expert_traffic();
    const uint64_t misses_seen = t.uses - t.in_vram;
    ASSERT_GT(misses_seen, 0u);
    if (misses == ExpertMisses::Link) {
      EXPECT_EQ(t.on_cpu, 0u);
    } else if (misses == ExpertMisses::Cpu) {
      EXPECT_EQ(t.on_cpu, misses_seen);
    }
    std::printf("  %llu uses, %llu in VRAM, %llu on the CPU\n", (unsigned long long)t.uses, (unsigned long long)t.in_vram,
                (unsigned long long)t.on_cpu);
  }
}

// Also when calibration counts (here: the last expert of each layer chosen
// most) pick the experts the cache starts with. Both runners take each
// expert's products apart (not the chunks of every expert at once, whose
// numbers are one-token steps').
TEST_P(CudaExperts, CachedExpertsComputeWhatResidentOnesDo) {
  CudaRunnerOptions apart;
  apart.expert_chunks = false;
  auto resident = make_cuda_runner(*file_, kContext, apart);
  for (const bool counted : {false, true}) {
    SCOPED_TRACE(counted ? "counts place them" : "an equal share of each layer's");
    CudaRunnerOptions o = cached();
    o.expert_chunks = false;  // as the resident runner: a pass the cache holds whole takes the products apart too
    if (counted) {
      const int64_t layers = resident->config().n_layers, experts = resident->config().layers[0].moe.n_experts;
      o.expert_counts.assign(size_t(layers * experts), 1);
      for (int64_t l = 0; l < layers; ++l) o.expert_counts[size_t(l * experts + experts - 1)] = 100;
    }
    auto cached_runner = make_cuda_runner(*file_, kContext, o);
    expect_same_logits(*cached_runner, *resident);
  }
}

// --trace: every miss copied is a span on the copies' row, and the CPU's
// expert work is on a row of its own, as the cache's counts say.
TEST_P(CudaExperts, TraceShowsTheCopiesAndTheCpusWork) {
  const int64_t vocab = cpu_->config().vocab_size;
  const auto tokens = random_tokens(28, vocab);
  for (const ExpertMisses misses : {ExpertMisses::Link, ExpertMisses::Cpu}) {
    SCOPED_TRACE(misses_name(misses));
    const std::string path = testing::TempDir() + "experts_trace.json";
    std::filesystem::remove(path);
    ExpertTraffic traffic;
    {
      CudaRunnerOptions o = cached(misses);
      o.trace_path = path;
      auto cuda = make_cuda_runner(*file_, kContext, o);
      std::vector<float> logits(static_cast<size_t>(vocab));
      cuda->forward(std::span(tokens).first(24), 0, logits.data(), false);
      for (int64_t pos = 24; pos < 28; ++pos) cuda->forward(std::span(tokens).subspan(size_t(pos), 1), pos, logits.data(), false);
      traffic = cuda->expert_traffic();
    }  // the trace is written as the runner goes
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const nlohmann::json trace = nlohmann::json::parse(in);
    uint64_t copies = 0, cpu_spans = 0;
    for (const nlohmann::json& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      copies += e["tid"] == 1;
      cpu_spans += e["tid"] == 3;
    }
    EXPECT_EQ(copies, traffic.uses - traffic.in_vram - traffic.on_cpu);
    EXPECT_EQ(cpu_spans > 0, traffic.on_cpu > 0);
    EXPECT_GT(misses == ExpertMisses::Link ? copies : cpu_spans, 0u);
  }
}

// Resident; three experts cached, the misses copied or on the CPU; and 24
// cached, so that a batch's experts are held at once (the chunks of every
// expert in one launch a matrix, beside the CPU's share).
TEST_P(CudaExperts, BatchedDecodeMatchesTheCpu) {
  struct Cache {
    int64_t slots;
    ExpertMisses misses;
  };
  for (const int64_t stepwise : {int64_t(0), int64_t(1) << 20}) {
    for (const Cache c : {Cache{0, ExpertMisses::Auto}, Cache{3, ExpertMisses::Link}, Cache{3, ExpertMisses::Cpu},
                          Cache{24, ExpertMisses::Auto}}) {
      SCOPED_TRACE(fmt::format("{}, {}", stepwise == 0 ? "batched kernels" : "stepwise rows",
                               c.slots ? fmt::format("{} experts cached, {}", c.slots, misses_name(c.misses)) : "resident"));
      cpu_ = cpu_runner(file_, 4);
      check_batched(*file_, *cpu_, stepwise, float_weights(), c.slots ? cached(c.misses, c.slots) : CudaRunnerOptions{}, 1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, CudaExperts,
                         testing::ValuesIn(std::vector<Case>{{"tiny-mixtral", "f32"},
                                                             {"tiny-mixtral", "q4_k_m"},
                                                             {"tiny-qwen3moe", "f32"},
                                                             {"tiny-qwen3moe", "q8_0"},
                                                             {"tiny-qwen3moe", "q4_k_m"},
                                                             {"tiny-gpt-oss", "f32"},
                                                             {"tiny-gpt-oss", "q8_0"}}),
                         case_name);

// The layer split: stages over consecutive layers (two on one GPU here) run
// the single runner's kernels on the same weights, so they hand back its
// logits bit for bit (norms unfolded on both: a stage boundary interrupts
// the folding, pipeline_test.cpp).
TEST(CudaFamilies, LayerSplitComputesWhatOneRunnerComputes) {
  for (const char* preset : {"tiny-qwen2", "tiny-qwen3", "tiny-gemma3"}) {
    SCOPED_TRACE(preset);
    const auto file = GgufFile::open(family_model(preset, "q8_0"));
    CudaPipelineOptions o;
    o.gpus = {0, 0};
    o.runner.fold_norms = false;
    o.micro_batches = 1;
    const CudaPipelineRequest r = cuda_pipeline_request(*file, kContext, o);
    auto split = make_cuda_pipeline(*file, kContext, o, place_multi_gpu(r.footprint, r.request, Split::Layer));
    auto one = make_cuda_runner(*file, kContext, o.runner);
    expect_same_logits(*split, *one);
  }
}

// Token trees over Gemma 3's windowed layers, after a prompt longer than the
// window: each node's logits are its root-to-node chain's, for trees run as
// stepwise rows (the short-context decode following each path) and through
// the chunk kernels' ancestor masks (tensor cores: f16 queries and
// probabilities, ~1e-3); both measure the window in path positions, where a
// window measured in cache slots would move a node's logits by ~0.5.
TEST(CudaFamilies, Gemma3TreeNodesSeeTheirPathsWindow) {
  const auto file = GgufFile::open(family_model("tiny-gemma3", "f32"));
  CudaRunnerOptions o;
  o.max_sequences = 3;
  auto runner = make_cuda_runner(*file, kContext, o);
  const int64_t vocab = runner->config().vocab_size;
  const auto prompt = random_tokens(20, vocab), nodes = random_tokens(10, vocab);
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 1, 3, 5, 6, 4};
  const SeqId tree_seq = runner->seq_alloc(), chain_seq = runner->seq_alloc();
  const auto prefill = [&](SeqId seq) {
    runner->seq_truncate(seq, 0);
    Batch batch;
    batch.add_run(prompt, 0, seq, Output::None);
    BatchOutputs out;
    runner->forward(batch, out);
  };
  const auto relative = [](std::span<const float> got, std::span<const float> want) {
    return test::relative_error(std::vector<float>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()));
  };
  for (const bool stepwise : {true, false}) {
    SCOPED_TRACE(stepwise ? "stepwise rows" : "ancestor masks");
    prefill(tree_seq);
    Batch tree;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int32_t parent = parents[i];
      const int64_t pos = parent < 0 ? int64_t(prompt.size()) : tree.entries[size_t(parent)].pos + 1;
      tree.add(nodes[i], pos, tree_seq, Output::Logits, stepwise, parent);
    }
    BatchOutputs tree_out;
    runner->forward(tree, tree_out);
    for (int32_t i = 0; i < int32_t(nodes.size()); ++i) {
      std::vector<int32_t> path;
      for (int32_t n = i; n >= 0; n = parents[size_t(n)]) path.insert(path.begin(), nodes[size_t(n)]);
      prefill(chain_seq);
      Batch chain;
      chain.add_run(path, int64_t(prompt.size()), chain_seq, Output::Logits);
      for (BatchEntry& e : chain.entries) e.stepwise = true;
      BatchOutputs chain_out;
      runner->forward(chain, chain_out);
      EXPECT_LT(relative(tree_out.logits_of(size_t(i), vocab), chain_out.logits_of(path.size() - 1, vocab)),
                stepwise ? 1e-4 : 1e-2)
          << "node " << i;
    }
  }
}

// The window matters at these lengths: the same weights with a window wider
// than the prompt give logits past the bound from the CPU's windowed ones,
// so a GPU that ignored the window would fail the comparisons above.
TEST(CudaFamilies, IgnoringGemma3sWindowWouldBeCaught) {
  const std::string windowed = family_model("tiny-gemma3", "q8_0");
  ModelPreset wide = *find_model_preset("tiny-gemma3");
  for (LayerSpec& layer : wide.config.layers) {
    if (layer.attention.window > 0) layer.attention.window = kContext;
  }
  const std::string unwindowed = model_path("tiny-gemma3", "q8_0", "_wide_window");
  write_synthetic_model(wide, *quant_scheme_from_name("q8_0"), 7, unwindowed);
  auto a = cpu_runner(GgufFile::open(windowed)), b = cpu_runner(GgufFile::open(unwindowed));
  ASSERT_EQ(b->config().layers[0].attention.window, kContext);
  const int64_t vocab = a->config().vocab_size;
  const auto prompt = random_tokens(40, vocab);
  std::vector<float> x(prompt.size() * size_t(vocab)), y(x.size());
  a->forward(prompt, 0, x.data(), true);
  b->forward(prompt, 0, y.data(), true);
  const auto row = [&](const std::vector<float>& v, size_t r) { return std::span(v).subspan(r * size_t(vocab), size_t(vocab)); };
  for (size_t r = 0; r < 16; ++r) EXPECT_EQ(std::vector<float>(row(x, r).begin(), row(x, r).end()),
                                            std::vector<float>(row(y, r).begin(), row(y, r).end())) << "row " << r;
  double least = INFINITY;
  for (size_t r = 24; r < prompt.size(); ++r) {
    const std::vector<float> got(row(y, r).begin(), row(y, r).end());
    least = std::min(least, test::relative_error(got, std::vector<double>(row(x, r).begin(), row(x, r).end())));
  }
  std::printf("  without the window, rows 24-39 move by at least %.2e\n", least);
  EXPECT_GT(least, 3 * kTolerance);
  std::filesystem::remove(unwindowed);
}

// Gemma 3's local layers keep their window in a pool of their own, whose
// pages are reused as the sequences move on: a prompt of many chunks, greedy
// decoding far past that pool (queued a chunk of steps at a time) and a
// batch of two sequences give every logit and pick of --swa-full, bit for bit.
TEST(CudaFamilies, Gemma3sWindowPoolComputesWhatEveryPositionComputes) {
  const auto file = GgufFile::open(family_model("tiny-gemma3", "f32"));
  constexpr int64_t kLong = 4096;
  CudaRunnerOptions o;
  o.max_batch = 64;
  o.max_sequences = 3;  // the default sequence and two more
  auto windowed = make_cuda_runner(*file, kLong, o);
  o.swa_full = true;
  auto full = make_cuda_runner(*file, kLong, o);
  std::printf("  %s\n", windowed->description().c_str());
  ASSERT_NE(windowed->window_pages(), nullptr) << windowed->description();
  ASSERT_EQ(full->window_pages(), nullptr);
  const int64_t pool = windowed->window_pages()->page_count() * windowed->window_pages()->page_size();
  const int64_t vocab = windowed->config().vocab_size;

  const auto prompt = random_tokens(size_t(2 * pool), vocab);
  std::vector<float> got(prompt.size() * size_t(vocab)), want(got.size());
  windowed->forward(prompt, 0, got.data(), true);
  full->forward(prompt, 0, want.data(), true);
  EXPECT_TRUE(got == want) << "a prompt of " << prompt.size() << " tokens in chunks of 64";

  std::vector<int32_t> picks[2];
  for (const auto& [runner, out] : {std::pair{windowed.get(), &picks[0]}, std::pair{full.get(), &picks[1]}}) {
    runner->seq_truncate(0, 0);
    const int32_t first = runner->forward_greedy(std::span(prompt).first(8), 0);
    runner->decode_greedy(first, 8, kLong - 16, [&](int32_t t) {
      out->push_back(t);
      return true;
    });
  }
  EXPECT_EQ(picks[0], picks[1]) << "greedy decoding past " << kLong - 16 << " positions";

  // Two sequences decoded in batches, one started far ahead of the other.
  for (auto* runner : {windowed.get(), full.get()}) runner->seq_truncate(0, 0);
  std::vector<float> rows[2];
  for (int r = 0; r < 2; ++r) {
    ModelRunner& runner = r == 0 ? *windowed : *full;
    const SeqId a = runner.seq_alloc(), b = runner.seq_alloc();
    Batch batch;
    batch.add_run(std::span(prompt).first(size_t(pool)), 0, a, Output::None);
    batch.add_run(std::span(prompt).first(5), 0, b, Output::None);
    BatchOutputs out;
    runner.forward(batch, out);
    for (int64_t step = 0; step < pool; ++step) {
      batch.clear();
      batch.add(prompt[size_t(step)], pool + step, a, Output::Logits);
      batch.add(prompt[size_t(step + 1)], 5 + step, b, Output::Logits);
      runner.forward(batch, out);
      rows[r].insert(rows[r].end(), out.logits.begin(), out.logits.end());
    }
    runner.seq_free(a);
    runner.seq_free(b);
  }
  EXPECT_TRUE(rows[0] == rows[1]) << "batched decode steps of two sequences";
}

}  // namespace
}  // namespace nt
