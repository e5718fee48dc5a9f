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

#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/multi_gpu/nccl_rank_channel.h"
#include "backend/cuda/multi_gpu/pipeline_runner.h"
#include "backend/cuda/multi_gpu/tensor_parallel_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "core/error.h"
#include "engine/open_model.h"
#include "engine/tensor_rank.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "run_self.h"
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
  const int64_t vocab = read_model_spec(file->header(), path).vocab_size;
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

// Work that goes through every message of the process-per-GPU protocol:
// prompts side by side, a decode step of them all, a prefix copied into a
// page it then writes (a page copy), a token tree's accepted path kept (row
// moves), a truncation; the logits of every pass, in order.
std::vector<float> protocol_workout(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts) {
  const int64_t vocab = runner.config().vocab_size;
  std::vector<float> logits;
  const auto keep = [&](const BatchOutputs& out) { logits.insert(logits.end(), out.logits.begin(), out.logits.end()); };
  std::vector<SeqId> seqs;
  Batch batch;
  BatchOutputs out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    seqs.push_back(runner.seq_alloc());
    batch.add_run(prompts[i], 0, seqs[i], Output::Logits);
  }
  runner.forward(batch, out);
  keep(out);
  batch.clear();
  for (size_t i = 0; i < prompts.size(); ++i) batch.add(int32_t(7 + i), int64_t(prompts[i].size()), seqs[i], Output::Logits);
  runner.forward(batch, out);
  keep(out);
  const SeqId copy = runner.seq_alloc();
  const int64_t shared = int64_t(prompts[0].size()) - 1;  // inside a page: its write copies the page first
  runner.seq_copy_prefix(seqs[0], copy, shared);
  batch.clear();
  batch.add_run(std::vector<int32_t>{5, 6, 7}, shared, copy, Output::Logits);
  runner.forward(batch, out);
  keep(out);
  // A tree of the root and two children; the second child's path is kept.
  const int64_t root = runner.seq_length(seqs[1]);
  batch.clear();
  batch.add(11, root, seqs[1], Output::Logits);
  batch.add(12, root + 1, seqs[1], Output::Logits);
  batch.add(13, root + 1, seqs[1], Output::Logits, false, 0);
  runner.forward(batch, out);
  keep(out);
  const std::vector<int64_t> kept{root, root + 2};
  runner.seq_keep(seqs[1], root, kept);
  runner.seq_truncate(seqs[0], 4);
  batch.clear();
  batch.add(14, 4, seqs[0], Output::Logits);
  batch.add(15, root + 2, seqs[1], Output::Logits);
  runner.forward(batch, out);
  keep(out);
  for (const SeqId s : seqs) runner.seq_free(s);
  runner.seq_free(copy);
  EXPECT_EQ(logits.size() % size_t(vocab), 0u);
  return logits;
}

// SmolLM2's prompts for protocol_workout: a sentence and a short count.
std::vector<std::vector<int32_t>> workout_prompts(const GgufFile& file) {
  const Tokenizer tokenizer = Tokenizer::from_gguf(file.header(), file.path());
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"The robot painted the morning sky in soft colors, and the town woke", "1, 2, 3, 4, 5,"}) {
    prompts.push_back(tokenizer.encode(p));
  }
  return prompts;
}

// The plan of a tensor split over `gpus` with each rank's layers [first, end) streamed from pinned RAM.
MultiGpuPlan streaming_tensor_plan(const GgufFile& file, int64_t context, const CudaPipelineOptions& stages,
                                   const std::vector<std::pair<int, int>>& streamed) {
  const CudaPipelineRequest r = cuda_pipeline_request(file, context, stages);
  MultiGpuPlan plan = place_multi_gpu(r.footprint, r.request, Split::Tensor);
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    for (int l = streamed[g].first; l < streamed[g].second; ++l) plan.gpus[g].plan.layer_tier[size_t(l)] = Tier::Ram;
  }
  return plan;
}

// Rank 0 here and rank 1 on a thread of its own, both on GPU 0, over the
// process-per-GPU protocol (messages through memory, sums through the GPU):
// every pass's logits are bit for bit those of the same split run by one
// process (the same kernels and the same sums in the same order).
TEST(TensorSplit, FollowerRankComputesAsOneProcessOnOneGpu) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const std::vector<std::vector<int32_t>> prompts = workout_prompts(*file);
  CudaRunnerOptions o;
  o.max_sequences = 4;
  const CudaPipelineOptions stages{{0, 0}, {}, o};
  // Rank 1 streams some of its cuts: the setup hands it its tiers.
  const MultiGpuPlan plan = streaming_tensor_plan(*file, kContext, stages, {{0, 0}, {10, 16}});
  std::vector<float> want;
  {
    auto one_process = make_cuda_tensor_parallel(*file, kContext, stages, plan);
    want = protocol_workout(*one_process, prompts);
  }
  std::vector<RankLink> links = local_rank_links(2);
  std::exception_ptr follower_error;
  std::thread follower([&] {
    try {
      follow_tensor_rank(*file, 0, std::move(links[1]), o);
    } catch (...) {
      follower_error = std::current_exception();
    }
  });
  std::vector<float> got;
  try {
    auto leader = make_cuda_tensor_leader(*file, kContext, stages, plan, std::move(links[0]));
    SCOPED_TRACE(leader->description());
    EXPECT_NE(leader->description().find("follow on threads of their own"), std::string::npos) << leader->description();
    got = protocol_workout(*leader, prompts);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  follower.join();  // the leader's end stopped it
  if (follower_error) {
    try {
      std::rethrow_exception(follower_error);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 1: " << e.what();
    }
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "logits differ from the one-process split's";
}

// The process-per-GPU path with one rank, on one GPU: its messages go out
// as NCCL broadcasts (to no one), its sums are NCCL all-reduces, and so its
// decode steps replay CUDA graphs that capture them (alone and batched).
// Every pass agrees with the same split summed through the GPU's memory,
// which runs no graphs: the logits bit for bit, the greedy picks exactly.
TEST(TensorSplit, OneNcclRankReplaysGraphsThatCaptureItsSums) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const NcclLibrary* nccl = nullptr;
  try {
    nccl = &NcclLibrary::get();
  } catch (const Error& e) {
    GTEST_SKIP() << "NCCL is absent: " << e.what();
  }
  const auto file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,"}) prompts.push_back(tokenizer.encode(p));
  // A prompt whose decode crosses kShortDecodeMaxKeys: both graphs of a lone step.
  std::string counting;
  for (int i = 1; i < 1000; ++i) counting += std::to_string(i) + ", ";
  std::vector<int32_t> long_prompt = tokenizer.encode(counting);
  ASSERT_GT(long_prompt.size(), 1010u);
  long_prompt.resize(1010);
  prompts.push_back(long_prompt);
  const int64_t context = 1280;
  CudaRunnerOptions o;
  o.max_sequences = int(prompts.size()) + 2;  // and the default sequence, and protocol_workout's copy
  const CudaPipelineOptions stages{{0}, {}, o};
  const CudaPipelineRequest r = cuda_pipeline_request(*file, context, stages);
  const MultiGpuPlan plan = place_multi_gpu(r.footprint, r.request, Split::Tensor);
  // Lone sequences other than the default one, their steps plain and
  // stepwise: each step's graph must be its own sequence's.
  const auto lone_on_others = [&](ModelRunner& runner) {
    std::vector<std::vector<int32_t>> picks;
    Batch batch;
    BatchOutputs out;
    for (const bool stepwise : {false, true}) {
      for (const auto& p : prompts) {
        const SeqId seq = runner.seq_alloc();
        batch.clear();
        batch.add_run(p, 0, seq, Output::Argmax);
        runner.forward(batch, out);
        picks.push_back({out.argmax[0]});
        for (int step = 1; step < 12; ++step) {
          batch.clear();
          batch.add(picks.back().back(), int64_t(p.size()) + step - 1, seq, Output::Argmax, stepwise);
          runner.forward(batch, out);
          picks.back().push_back(out.argmax[0]);
        }
        runner.seq_free(seq);
      }
    }
    return picks;
  };
  std::vector<float> want_logits;
  std::vector<std::vector<int32_t>> want_alone, want_together, want_others;
  {
    auto no_graphs = make_cuda_tensor_parallel(*file, context, stages, plan);
    EXPECT_NE(no_graphs->description().find("no graph"), std::string::npos) << no_graphs->description();
    want_logits = protocol_workout(*no_graphs, prompts);
    for (const auto& p : prompts) want_alone.push_back(test::greedy_decode(*no_graphs, p, 40));
    want_together = test::decoded_together(*no_graphs, prompts, 40);
    want_others = lone_on_others(*no_graphs);
  }
  RankLink link;
  link.comm = std::move(NcclComm::join_local_gpus(*nccl, {0})[0]);
  link.channel = std::make_unique<NcclRankChannel>(*link.comm);
  link.reducer = nccl_reducer(*link.comm);
  auto graphs = make_cuda_tensor_leader(*file, context, stages, plan, std::move(link));
  SCOPED_TRACE(graphs->description());
  EXPECT_NE(graphs->description().find("decode graph"), std::string::npos);
  EXPECT_TRUE(protocol_workout(*graphs, prompts) == want_logits) << "logits differ";
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(test::greedy_decode(*graphs, prompts[i], 40), want_alone[i]);
  EXPECT_EQ(test::decoded_together(*graphs, prompts, 40), want_together);
  EXPECT_EQ(lone_on_others(*graphs), want_others) << "a lone sequence's steps replayed another sequence's graph";
}

// A follower whose file is not rank 0's says so, and rank 0 fails too.
TEST(TensorSplit, AFollowerWithAnotherModelIsRefused) {
  const std::string smol = test::smollm2_path(), stories = test::stories260k_gguf();
  if (!std::filesystem::exists(smol) || stories.empty()) GTEST_SKIP() << "SmolLM2 or stories260K not present";
  const auto leader_file = GgufFile::open(stories), follower_file = GgufFile::open(smol);
  const CudaPipelineOptions stages{{0, 0}, {}, {}};
  const CudaPipelineRequest r = cuda_pipeline_request(*leader_file, kContext, stages);
  const MultiGpuPlan plan = place_multi_gpu(r.footprint, r.request, Split::Tensor);
  std::vector<RankLink> links = local_rank_links(2);
  std::string follower_error;
  std::thread follower([&] {
    try {
      follow_tensor_rank(*follower_file, 0, std::move(links[1]), {});
    } catch (const Error& e) {
      follower_error = e.what();
    }
  });
  std::string leader_error;
  try {
    make_cuda_tensor_leader(*leader_file, kContext, stages, plan, std::move(links[0]));
  } catch (const Error& e) {
    leader_error = e.what();
  }
  follower.join();
  EXPECT_NE(follower_error.find("is not the model rank 0 runs"), std::string::npos) << follower_error;
  EXPECT_NE(follower_error.find(smol), std::string::npos) << follower_error;
  EXPECT_NE(leader_error.find("1 of the tensor split's 2 ranks could not load"), std::string::npos) << leader_error;
}

// Rank 1 of TwoProcessesDecodeAsOneRunnerOnTwoGpus (the parent sets the environment).
TEST(TensorRankWorker, FollowsRankZero) {
  const char* id_file = std::getenv("NT_TP_TEST_ID_FILE");
  if (!id_file) GTEST_SKIP() << "runs as a child of TensorSplit.TwoProcessesDecodeAsOneRunnerOnTwoGpus";
  TensorRankOptions o;
  o.path = test::smollm2_path();
  o.gpus = {0, 1};
  o.rank = 1;
  o.nccl_id_file = id_file;
  o.join_timeout_s = 120;
  serve_tensor_rank(o);
}

// `ntransformer rank` as a second process: the split decodes as the single
// runner does, alone and batched (as SmolLM2DecodesAsOneRunnerOnTwoGpus).
TEST(TensorSplit, TwoProcessesDecodeAsOneRunnerOnTwoGpus) {
  if (test::gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << test::gpu_count() << " visible";
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const std::string id_file =
      (std::filesystem::temp_directory_path() / ("nt_tp_id." + std::to_string(getpid()))).string();
  std::filesystem::remove(id_file);
  int follower_status = 0;
  std::thread follower([&] { follower_status = test::run_self("TensorRankWorker.FollowsRankZero", {"NT_TP_TEST_ID_FILE=" + id_file}, 300); });
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  std::vector<std::vector<int32_t>> prompts, want;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"}) prompts.push_back(tokenizer.encode(p));
  CudaRunnerOptions one_options;
  one_options.max_sequences = int(prompts.size()) + 1;
  {
    auto one = make_cuda_runner(*file, kContext, one_options);
    for (const auto& p : prompts) want.push_back(test::greedy_decode(*one, p, 32));
  }
  try {
    OpenModelOptions o;
    o.path = path;
    o.device = Device::Cuda;
    o.context = kContext;
    o.sequences = int(prompts.size()) + 1;
    o.gpus = {0, 1};
    o.split = Split::Tensor;
    o.nccl_id_file = id_file;
    o.join_timeout_s = 120;
    const OpenedModel m = open_model(o);
    SCOPED_TRACE(m.runner->description());
    EXPECT_NE(m.runner->description().find("in processes of their own"), std::string::npos);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(test::greedy_decode(*m.runner, prompts[i], 32), want[i]);
    EXPECT_EQ(test::decoded_together(*m.runner, prompts, 32), want);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  follower.join();
  EXPECT_EQ(follower_status, 0) << "rank 1 (-1: timed out)";
  EXPECT_FALSE(std::filesystem::exists(id_file)) << "rank 0 leaves no id behind";
}

// Ranks whose cuts of some layers stream from pinned RAM (rank 0 streams
// layers 3-11, rank 1 layers 5-21, so both ring and resident layers meet
// in one pass) compute every pass bit for bit as with every cut resident.
TEST(TensorSplit, StreamedShardsComputeAsResidentOnes) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  const std::vector<std::vector<int32_t>> prompts = workout_prompts(*file);
  CudaRunnerOptions o;
  o.max_sequences = 4;
  const CudaPipelineOptions stages{{0, 0}, {}, o};
  std::vector<float> want;
  {
    auto resident = make_cuda_tensor_parallel(*file, kContext, stages, streaming_tensor_plan(*file, kContext, stages, {{0, 0}, {0, 0}}));
    want = protocol_workout(*resident, prompts);
  }
  auto streamed = make_cuda_tensor_parallel(*file, kContext, stages, streaming_tensor_plan(*file, kContext, stages, {{3, 12}, {5, 22}}));
  SCOPED_TRACE(streamed->description());
  EXPECT_NE(streamed->description().find("21 vram + 9 ram"), std::string::npos);
  EXPECT_NE(streamed->description().find("13 vram + 17 ram"), std::string::npos);
  EXPECT_TRUE(protocol_workout(*streamed, prompts) == want) << "logits differ from the resident cuts'";
}

// A plan that reads a shard from storage is refused, naming the GPU.
TEST(TensorSplit, AStoragePlanNamesTheGpu) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K not present";
  const auto file = GgufFile::open(path);
  const CudaPipelineOptions o{{0, 0}, {}, {}};
  const CudaPipelineRequest r = cuda_pipeline_request(*file, kContext, o);
  MultiGpuPlan plan = place_multi_gpu(r.footprint, r.request, Split::Tensor);
  plan.gpus[1].plan.layer_tier.back() = Tier::Disk;
  try {
    make_cuda_tensor_parallel(*file, kContext, o, plan);
    ADD_FAILURE() << "a shard read from storage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("storage"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nt
