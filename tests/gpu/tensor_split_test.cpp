// The tensor split's runner (tensor_parallel_runner.h): every rank runs every
// layer on its shard of heads and FFN columns, and the ranks' partial sums
// are added after attn_output and ffn_down. On one GPU holding every rank
// (the test mode) the sums go through its memory; on two GPUs through NCCL.
// The partial sums add in another order than one runner's single products,
// so the numbers are compared as other GPU paths are: stories260K must
// follow llama2.c's greedy path, SmolLM2's logits must stay as close to the
// single runner's as the CPU backend's are, and its greedy continuations on
// wide-margin prompts (real_models_test.cpp) must be the single runner's,
// alone and decoded together.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_llama.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/pipeline_runner.h"
#include "backend/cuda/tensor_parallel_runner.h"
#include "core/error.h"
#include "engine/open_model.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "stories.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

constexpr int64_t kContext = 128;

// The planner's tensor split over `gpus` (a GPU listed for every rank shares its free VRAM among them).
std::unique_ptr<ModelRunner> tensor_split(const GgufFile& file, const std::vector<int>& gpus, const CudaRunnerOptions& options) {
  const CudaPipelineOptions o{gpus, {}, options};
  const CudaPipelineRequest r = cuda_pipeline_request(file, kContext, o);
  return make_cuda_tensor_parallel(file, kContext, o, place_multi_gpu(r.footprint, r.request, Split::Tensor));
}

void expect_stories_greedy_path(const std::vector<int>& gpus) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const std::vector<int32_t> golden = test::stories_golden_ids(test::shared_models_dir() / std::filesystem::path("README.md"));
  ASSERT_FALSE(golden.empty());
  const auto file = GgufFile::open(path);
  auto runner = tensor_split(*file, gpus, {});
  SCOPED_TRACE(runner->description());
  EXPECT_NE(runner->description().find("tensor split over 2 ranks"), std::string::npos);
  test::expect_llama2c_greedy_path(*runner, golden);
}

TEST(TensorSplit, Stories260KFollowsLlama2cGreedyPathOnOneGpu) { expect_stories_greedy_path({0, 0}); }

TEST(TensorSplit, Stories260KFollowsLlama2cGreedyPathOnTwoGpus) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << test::gpu_count() << " visible";
  expect_stories_greedy_path({0, 1});
}

void expect_smollm2_as_one_runner(const std::vector<int>& gpus) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const int64_t vocab = read_llama_config(file->header(), path).vocab_size;
  const std::vector<int32_t> text = tokenizer.encode("The robot painted the morning sky in soft colors, and the town woke");
  std::vector<float> one_logits(static_cast<size_t>(vocab)), cpu_logits(one_logits), got(one_logits);
  std::vector<std::vector<int32_t>> prompts, want;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"}) prompts.push_back(tokenizer.encode(p));
  CudaRunnerOptions o;
  o.max_sequences = int(prompts.size()) + 1;  // and the default sequence
  {
    auto one = make_cuda_runner(*file, kContext, o);
    one->forward(text, 0, one_logits.data(), false);
    for (const auto& p : prompts) want.push_back(test::greedy_decode(*one, p, 32));
  }
  CpuRunnerOptions cpu_options;
  cpu_options.context = kContext;
  make_cpu_runner(file, cpu_options)->forward(text, 0, cpu_logits.data(), false);
  const std::vector<double> reference(one_logits.begin(), one_logits.end());
  const double cpu_error = test::relative_error(cpu_logits, reference);

  auto split = tensor_split(*file, gpus, o);
  SCOPED_TRACE(split->description());
  split->forward(text, 0, got.data(), false);
  const double error = test::relative_error(got, reference);
  std::printf("  %s\n  logits %.4f from one runner's (the CPU backend's: %.4f)\n", split->description().c_str(), error, cpu_error);
  EXPECT_LT(error, 1.25 * cpu_error + 1e-3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(test::greedy_decode(*split, prompts[i], 32), want[i]) << tokenizer.decode(want[i]);
  }
  EXPECT_EQ(test::decoded_together(*split, prompts, 32), want) << "every prompt on its own sequence, one batch a step";
}

TEST(TensorSplit, SmolLM2DecodesAsOneRunnerOnOneGpu) { expect_smollm2_as_one_runner({0, 0}); }

TEST(TensorSplit, SmolLM2DecodesAsOneRunnerOnTwoGpus) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << test::gpu_count() << " visible";
  expect_smollm2_as_one_runner({0, 1});
}

// Through the one model opener, as `--gpus 0,0 --split tensor` opens it.
TEST(TensorSplit, OpenModelRunsItWhenAskedFor) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  OpenModelOptions o;
  o.path = path;
  o.device = Device::Cuda;
  o.context = kContext;
  o.gpus = {0, 0};
  o.split = Split::Tensor;
  const OpenedModel m = open_model(o);
  EXPECT_NE(m.runner->description().find("tensor split over 2 ranks (sums through one GPU)"), std::string::npos)
      << m.runner->description();
}

// A plan that streams a shard is refused, naming the GPU.
TEST(TensorSplit, AStreamingPlanNamesTheGpu) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const auto file = GgufFile::open(path);
  const CudaPipelineOptions o{{0, 0}, {}, {}};
  const CudaPipelineRequest r = cuda_pipeline_request(*file, kContext, o);
  MultiGpuPlan plan = place_multi_gpu(r.footprint, r.request, Split::Tensor);
  plan.gpus[1].plan.layer_tier.back() = Tier::Ram;
  try {
    make_cuda_tensor_parallel(*file, kContext, o, plan);
    ADD_FAILURE() << "a streamed shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nt
