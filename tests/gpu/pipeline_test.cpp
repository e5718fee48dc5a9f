// The layer split (pipeline) on the GPU. Stages over consecutive layers run
// the single runner's kernels on the same weights, and the hidden state
// crosses between them as f32, so a pipeline must hand back bit for bit what
// one runner does for the same batches: prefills of several sequences side
// by side (mat-vec, GEMM, chunks past max_batch), decode steps asking for
// logits, argmax and the top, rollback, copied prefixes, layer schedules
// that leave whole stages idle, resident and streamed stages. Stages share
// one GPU here (a GPU listed twice); with two GPUs the same runs cross them.
// The real models must keep their greedy outputs: llama2.c's path for
// stories260K, the single runner's for SmolLM2, and speculation over the
// pipeline must decode what it decodes over one runner.
//
// One difference is kept out of the exact comparisons: a one-token pass
// folds the RMSNorms into the mat-vecs (folds_norms), which a stage boundary
// interrupts (the next stage norms its input itself), so those compare
// with fold_norms off; the real-model tests keep it on.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <random>

#include "backend/cuda/multi_gpu/pipeline_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "engine/open_model.h"
#include "engine/self_draft.h"
#include "engine/speculative.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "model/llama2c_converter.h"
#include "smollm2_prompts.h"
#include "stories.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

constexpr int64_t kContext = 128;

// A layer split with the stages and tiers given: stage g on gpus[g] runs the
// next tiers[g].size() layers.
MultiGpuPlan layer_split(const std::vector<int>& gpus, const std::vector<std::vector<Tier>>& tiers) {
  MultiGpuPlan plan;
  plan.split = Split::Layer;
  int64_t first = 0;
  for (size_t g = 0; g < gpus.size(); ++g) {
    GpuPlacement p;
    p.gpu.id = gpus[g];
    p.first_layer = first;
    p.end_layer = first + int64_t(tiers[g].size());
    p.plan.layer_tier = tiers[g];
    first = p.end_layer;
    plan.gpus.push_back(std::move(p));
  }
  return plan;
}

// Decode steps unsplit (micro_batches 1): micro-batches take the kernels of
// their own size, which round differently from one runner's whole step.
std::unique_ptr<ModelRunner> pipeline(const GgufFile& file, const MultiGpuPlan& plan, const CudaRunnerOptions& options) {
  CudaPipelineOptions o;
  for (const GpuPlacement& p : plan.gpus) o.gpus.push_back(p.gpu.id);
  o.runner = options;
  o.micro_batches = 1;
  return make_cuda_pipeline(file, kContext, o, plan);
}

// The planner's own layer split over `gpus` (budgets: free VRAM, or those given).
std::unique_ptr<ModelRunner> planned_pipeline(const GgufFile& file, const std::vector<int>& gpus, const CudaRunnerOptions& options,
                                              std::vector<uint64_t> budgets = {}, int micro_batches = 1) {
  const CudaPipelineOptions o{gpus, std::move(budgets), options, micro_batches};
  const CudaPipelineRequest r = cuda_pipeline_request(file, kContext, o);
  return make_cuda_pipeline(file, kContext, o, place_multi_gpu(r.footprint, r.request, Split::Layer));
}

// Everything a script of passes handed back, in order.
struct Handed {
  std::vector<float> logits;
  std::vector<int32_t> argmax;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
};

void append(const BatchOutputs& out, Handed& h) {
  h.logits.insert(h.logits.end(), out.logits.begin(), out.logits.end());
  h.argmax.insert(h.argmax.end(), out.argmax.begin(), out.argmax.end());
  for (const auto& top : out.top) {
    for (const Candidate& c : top) {
      h.top_ids.push_back(c.id);
      h.top_logits.push_back(c.logit);
    }
  }
}

void expect_same(const Handed& got, const Handed& want, const std::string& what) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  size_t differing = 0;
  for (size_t i = 0; i < want.logits.size(); ++i) differing += got.logits[i] != want.logits[i];
  EXPECT_EQ(differing, 0u) << what << ": logits differ from one runner's (of " << want.logits.size() << ")";
  EXPECT_EQ(got.argmax, want.argmax) << what;
  EXPECT_EQ(got.top_ids, want.top_ids) << what;
  EXPECT_EQ(got.top_logits, want.top_logits) << what;
}

// Passes over four sequences through every path of forward(Batch); those
// longer than max_batch (64 here) are several chunks, which a pipeline's
// stages overlap.
Handed run_script(ModelRunner& r, const std::vector<int32_t>& t, const LayerSchedule& schedule = {}) {
  Handed handed;
  Batch b;
  BatchOutputs out;
  const auto pass = [&] {
    r.forward(b, out, schedule);
    append(out, handed);
    b.clear();
  };
  const auto run = [&](size_t from, size_t n, int64_t pos, SeqId seq, Output output) {
    for (size_t i = 0; i < n; ++i) b.add(t[from + i], pos + int64_t(i), seq, output);
  };
  const SeqId s1 = r.seq_alloc(), s2 = r.seq_alloc();
  // Prefills side by side: every row's logits (GEMM), 70 tokens (two chunks
  // of max_batch 64) with the last one's argmax, 5 tokens (mat-vec) with the top.
  run(0, 40, 0, 0, Output::Logits);
  b.add_run(std::span(t).subspan(40, 70), 0, s1, Output::Argmax);
  b.add_run(std::span(t).subspan(110, 5), 0, s2, Output::Top);
  b.top_k = 8;
  pass();
  // Decode steps of three sequences, each asking for something else.
  for (int64_t step = 0; step < 5; ++step) {
    b.add(t[size_t(120 + step)], 40 + step, 0, Output::Logits);
    b.add(t[size_t(130 + step)], 70 + step, s1, Output::Argmax);
    b.add(t[size_t(140 + step)], 5 + step, s2, Output::Top);
    pass();
  }
  // Argmax steps only: captured as a graph per sequence count where resident.
  for (int64_t step = 0; step < 4; ++step) {
    b.add(t[size_t(150 + step)], 45 + step, 0, Output::Argmax);
    b.add(t[size_t(160 + step)], 75 + step, s1, Output::Argmax);
    b.add(t[size_t(170 + step)], 10 + step, s2, Output::Argmax);
    pass();
  }
  // One token of one sequence alone.
  run(180, 1, 49, 0, Output::Logits);
  pass();
  // Rollback: s1 again from position 30.
  r.seq_truncate(s1, 30);
  run(190, 12, 30, s1, Output::Logits);
  pass();
  // A copied prefix continues as its source would.
  const SeqId s3 = r.seq_alloc();
  r.seq_copy_prefix(0, s3, 20);
  run(210, 4, 20, s3, Output::Logits);
  run(220, 3, 14, s2, Output::Argmax);
  pass();
  // Three chunks in one pass: the stages work on different chunks at once.
  for (const SeqId s : {SeqId(0), s1, s2}) r.seq_truncate(s, 0);
  run(0, 60, 0, 0, Output::Logits);
  run(60, 60, 0, s1, Output::Argmax);
  b.add_run(std::span(t).subspan(120, 60), 0, s2, Output::Top);
  pass();
  for (const SeqId s : {s1, s2, s3}) r.seq_free(s);
  r.seq_truncate(0, 0);
  return handed;
}

std::vector<int32_t> script_tokens(int64_t vocab) {
  std::mt19937 rng(25);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> t(256);
  for (int32_t& x : t) x = dist(rng);
  return t;
}

// The reference: one runner, every pass through its batch path (the
// single-sequence graphs, which fuse RoPE into attention, left out) and its
// batched kernels (stages never step small batches stepwise).
CudaRunnerOptions exact_options() {
  CudaRunnerOptions o;
  o.max_batch = 64;
  o.max_sequences = 4;
  o.fold_norms = false;
  o.stepwise_steps_max = 0;
  return o;
}

std::unique_ptr<ModelRunner> reference_runner(const GgufFile& file) {
  CudaRunnerOptions o = exact_options();
  o.decode_graph = false;
  return make_cuda_runner(file, kContext, o);
}

using Tiers = std::vector<std::vector<Tier>>;
constexpr Tier V = Tier::Vram, R = Tier::Ram, D = Tier::Disk;

// Resident and streamed splits of 8 layers over the GPUs listed.
void expect_splits_compute_what_one_runner_does(const std::vector<int>& gpus2, const std::vector<int>& gpus3) {
  TestModel spec;
  spec.layers = 8;
  const auto file = GgufFile::open(write_model(spec, "nt_pipeline_script.gguf"));
  const std::vector<int32_t> tokens = script_tokens(spec.vocab);
  const Handed want = run_script(*reference_runner(*file), tokens);
  const struct {
    std::vector<int> gpus;
    Tiers tiers;
  } splits[] = {
      {gpus2, {{V, V, V, V}, {V, V, V, V}}},
      {gpus2, {{V}, {V, V, V, V, V, V, V}}},
      {gpus3, {{V, V}, {V, V, V}, {V, V, V}}},
      {gpus2, {{V, R, D}, {V, V, R, R, D}}},  // each stage streams from pinned RAM and from storage
      {gpus3, {{R, R}, {V, D, D}, {R, R, R}}},
  };
  for (const auto& s : splits) {
    auto runner = pipeline(*file, layer_split(s.gpus, s.tiers), exact_options());
    const std::string what = runner->description();
    std::printf("  %s\n", what.c_str());
    expect_same(run_script(*runner, tokens), want, what);
  }
}

TEST(Pipeline, StagesOnOneGpuComputeWhatOneRunnerComputes) {
  expect_splits_compute_what_one_runner_does({0, 0}, {0, 0, 0});
}

// The same on real GPUs: the hand-off crosses peer to peer or through host memory.
TEST(Pipeline, StagesOnTwoGpusComputeWhatOneRunnerComputes) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << test::gpu_count() << " visible";
  const std::vector<int> three = test::gpu_count() >= 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1, 0};
  expect_splits_compute_what_one_runner_does({0, 1}, three);
}

// Schedules that skip layers, end inside a stage or leave later stages with
// nothing but the hand-off and the head.
TEST(Pipeline, LayerSchedulesSpanStagesAsOnOneRunner) {
  TestModel spec;
  spec.layers = 8;
  const auto file = GgufFile::open(write_model(spec, "nt_pipeline_schedule.gguf"));
  const std::vector<int32_t> tokens = script_tokens(spec.vocab);
  auto one = reference_runner(*file);
  auto three = pipeline(*file, layer_split({0, 0, 0}, {{V, V, V}, {V, R}, {V, V, D}}), exact_options());
  const std::vector<int32_t> every_layer = run_script(*one, tokens).argmax;
  for (const LayerSchedule& schedule : {LayerSchedule{{0, 1, 3, 4, 6}}, LayerSchedule{{0, 1}}, LayerSchedule{{5, 7}}}) {
    const std::string what = ::testing::PrintToString(schedule.layers);
    const Handed want = run_script(*one, tokens, schedule);
    ASSERT_NE(want.argmax, every_layer) << what << " changes nothing: the comparison cannot fail";
    expect_same(run_script(*three, tokens, schedule), want, what);
  }
}

std::string stories_gguf(const std::string& name) {
  const std::filesystem::path dir = test::shared_models_dir();
  const std::string path = (std::filesystem::path(testing::TempDir()) / name).string();
  convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), path);
  return path;
}

#define REQUIRE_STORIES()                                                                                         \
  if (!std::filesystem::exists(test::shared_models_dir() / std::filesystem::path("stories260K.bin"))) {           \
    GTEST_SKIP() << test::shared_models_dir() << "/stories260K.bin not present";                                 \
  }

// Placed by the planner over GPU 0 twice (free VRAM shared), resident and
// streamed, the pipeline follows llama2.c's greedy path from BOS: through
// every row's logits in one prefill, and decoding freely.
TEST(Pipeline, Stories260KFollowsLlama2cGreedyPath) {
  REQUIRE_STORIES();
  const std::vector<int32_t> golden = test::stories_golden_ids(test::shared_models_dir() / std::filesystem::path("README.md"));
  ASSERT_EQ(golden.size(), 64u);
  const std::string path = stories_gguf("nt_stories260k_pipeline.gguf");
  const auto file = GgufFile::open(path);
  auto planned = planned_pipeline(*file, {0, 0}, {});
  auto streamed = pipeline(*file, layer_split({0, 0}, {{V, R}, {R, D, R}}), {});
  for (ModelRunner* runner : {planned.get(), streamed.get()}) {
    SCOPED_TRACE(runner->description());
    test::expect_llama2c_greedy_path(*runner, golden);
  }
  std::filesystem::remove(path);
}

// Every token drafted by the first 3 of the 5 layers (the draft ends inside
// the second stage, the last runs only the head) and verified by all:
// speculative decoding over the pipeline decodes what it decodes over one runner.
TEST(Pipeline, SpeculationDecodesAsOverOneRunner) {
  REQUIRE_STORIES();
  const std::string path = stories_gguf("nt_stories260k_pipeline_spec.gguf");
  const auto file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little dog", true, false);
  const auto speculate = [&](ModelRunner& runner) {
    SelfDraft draft(runner, 0, 3);
    SpeculativeGenerator generator(runner, tokenizer, draft, 4);
    Sampler sampler(greedy_sampling(), runner.config().vocab_size);
    GenerationOptions options;
    options.max_tokens = 48;
    const SpeculativeStats stats = generator.generate(prompt, sampler, options, [](std::string_view) {});
    EXPECT_GT(stats.speculation.accepted, 0) << runner.description() << ": no draft accepted, the drafts went untested";
    return generator.generated();
  };
  const std::vector<int32_t> want = speculate(*reference_runner(*file));
  EXPECT_EQ(speculate(*pipeline(*file, layer_split({0, 0, 0}, {{V, V}, {V, R}, {V}}), exact_options())), want);
  std::filesystem::remove(path);
}

// Every prompt on its own sequence, prefilled in one pass, then each step one
// batch of every sequence's last pick.
std::vector<std::vector<int32_t>> decode_together(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts, int n) {
  std::vector<SeqId> seqs;
  Batch batch;
  BatchOutputs out;
  for (const auto& p : prompts) {
    seqs.push_back(runner.seq_alloc());
    batch.add_run(p, 0, seqs.back(), Output::Argmax);
  }
  std::vector<std::vector<int32_t>> picks(prompts.size());
  for (int step = 0; step < n; ++step) {
    runner.forward(batch, out);
    batch.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      picks[i].push_back(out.argmax[i]);
      batch.add(out.argmax[i], int64_t(prompts[i].size()) + step, seqs[i], Output::Argmax);
    }
  }
  for (const SeqId s : seqs) runner.seq_free(s);
  return picks;
}

// Default options (folded norms in one-token steps), but the batched
// kernels for the one runner's steps of 8, as the stages run them (not
// SmolLM2's stepwise steps). Alone, the greedy continuations (top-2 margins
// above 1.88 logits, real_models_test.cpp) must be the single runner's;
// eight sequences decoding together run the same kernels as on one runner,
// so they must match it token for token, resident and with both stages
// streaming (placed by the planner from budgets).
TEST(Pipeline, SmolLM2DecodesAsOneRunner) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const auto prompts = test::smollm2_batch_prompts(tokenizer);
  CudaRunnerOptions o;
  o.max_sequences = int(prompts.size()) + 1;
  o.stepwise_steps_max = 0;
  auto one = make_cuda_runner(*file, kContext, o);
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < 3; ++i) alone.push_back(test::greedy_decode(*one, prompts[i], 32));
  const auto together = decode_together(*one, prompts, 48);
  one.reset();

  auto resident = planned_pipeline(*file, {0, 0}, o);
  std::printf("  %s\n", resident->description().c_str());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(test::greedy_decode(*resident, prompts[i], 32), alone[i]) << "prompt " << i;
  EXPECT_EQ(decode_together(*resident, prompts, 48), together) << resident->description();
  resident.reset();

  // Budgets that hold each stage's buffers and 8 of its layers: the rest stream.
  const CudaPipelineRequest huge = cuda_pipeline_request(*file, kContext, {{0, 0}, {uint64_t(1) << 50, uint64_t(1) << 50}, o});
  const MultiGpuPlan roomy = place_multi_gpu(huge.footprint, huge.request, Split::Layer);
  // Per stage: its own fixed buffers differ (the last holds the logits rows).
  uint64_t layer = 0;
  for (const LayerFootprint& l : huge.footprint.layers) layer = std::max({layer, l.resident_bytes, l.staging_bytes});
  std::vector<uint64_t> budgets;
  for (const GpuPlacement& g : roomy.gpus) budgets.push_back(g.plan.vram_fixed + 8 * layer + uint64_t(o.ring_slots) * layer);
  CudaPipelineRequest tight = huge;
  for (size_t i = 0; i < tight.request.gpus.size(); ++i) tight.request.gpus[i].vram_budget = budgets[i];
  const MultiGpuPlan plan = place_multi_gpu(tight.footprint, tight.request, Split::Layer);
  for (const GpuPlacement& g : plan.gpus) {
    ASSERT_GT(g.plan.count(Tier::Vram), 0);
    ASSERT_GT(g.plan.count(Tier::Ram) + g.plan.count(Tier::Disk), 0) << "the stage from layer " << g.first_layer << " streams nothing";
  }
  auto streamed = make_cuda_pipeline(*file, kContext, {{0, 0}, budgets, o, 1}, plan);
  std::printf("  %s\n", streamed->description().c_str());
  EXPECT_EQ(decode_together(*streamed, prompts, 48), together) << streamed->description();
}

// Decode steps cut into one micro-batch a stage (the default), which the
// stages overlap, keep the greedy picks of prompts whose margins are wide
// (real_models_test.cpp), resident and streamed, with three stages too.
TEST(Pipeline, MicroBatchedDecodeStepsKeepTheGreedyPicks) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  std::vector<std::vector<int32_t>> prompts, want;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"}) prompts.push_back(tokenizer.encode(p));
  CudaRunnerOptions o;
  o.max_sequences = int(prompts.size()) + 1;
  {
    auto one = make_cuda_runner(*file, kContext, o);
    for (const auto& p : prompts) want.push_back(test::greedy_decode(*one, p, 32));
  }
  for (const std::vector<int>& gpus : {std::vector<int>{0, 0}, std::vector<int>{0, 0, 0}}) {
    auto split = planned_pipeline(*file, gpus, o, {}, 0);
    SCOPED_TRACE(split->description());
    EXPECT_EQ(test::decoded_together(*split, prompts, 32), want);
  }
  const CudaPipelineOptions micro{{0, 0}, {}, o, 0};
  auto streamed = make_cuda_pipeline(*file, kContext, micro, layer_split({0, 0}, {Tiers::value_type(15, R), Tiers::value_type(15, R)}));
  SCOPED_TRACE(streamed->description());
  EXPECT_EQ(test::decoded_together(*streamed, prompts, 32), want);
}

// Through the one model opener, as every command opens it: --gpus 0,0 with
// --split layer, and with auto, which measures, predicts and logs its pick
// (the tensor split cannot put two shards on one GPU, so the layer split).
TEST(Pipeline, OpenModelRunsTheLayerSplit) {
  REQUIRE_STORIES();
  const std::vector<int32_t> golden = test::stories_golden_ids(test::shared_models_dir() / std::filesystem::path("README.md"));
  const std::string path = stories_gguf("nt_stories260k_pipeline_open.gguf");
  for (const std::optional<Split> split : {std::optional<Split>(Split::Layer), std::optional<Split>()}) {
    OpenModelOptions o;
    o.path = path;
    o.device = Device::Cuda;
    o.context = kContext;
    o.gpus = {0, 0};
    o.split = split;
    const OpenedModel m = open_model(o);
    SCOPED_TRACE(m.runner->description());
    EXPECT_NE(m.runner->description().find("layer split over 2 stages"), std::string::npos);
    EXPECT_EQ(m.split_summary.empty(), split.has_value()) << m.split_summary;
    if (!split) {
      EXPECT_NE(m.split_summary.find("--split auto: layer split"), std::string::npos) << m.split_summary;
    }
    EXPECT_EQ(test::greedy_decode(*m.runner, {1}, 64), golden);
  }
  std::filesystem::remove(path);
}

TEST(Pipeline, ErrorsNameTheGpu) {
  TestModel spec;
  const auto file = GgufFile::open(write_model(spec, "nt_pipeline_errors.gguf"));
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string absent = message([&] { cuda_pipeline_request(*file, kContext, {{0, 99}, {}, {}}); });
  EXPECT_NE(absent.find("GPU 99"), std::string::npos) << absent;
  const std::string small = message([&] {
    const CudaPipelineRequest r = cuda_pipeline_request(*file, kContext, {{0, 0}, {64ull << 30, 1ull << 20}, {}});
    place_multi_gpu(r.footprint, r.request, Split::Layer);
  });
  EXPECT_NE(small.find("GPU 0: VRAM budget 1.00 MiB holds no layer"), std::string::npos) << small;
  const std::string gaps = message([&] {
    MultiGpuPlan plan = layer_split({0, 0}, {{V}, {V}});
    plan.gpus[1].first_layer = plan.gpus[1].end_layer = 2;  // layer 1 on no stage
    pipeline(*file, plan, {});
  });
  EXPECT_NE(gaps.find("stage 1 (GPU 0)"), std::string::npos) << gaps;
}

}  // namespace
}  // namespace nt
