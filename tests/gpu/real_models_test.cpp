// End to end on the two small real models, on the GPU:
// - stories260K, converted from llama2.c's own files, must predict llama2.c's
//   greedy output (shared/models/README.md) at every position, through the
//   decode graph one token at a time and through one prefill pass, and
//   reproduce it decoding freely with decode_greedy;
// - SmolLM2's greedy continuations must equal the CPU backend's for 32 tokens
//   (stepped through forward() and through decode_greedy),
//   on prompts whose top-2 margins stay above 1.88 logits along the path
//   (measured against the float64 reference in tests/python/test_e2e_smollm2.py),
//   so activation and KV-cache rounding cannot flip a choice;
// - at the end of SmolLM2's 8192-token context, its confident picks must match
//   the CPU backend's and its logits stay as close to them as near the start.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "model/arch/model_spec.h"
#include "model/llama2c_converter.h"
#include "stories.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

int32_t argmax(const float* logits, int64_t n) { return int32_t(std::max_element(logits, logits + n) - logits); }

TEST(RealModels, Stories260KFollowsLlama2cGreedyPath) {
  const std::filesystem::path dir = test::shared_models_dir();
  if (!std::filesystem::exists(dir / "stories260K.bin")) GTEST_SKIP() << dir / "stories260K.bin" << " not present";
  const std::vector<int32_t> golden = test::stories_golden_ids(dir / "README.md");
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
  // Free-running greedy decoding from BOS, picks fed back on the device.
  std::vector<int32_t> picks;
  runner->decode_greedy(1, 0, int64_t(golden.size()), [&](int32_t t) {
    picks.push_back(t);
    return true;
  });
  EXPECT_EQ(picks, golden);
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
    EXPECT_EQ(test::greedy_decode(*cuda, prompt, 32), want) << "CPU continuation: " << tokenizer.decode(want);
  }
}

// The last 42 positions of SmolLM2's 8192-token context: a sentence repeated
// to 8150 tokens, then 32 decode steps fed the CPU backend's greedy picks.
// The CUDA runner's prefill chunks, its split decode attention over ~8K keys
// and RoPE at high positions must give the CPU backend's pick wherever the
// CPU's top two are a logit apart or more (30 of the 32 steps on an H200).
// The logits themselves differ by up to ~15% of their norm between the two
// backends, which round activations to q8 differently (15.5% after 150 tokens
// of this text, 10.7% after 8150 on an H200), so they are held to the same
// comparison near the start of the context: at its end the worst step may be
// at most twice as far off. A lost split, a wrong cache offset or a bad
// rotation at high positions costs far more.
TEST(RealModels, SmolLM2FullContextMatchesTheCpuBackend) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const int64_t context = read_model_spec(file->header(), path).context_length;
  ASSERT_EQ(context, 8192);
  const std::vector<int32_t> sentence =
      tokenizer.encode("Once upon a time, a small robot learned to paint the sky in the colors of the morning. ");
  CpuRunnerOptions cpu_options;
  cpu_options.context = context;
  auto cpu = make_cpu_runner(file, cpu_options);
  auto cuda = make_cuda_runner(*file, context);
  const int64_t vocab = cpu->config().vocab_size;
  // Prefill `length` tokens of the repeated sentence, then 32 steps.
  struct Outcome {
    double worst = 0.0;  // relative logits error
    int confident = 0;   // steps whose CPU pick leads by a logit or more
  };
  auto compare = [&](int64_t length) {
    std::vector<int32_t> prompt;
    while (int64_t(prompt.size()) < length) prompt.insert(prompt.end(), sentence.begin(), sentence.end());
    prompt.resize(size_t(length));
    std::vector<float> want(static_cast<size_t>(vocab)), got(want.size());
    cpu->forward(prompt, 0, want.data(), false);
    cuda->forward(prompt, 0, got.data(), false);
    Outcome o;
    for (int64_t step = 0; step < 32; ++step) {
      const int64_t pos = length + step;
      o.worst = std::max(o.worst, test::relative_error(got, std::vector<double>(want.begin(), want.end())));
      std::vector<float> top(2);
      std::partial_sort_copy(want.begin(), want.end(), top.begin(), top.end(), std::greater<float>());
      const int32_t pick = argmax(want.data(), vocab);
      if (top[0] - top[1] >= 1.0f) {
        ++o.confident;
        EXPECT_EQ(argmax(got.data(), vocab), pick) << "at position " << pos;
      }
      cpu->forward(std::span(&pick, 1), pos, want.data(), false);
      cuda->forward(std::span(&pick, 1), pos, got.data(), false);
    }
    std::printf("  after %lld tokens: worst relative logits error %.2e; %d of 32 CPU picks a logit or more ahead\n",
                static_cast<long long>(length), o.worst, o.confident);
    return o;
  };
  const Outcome near_start = compare(150);
  const Outcome at_end = compare(context - 42);
  EXPECT_GE(at_end.confident, 16) << "too few confident steps for the pick comparison to mean anything";
  EXPECT_LT(at_end.worst, 2.0 * near_start.worst) << "the logits drift further from the CPU backend's at the end of the context";
}

}  // namespace
}  // namespace nt
