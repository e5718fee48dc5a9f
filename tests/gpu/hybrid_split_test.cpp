// The CPU as a fourth tier: layers of the RAM tier that the host computes
// from their pinned copy (HostLayers) while the rest stream. A hybrid run
// must decode what the resident run decodes: exactly on stories260K (float
// weights), and on SmolLM2 (q8 activations on both sides, rounded
// differently) with logits no further from the resident run's than the CPU
// backend's are, and the same 32 greedy tokens on prompts whose margins stay
// wide (real_models_test.cpp). Passes of more tokens than cpu_passes.all_up_to
// stream the host layers instead, or all but a share of them
// (cpu_passes.wider), so the caches of those layers move between host and
// GPU: prompts continued after CPU decode steps check both ways.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "gpu_test_util.h"
#include "greedy_decode.h"
#include "model/llama2c_converter.h"
#include "streaming_budgets.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

struct Split {
  int64_t vram, ram, cpu_layers, cpu_max_tokens;
  int ring_slots = 2;
  bool run_ahead = false;  // CudaRunnerOptions::stream_run_ahead
  std::vector<CpuPassShare> wider = {};  // CudaRunnerOptions::cpu_passes.wider
  std::string name() const {
    std::string shares;
    for (const CpuPassShare& w : wider) shares += fmt::format(", {} up to {} tokens", w.layers, w.max_tokens);
    return fmt::format("{} vram + {} ram, {} on the CPU in passes of up to {} tokens{}, {} ring slots{}", vram, ram,
                       cpu_layers, cpu_max_tokens, shares, ring_slots, run_ahead ? ", copies run ahead" : "");
  }
};

CudaRunnerOptions hybrid_options(const GgufFile& file, int64_t context, const Split& s) {
  CudaRunnerOptions ring;
  ring.ring_slots = s.ring_slots;
  CudaRunnerOptions o = test::budgets_for(file, context, s.vram, s.ram, ring);
  o.cpu_layers = s.cpu_layers;
  o.cpu_passes = {.all_up_to = s.cpu_max_tokens, .wider = s.wider};
  o.cpu_threads = 4;
  o.stream_run_ahead = s.run_ahead;
  return o;
}

// A prompt, 12 greedy steps, a second prompt chunk after them (a pass that
// reads what the decode steps cached), then 12 more steps.
std::vector<int32_t> continued(ModelRunner& runner, const std::vector<int32_t>& first, const std::vector<int32_t>& second) {
  std::vector<int32_t> out = test::greedy_decode(runner, first, 12);
  int64_t pos = int64_t(first.size() + out.size()) - 1;  // the last pick is not cached yet
  std::vector<int32_t> chunk = {out.back()};
  chunk.insert(chunk.end(), second.begin(), second.end());
  const int32_t pick = runner.forward_greedy(chunk, pos);
  pos += int64_t(chunk.size());
  out.push_back(pick);
  runner.decode_greedy(pick, pos, 11, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

TEST(HybridSplit, Stories260KDecodesAsResident) {
  const std::filesystem::path dir = test::shared_models_dir();
  if (!std::filesystem::exists(dir / "stories260K.bin")) GTEST_SKIP() << dir / "stories260K.bin" << " not present";
  const std::string path = (std::filesystem::path(testing::TempDir()) / "nt_stories260k_hybrid.gguf").string();
  convert_llama2c((dir / "stories260K.bin").string(), (dir / "tok512.bin").string(), path);
  const auto file = GgufFile::open(path);
  const std::vector<int32_t> first = {1, 403, 407, 261, 378}, second = {1, 403, 407};
  auto resident = make_cuda_runner(*file, 128);
  const std::vector<int32_t> want_free = test::greedy_decode(*resident, {1}, 64);
  const std::vector<int32_t> want = continued(*resident, first, second);
  resident.reset();
  // With copies running ahead, the decode steps keep them and the prompt
  // chunks that stream the CPU's layers too (more tokens than cpu_passes.all_up_to) spend them.
  // With wider passes' shares, the 5-token prompt computes one of the three
  // CPU layers on the host and the 4-token chunk two, so each layer's rows
  // are written on one side or the other from pass to pass.
  for (const Split& s : {Split{1, 4, 1, 1}, Split{1, 4, 2, 64}, Split{0, 5, 2, 4}, Split{1, 4, 2, 1, 2, true},
                         Split{0, 5, 1, 1, 3, true}, Split{0, 5, 3, 1, 3, false, {{4, 2}, {8, 1}}},
                         Split{1, 4, 3, 1, 3, true, {{4, 1}}}}) {
    SCOPED_TRACE(s.name());
    auto hybrid = make_cuda_runner(*file, 128, hybrid_options(*file, 128, s));
    EXPECT_NE(hybrid->description().find(fmt::format("{} computed on the CPU", s.cpu_layers)), std::string::npos)
        << hybrid->description();
    EXPECT_EQ(test::greedy_decode(*hybrid, {1}, 64), want_free);
    EXPECT_EQ(continued(*hybrid, first, second), want);
  }
  std::filesystem::remove(path);
}

TEST(HybridSplit, SmolLM2StaysWithTheResidentRun) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  constexpr int64_t kContext = 128;
  const int64_t vocab = read_model_spec(file->header(), path).vocab_size;
  const std::vector<int32_t> text = tokenizer.encode("The robot painted the morning sky in soft colors, and the town woke");
  std::vector<float> resident_logits(static_cast<size_t>(vocab)), cpu_logits(resident_logits), got(resident_logits);
  auto resident = make_cuda_runner(*file, kContext);
  resident->forward(text, 0, resident_logits.data(), false);
  CpuRunnerOptions cpu_options;
  cpu_options.context = kContext;
  make_cpu_runner(file, cpu_options)->forward(text, 0, cpu_logits.data(), false);
  const std::vector<double> reference(resident_logits.begin(), resident_logits.end());
  const double cpu_error = test::relative_error(cpu_logits, reference);
  std::vector<std::vector<int32_t>> prompts, want;
  for (const char* p : {"1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"}) {
    prompts.push_back(tokenizer.encode(p));
    want.push_back(test::greedy_decode(*resident, prompts.back(), 32));
  }
  resident.reset();
  for (const Split& s : {Split{10, 20, 5, 1}, Split{20, 10, 5, 64}, Split{4, 26, 13, 8, 3}, Split{20, 10, 4, 64, 3},
                         Split{4, 26, 13, 1, 3, false, {{4, 6}, {64, 2}}}}) {
    SCOPED_TRACE(s.name());
    CudaRunnerOptions o = hybrid_options(*file, kContext, s);
    o.max_sequences = int(prompts.size()) + 1;  // and the default sequence
    auto hybrid = make_cuda_runner(*file, kContext, o);
    // The prompt as one pass: through the CPU layers when they take passes that long, else streamed.
    hybrid->forward(text, 0, got.data(), false);
    const double error = test::relative_error(got, reference);
    std::printf("  %s: logits %.3f from the resident run's (the CPU backend's: %.3f)\n", s.name().c_str(), error, cpu_error);
    EXPECT_LT(error, 1.25 * cpu_error + 1e-3);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(test::greedy_decode(*hybrid, prompts[i], 32), want[i]) << tokenizer.decode(want[i]);
    }
    EXPECT_EQ(test::decoded_together(*hybrid, prompts, 32), want) << "every prompt on its own sequence, one batch a step";
  }
}

}  // namespace
}  // namespace nt
