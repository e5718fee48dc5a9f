// Partial layer schedules on the GPU (layer skip, self-drafts): the CUDA
// runner must run exactly the scheduled layers, resident and streamed (the
// streamer then transfers only those), and decode what the CPU backend
// decodes with the same schedule on stories260K (float weights: both
// backends follow llama2.c's greedy path with every layer).
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "engine/layer_skip.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "model/llama2c_converter.h"
#include "streaming_budgets.h"

namespace nt {
namespace {

TEST(LayerSchedule, SkippedLayersDecodeAsOnTheCpu) {
  const std::filesystem::path dir = test::shared_models_dir();
  if (!std::filesystem::exists(dir / "stories260K.bin")) GTEST_SKIP() << dir / "stories260K.bin" << " not present";
  const std::string path = (std::filesystem::path(testing::TempDir()) / "nt_stories260k_schedule.gguf").string();
  convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), path);
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  CpuRunnerOptions cpu_options;
  cpu_options.context = 128;
  auto cpu = make_cpu_runner(file, cpu_options);
  const std::vector<int32_t> full = test::greedy_decode(*cpu, prompt, 48);
  for (const std::vector<int32_t>& skipped : {std::vector<int32_t>{1}, std::vector<int32_t>{0, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(skipped));
    const LayerSchedule schedule = schedule_without(skipped, cpu->config().n_layers);
    cpu->set_default_schedule(schedule);
    const std::vector<int32_t> want = test::greedy_decode(*cpu, prompt, 48);
    EXPECT_NE(want, full) << "skipping these layers changes nothing: the comparison cannot fail";
    auto resident = make_cuda_runner(*file, 128);
    resident->set_default_schedule(schedule);
    EXPECT_EQ(test::greedy_decode(*resident, prompt, 48), want) << "resident";
    auto streamed = make_cuda_runner(*file, 128, test::budgets_for(*file, 128, 1, 1, {}));
    streamed->set_default_schedule(schedule);
    EXPECT_EQ(test::greedy_decode(*streamed, prompt, 48), want) << streamed->description();
  }
  // Back to every layer, streamed: the read-ahead follows the full order again.
  auto streamed = make_cuda_runner(*file, 128, test::budgets_for(*file, 128, 1, 1, {}));
  streamed->set_default_schedule(schedule_without(std::vector<int32_t>{2}, cpu->config().n_layers));
  test::greedy_decode(*streamed, prompt, 8);
  streamed->set_default_schedule(LayerSchedule::all());
  EXPECT_EQ(test::greedy_decode(*streamed, prompt, 48), full);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nt
