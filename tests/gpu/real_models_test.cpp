// End to end on the two small real models, on the GPU:
// - stories260K, converted from llama2.c's own files, must predict llama2.c's
//   greedy output (shared/models/README.md) at every position, through the
//   decode graph one token at a time and through one prefill pass;
// - SmolLM2's greedy continuations must equal the CPU backend's for 32 tokens,
//   on prompts whose top-2 margins stay above 1.88 logits along the path
//   (measured against the float64 reference in tests/python/test_e2e_smollm2.py),
//   so activation and KV-cache rounding cannot flip a choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/cpu/cpu_llama.h"
#include "backend/cuda/cuda_runner.h"
#include "gpu_test_util.h"
#include "model/llama2c_converter.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

// llama2.c's first 64 greedy ids after BOS, read from the README beside the model.
std::vector<int32_t> stories_golden_ids(const std::filesystem::path& readme) {
  std::ifstream in(readme);
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string s = text.str();
  if (!std::regex_search(s, m, std::regex("The first 64 generated token ids:\n```\n([0-9 \n]+?)\n```"))) return {};
  std::vector<int32_t> ids;
  std::istringstream numbers(m[1].str());
  for (int32_t id; numbers >> id;) ids.push_back(id);
  return ids;
}

int32_t argmax(const float* logits, int64_t n) { return int32_t(std::max_element(logits, logits + n) - logits); }

TEST(RealModels, Stories260KFollowsLlama2cGreedyPath) {
  const std::filesystem::path dir = test::shared_models_dir();
  if (!std::filesystem::exists(dir / "stories260K.bin")) GTEST_SKIP() << dir / "stories260K.bin" << " not present";
  const std::vector<int32_t> golden = stories_golden_ids(dir / "README.md");
  ASSERT_EQ(golden.size(), 64u) << dir / "README.md" << ": golden ids not found (format changed?)";
  const std::string path = (std::filesystem::path(testing::TempDir()) / "nt_stories260k_gpu.gguf").string();
  convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), path);
  const auto file = GgufFile::open(path);
  auto runner = make_cuda_runner(*file, 128);
  const int64_t vocab = runner->config().vocab_size;
  std::vector<int32_t> tokens = {1};  // BOS, as llama2.c starts
  tokens.insert(tokens.end(), golden.begin(), golden.end() - 1);

  // Decode: one token at a time (the captured graph), teacher-forced along the golden path.
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (size_t i = 0; i < tokens.size(); ++i) {
    runner->forward(std::span(tokens).subspan(i, 1), int64_t(i), logits.data(), false);
    EXPECT_EQ(argmax(logits.data(), vocab), golden[i]) << "decode step " << i;
  }
  // Prefill: the same 64 tokens in one pass, every position's logits.
  std::vector<float> all(tokens.size() * size_t(vocab));
  runner->forward(tokens, 0, all.data(), true);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(argmax(all.data() + i * size_t(vocab), vocab), golden[i]) << "prefill position " << i;
  }
  std::filesystem::remove(path);
}

std::vector<int32_t> greedy(ModelRunner& runner, const std::vector<int32_t>& prompt, int n) {
  const int64_t vocab = runner.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  runner.forward(prompt, 0, logits.data(), false);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits.data(), vocab));
    if (i + 1 < n) runner.forward(std::span(out).subspan(size_t(i), 1), int64_t(prompt.size()) + i, logits.data(), false);
  }
  return out;
}

TEST(RealModels, SmolLM2GreedyContinuationsMatchTheCpuBackend) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  CpuRunnerOptions cpu_options;
  cpu_options.context = 64;
  auto cpu = make_cpu_runner(file, cpu_options);
  auto cuda = make_cuda_runner(*file, 64);
  for (const char* text : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"}) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> prompt = tokenizer.encode(text);
    const std::vector<int32_t> want = greedy(*cpu, prompt, 32);
    EXPECT_EQ(greedy(*cuda, prompt, 32), want) << "CPU continuation: " << tokenizer.decode(want);
  }
}

}  // namespace
}  // namespace nt
