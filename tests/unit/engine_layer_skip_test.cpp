// Layer skip: choosing the skipped layers from a skip list, its file, the
// runner's default schedule (every pass, the single-sequence methods'
// included, runs it), the per-layer observer that calibration reads, and the
// self-draft that skips layers (exactly greedy, since every layer verifies).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/layer_skip.h"
#include "engine/prompts.h"
#include "engine/self_draft.h"
#include "engine/skip_calibration.h"
#include "engine/speculative.h"
#include "engine_test_models.h"

namespace nt {
namespace {

// Four layers whose similarities rank them 1, 2, 0, 3.
SkipList four_layers() {
  LayerSimilarity measured;
  measured.similarity = {0.9, 0.99, 0.95, 0.5};
  measured.tokens = 100;
  measured.windows = 1;
  return make_skip_list({"m.gguf", 4, "00000000000000ff"}, measured, "text.txt", 64);
}

TEST(LayerSkipList, RanksByHighestSimilarityThenLowestLayer) {
  EXPECT_EQ(four_layers().ranked, (std::vector<int32_t>{1, 2, 0, 3}));
  EXPECT_EQ(rank_by_similarity(std::vector<double>{0.5, 0.7, 0.5, 0.7}), (std::vector<int32_t>{1, 3, 0, 2}));
}

TEST(LayerSkipList, ACountSkipsTheTopRankedLayersInLayerOrder) {
  const SkipList list = four_layers();
  EXPECT_EQ(skipped_by_count(list, 0), (std::vector<int32_t>{}));
  EXPECT_EQ(skipped_by_count(list, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(skipped_by_count(list, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_THROW(skipped_by_count(list, 4), Error);  // one layer stays
  EXPECT_THROW(skipped_by_count(list, -1), Error);
}

TEST(LayerSkipList, AThresholdSkipsTheLayersAtLeastThatSimilar) {
  const SkipList list = four_layers();
  EXPECT_EQ(skipped_by_threshold(list, 0.95), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(skipped_by_threshold(list, 0.96), (std::vector<int32_t>{1}));
  EXPECT_EQ(skipped_by_threshold(list, 1.0), (std::vector<int32_t>{}));
  EXPECT_THROW(skipped_by_threshold(list, 0.5), Error);  // every layer
}

TEST(LayerSkipList, TheScheduleRunsTheOtherLayersInOrder) {
  EXPECT_EQ(schedule_without(std::vector<int32_t>{1, 2}, 4).layers, (std::vector<int32_t>{0, 3}));
  EXPECT_TRUE(schedule_without(std::vector<int32_t>{}, 4).runs_all());
}

TEST(LayerSkipList, TheFileReadsBackAndNamesItsModel) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "nt_layer_skip_test.json").string();
  const SkipList list = four_layers();
  write_skip_list(list, path);
  const SkipList back = read_skip_list(path);
  EXPECT_EQ(back.similarity, list.similarity);
  EXPECT_EQ(back.ranked, list.ranked);
  EXPECT_EQ(back.model.tensor_digest, list.model.tensor_digest);
  EXPECT_EQ(back.tokens, 100);
  EXPECT_NO_THROW(check_skip_list_model(back, list.model, path));
  EXPECT_THROW(check_skip_list_model(back, {"m.gguf", 5, list.model.tensor_digest}, path), Error);
  EXPECT_THROW(check_skip_list_model(back, {"m.gguf", 4, "00000000000000fe"}, path), Error);
  std::ofstream(path) << "[1, 2]";
  EXPECT_THROW(read_skip_list(path), Error);
  std::filesystem::remove(path);
}

std::unique_ptr<ModelRunner> cpu_runner(const std::shared_ptr<const GgufFile>& file, int64_t context = 64) {
  CpuRunnerOptions options;
  options.context = context;
  options.kv_f32 = true;
  return make_cpu_runner(file, options);
}

std::shared_ptr<const GgufFile> stories() {
  const std::string path = test::stories260k_gguf();
  return path.empty() ? nullptr : std::shared_ptr<const GgufFile>(GgufFile::open(path));
}

TEST(LayerSkipRunner, EveryPassRunsTheDefaultSchedule) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const LayerSchedule skip = schedule_without(std::vector<int32_t>{1, 3}, 5);
  const int64_t vocab = cpu_runner(file)->config().vocab_size;

  auto explicit_runner = cpu_runner(file);
  Batch batch;
  batch.add_run(tokens, 0, 0, Output::Logits);
  BatchOutputs want;
  explicit_runner->forward(batch, want, skip);

  auto runner = cpu_runner(file);
  runner->set_default_schedule(skip);
  std::vector<float> logits(static_cast<size_t>(vocab));
  runner->forward(tokens, 0, logits.data(), false);  // the single-sequence path
  EXPECT_EQ(logits, std::vector<float>(want.logits.begin(), want.logits.end()));
  EXPECT_EQ(runner->forward_greedy(tokens, 0), argmax_first(want.logits));

  std::vector<float> full(static_cast<size_t>(vocab));
  cpu_runner(file)->forward(tokens, 0, full.data(), false);
  EXPECT_NE(logits, full) << "the schedule changed nothing";
  EXPECT_THROW(runner->set_default_schedule(LayerSchedule{{0, 7}}), Error);
}

// Records what a pass hands over, layer by layer.
struct Recorder final : LayerObserver {
  std::vector<int32_t> layers;
  std::vector<std::vector<float>> inputs, outputs;
  void observe(int32_t layer, std::span<const float> input, std::span<const float> output) override {
    layers.push_back(layer);
    inputs.emplace_back(input.begin(), input.end());
    outputs.emplace_back(output.begin(), output.end());
  }
};

TEST(LayerSkipRunner, TheObserverSeesEachScheduledLayerInTurn) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  auto runner = cpu_runner(file);
  const int64_t dim = runner->config().dim;
  Batch batch;
  batch.add_run(std::vector<int32_t>{1, 403, 407}, 0, 0, Output::Logits);
  BatchOutputs out;
  Recorder recorder;
  runner->forward_observed(batch, out, LayerSchedule{{0, 2, 4}}, recorder);
  ASSERT_EQ(recorder.layers, (std::vector<int32_t>{0, 2, 4}));
  for (size_t i = 0; i < recorder.layers.size(); ++i) {
    ASSERT_EQ(recorder.inputs[i].size(), size_t(3 * dim));
    EXPECT_NE(recorder.inputs[i], recorder.outputs[i]);
    // A layer's input is what the layer before it in the schedule left.
    if (i > 0) {
      EXPECT_EQ(recorder.inputs[i], recorder.outputs[i - 1]);
    }
  }
  // The observer is for that pass alone.
  runner->forward(batch, out);
  EXPECT_EQ(recorder.layers.size(), 3u);
}

TEST(LayerSkipRunner, CalibrationMeasuresEveryLayerOverEveryToken) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  auto runner = cpu_runner(file, 8);
  std::vector<int32_t> tokens(19);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(300 + i);
  int64_t reported = 0;
  const LayerSimilarity all = measure_layer_similarity(*runner, tokens, 8, 1, 0, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 3);
    reported = done;
  });
  EXPECT_EQ(reported, 3);
  EXPECT_EQ(all.tokens, 19);  // 8 + 8 + the last 3
  ASSERT_EQ(all.similarity.size(), 5u);
  for (const double s : all.similarity) EXPECT_TRUE(s > -1 && s < 1) << s;
  const LayerSimilarity first = measure_layer_similarity(*runner, tokens, 8, 1, 1, [](int64_t, int64_t) {});
  EXPECT_EQ(first.tokens, 8);
  EXPECT_NE(first.similarity, all.similarity);
  EXPECT_THROW(measure_layer_similarity(*runner, {}, 8, 1, 0, [](int64_t, int64_t) {}), Error);
  EXPECT_THROW(measure_layer_similarity(*runner, tokens, 9, 1, 0, [](int64_t, int64_t) {}), Error);
}

TEST(LayerSkipDraft, ASelfDraftWithoutSomeLayersIsExactlyGreedy) {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 is absent";
  std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const std::vector<int32_t> prompt = encode_completion(tokenizer, "The capital of France is").tokens;
  GenerationOptions options;
  options.max_tokens = 24;
  CpuRunnerOptions runner_options;
  runner_options.context = 128;

  auto plain = make_cpu_runner(file, runner_options);
  Generator generator(*plain, tokenizer);
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy, plain->config().vocab_size);
  generator.generate(prompt, sampler, options, [](std::string_view) {});

  auto runner = make_cpu_runner(file, runner_options);
  // Layers from the middle and the end, as a calibration picks them.
  SelfDraft draft(*runner, 0, schedule_without(std::vector<int32_t>{3, 11, 17, 20, 26}, runner->config().n_layers));
  SpeculativeGenerator speculative(*runner, tokenizer, draft, 4);
  Sampler greedy_again(greedy, runner->config().vocab_size);
  const SpeculativeStats stats = speculative.generate(prompt, greedy_again, options, [](std::string_view) {});
  EXPECT_EQ(speculative.generated(), generator.generated());
  EXPECT_GT(stats.speculation.accepted, 0) << "a draft that skips 5 of 30 layers never agreed";
  EXPECT_THROW(SelfDraft(*runner, 0, LayerSchedule::all()), Error);
}

}  // namespace
}  // namespace nt
