// Speculative decoding on the GPU. A verification run (BatchEntry::stepwise)
// must give every entry the logits a one-token decode step gives it, bit for
// bit, in one pass: alone, beside other sequences' rows, across the
// short-context attention's key limit. Then greedy speculation with every
// draft source (lookup, the model's own first layers, a draft model) must
// decode exactly what plain greedy decoding does, on stories260K and SmolLM2,
// resident and streamed. Both kinds of test check that they can fail: the
// same runs without the stepwise flag round differently. Last, a draft
// model's VRAM comes out of the target's budget, so the target streams.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/lookup_draft.h"
#include "engine/model_draft.h"
#include "engine/prompts.h"
#include "engine/self_draft.h"
#include "engine/speculative.h"
#include "gpu_test_util.h"
#include "stories.h"
#include "streaming_budgets.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

struct Model {
  std::string name, path;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t vram_layers = 0, ram_layers = 0;  // the streamed placement
};

Model open_model(std::string name, std::string path, int64_t vram_layers, int64_t ram_layers) {
  Model m{std::move(name), std::move(path), nullptr, nullptr, vram_layers, ram_layers};
  m.file = GgufFile::open(m.path);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.file->header(), m.path));
  return m;
}

enum class Placement { Resident, Streamed };

std::string placement_name(Placement p) { return p == Placement::Resident ? "resident" : "streamed"; }

std::unique_ptr<ModelRunner> runner_for(const Model& m, Placement placement, int64_t context, int sequences = 1) {
  CudaRunnerOptions o;
  o.max_sequences = sequences;
  if (placement == Placement::Streamed) o = test::budgets_for(*m.file, context, m.vram_layers, m.ram_layers, o);
  return make_cuda_runner(*m.file, context, o);
}

// The encoded text, then its ids again and again up to `count`: prompts of any length.
std::vector<int32_t> ids_of_length(const Tokenizer& tokenizer, const std::string& text, size_t count) {
  const std::vector<int32_t> cycle = tokenizer.encode(text, false);
  std::vector<int32_t> ids = tokenizer.encode(text, true);
  for (size_t i = 0; ids.size() < count; ++i) ids.push_back(cycle[i % cycle.size()]);
  ids.resize(count);
  return ids;
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog Max. "
    "One day, Lily and Max went to the park. They saw a big tree with red apples. Lily wanted an apple, but the tree "
    "was too tall. Max barked and ran around the tree. ";

// The prompt on sequence `seq` from position 0, through the batch path
// every sequence's prompt takes.
void prefill(ModelRunner& runner, const std::vector<int32_t>& prompt, SeqId seq) {
  Batch batch;
  BatchOutputs out;
  batch.add_run(prompt, 0, seq, Output::Argmax);
  runner.forward(batch, out);
}

// The logits of `run` at positions prompt.size()... of a fresh sequence: one
// pass of the run with the stepwise flag given, or (steps) one single-token
// pass per entry on the default sequence, the path plain greedy decoding takes.
std::vector<float> run_logits(ModelRunner& runner, const std::vector<int32_t>& prompt, const std::vector<int32_t>& run,
                              bool steps, bool stepwise) {
  const SeqId seq = steps ? 0 : runner.seq_alloc();
  prefill(runner, prompt, seq);
  const int64_t vocab = runner.config().vocab_size;
  std::vector<float> logits(run.size() * size_t(vocab));
  if (steps) {
    for (size_t i = 0; i < run.size(); ++i) {
      runner.forward({&run[i], 1}, int64_t(prompt.size() + i), logits.data() + i * size_t(vocab), false);
    }
    return logits;
  }
  Batch batch;
  BatchOutputs out;
  for (size_t i = 0; i < run.size(); ++i) batch.add(run[i], int64_t(prompt.size() + i), seq, Output::Logits, stepwise);
  runner.forward(batch, out);
  logits = out.logits;
  runner.seq_free(seq);
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_stepwise_logits(const Model& m, Placement placement, int64_t context, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& run) {
  SCOPED_TRACE(m.name + " " + placement_name(placement) + ", run of " + std::to_string(run.size()) + " at position " +
               std::to_string(prompt.size()));
  auto runner = runner_for(m, placement, context, 3);
  const std::vector<float> steps = run_logits(*runner, prompt, run, true, false);
  EXPECT_TRUE(same_bits(run_logits(*runner, prompt, run, false, true), steps))
      << "a stepwise run's logits are not those of one-token steps";
  EXPECT_FALSE(same_bits(run_logits(*runner, prompt, run, false, false), steps))
      << "a chunked run rounds as one-token steps do here: this comparison would not notice stepwise being ignored";
}

TEST(StepwiseRuns, GiveTheLogitsOfOneTokenSteps) {
  if (!test::stories260k_gguf().empty()) {
    const Model s = open_model("stories260K", test::stories260k_gguf(), 1, 1);
    // Past 64 keys a one-token step splits its keys where a chunk does not.
    const std::vector<int32_t> prompt = ids_of_length(*s.tokenizer, kStory, 90);
    const std::vector<int32_t> run = ids_of_length(*s.tokenizer, kStory, 100);
    for (const Placement p : {Placement::Resident, Placement::Streamed}) {
      expect_stepwise_logits(s, p, 256, prompt, {run.begin() + 90, run.end()});
    }
  }
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model("SmolLM2", path, 10, 10);
  const std::vector<int32_t> story = ids_of_length(*m.tokenizer, kStory, 1040);
  for (const Placement p : {Placement::Resident, Placement::Streamed}) {
    // Short runs and one longer than a mat-vec launch's 8 columns.
    expect_stepwise_logits(m, p, 256, {story.begin(), story.begin() + 40}, {story.begin() + 40, story.begin() + 49});
    expect_stepwise_logits(m, p, 256, {story.begin(), story.begin() + 7}, {story.begin() + 7, story.begin() + 27});
    expect_stepwise_logits(m, p, 256, {story.begin(), story.begin() + 5}, {story.begin() + 5, story.begin() + 7});
  }
  // Across kShortDecodeMaxKeys: the first rows attend through the
  // short-context kernel, the rest through the split one, as steps do.
  const int64_t before = kShortDecodeMaxKeys - 4;
  expect_stepwise_logits(m, Placement::Resident, 2048, {story.begin(), story.begin() + before},
                         {story.begin() + before, story.begin() + before + 9});
}

// A stepwise run beside other sequences' rows in one pass (continuous
// batching verifies drafts beside prompt chunks and plain steps) keeps the
// numbers of one-token steps; an entry of it may want no output.
TEST(StepwiseRuns, KeepTheirNumbersBesideOtherSequences) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model("SmolLM2", path, 10, 10);
  const std::vector<int32_t> story = ids_of_length(*m.tokenizer, kStory, 80);
  const std::vector<int32_t> prompt(story.begin(), story.begin() + 30), run(story.begin() + 30, story.begin() + 39);
  for (const Placement p : {Placement::Resident, Placement::Streamed}) {
    SCOPED_TRACE(placement_name(p));
    auto runner = runner_for(m, p, 256, 4);
    const int64_t vocab = runner->config().vocab_size;
    const std::vector<float> steps = run_logits(*runner, prompt, run, true, false);
    const SeqId verified = runner->seq_alloc(), prefilled = runner->seq_alloc(), stepped = runner->seq_alloc();
    for (const SeqId s : {verified, stepped}) prefill(*runner, prompt, s);
    // A prompt chunk, the stepwise run (its third entry feeding the cache
    // only) and a one-token step, in one pass.
    Batch batch;
    BatchOutputs out;
    batch.add_run({story.begin() + 50, story.end()}, 0, prefilled, Output::Logits);
    const size_t first = batch.size();
    for (size_t i = 0; i < run.size(); ++i) {
      batch.add(run[i], int64_t(prompt.size() + i), verified, i == 2 ? Output::None : Output::Logits, true);
    }
    batch.add(run[0], int64_t(prompt.size()), stepped, Output::Logits);
    runner->forward(batch, out);
    for (size_t i = 0; i < run.size(); ++i) {
      if (i == 2) continue;
      const std::span<const float> got = out.logits_of(first + i, vocab);
      EXPECT_EQ(std::memcmp(got.data(), steps.data() + i * size_t(vocab), size_t(vocab) * sizeof(float)), 0) << "entry " << i;
    }
  }
}

// --- Greedy speculation against plain greedy decoding ---

// A draft source for a target runner (a draft model's runner lives in `keep`).
struct Source {
  std::string name;
  std::function<std::unique_ptr<DraftSource>(ModelRunner& target, std::vector<std::unique_ptr<ModelRunner>>& keep)> make;
};

std::vector<Source> sources(const std::string& draft_model_path, int64_t context) {
  return {
      {"lookup", [](ModelRunner&, auto&) { return std::make_unique<LookupDraft>(); }},
      {"self", [](ModelRunner& target, auto&) {
         return std::make_unique<SelfDraft>(target, 0, default_self_draft_layers(target.config().n_layers));
       }},
      {"draft model", [draft_model_path, context](ModelRunner&, auto& keep) {
         keep.push_back(make_cuda_runner(*GgufFile::open(draft_model_path), context));
         return std::make_unique<ModelDraft>(*keep.back(), 0, greedy_sampling());
       }},
  };
}

std::vector<int32_t> plain_greedy(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                                  const GenerationOptions& options) {
  Generator generator(runner, tokenizer);
  Sampler sampler(greedy_sampling(), runner.config().vocab_size);
  generator.generate(prompt, sampler, options, [](std::string_view) {});
  return generator.generated();
}

// Greedy speculation with verification runs that are not stepwise: what the
// engine would decode if the flag were ignored (the prompt's pick, then each
// pass keeps the draft's agreeing prefix and the target's next pick).
std::vector<int32_t> chunked_speculation(ModelRunner& runner, DraftSource& draft, const std::vector<int32_t>& prompt,
                                         size_t count, int64_t draft_max) {
  Batch batch;
  BatchOutputs out;
  batch.add_run(prompt, 0, 0, Output::Argmax);
  runner.forward(batch, out);
  std::vector<int32_t> context = prompt, generated = {out.argmax[0]}, proposal;
  while (generated.size() < count) {
    const int64_t pos = int64_t(context.size());
    context.push_back(generated.back());
    proposal.clear();
    draft.propose(context, std::min<int64_t>(draft_max, int64_t(count - generated.size()) - 1), proposal);
    batch.clear();
    batch.add(context.back(), pos, 0, Output::Argmax);
    for (size_t i = 0; i < proposal.size(); ++i) batch.add(proposal[i], pos + 1 + int64_t(i), 0, Output::Argmax);
    runner.forward(batch, out);
    for (size_t i = 0; i <= proposal.size() && generated.size() < count; ++i) {
      generated.push_back(out.argmax[i]);
      if (i == proposal.size() || proposal[i] != out.argmax[i]) break;
      context.push_back(proposal[i]);
    }
    runner.seq_truncate(0, int64_t(context.size()));
  }
  return generated;
}

// Every source on every prompt, resident and streamed: speculation decodes
// plain greedy's tokens and verifies real drafts; returns how many runs the
// chunked form would have decoded otherwise.
int expect_every_source_is_plain_greedy(const Model& m, const std::vector<std::vector<int32_t>>& prompts, size_t count,
                                        int64_t context, const std::string& draft_model_path) {
  GenerationOptions options;
  options.max_tokens = int64_t(count);
  int parted = 0;
  for (const Placement placement : {Placement::Resident, Placement::Streamed}) {
    auto runner = runner_for(m, placement, context);
    for (const Source& source : sources(draft_model_path, context)) {
      int64_t drafted = 0, accepted = 0;
      for (size_t p = 0; p < prompts.size(); ++p) {
        const std::string what = m.name + " " + placement_name(placement) + ", " + source.name + ", prompt " + std::to_string(p);
        SCOPED_TRACE(what);
        const std::vector<int32_t> want = plain_greedy(*runner, *m.tokenizer, prompts[p], options);
        EXPECT_EQ(want.size(), count) << "plain greedy stopped early";
        if (want.size() != count) continue;
        {
          std::vector<std::unique_ptr<ModelRunner>> keep;
          const std::unique_ptr<DraftSource> draft = source.make(*runner, keep);
          SpeculativeGenerator generator(*runner, *m.tokenizer, *draft, 8);
          Sampler sampler(greedy_sampling(), runner->config().vocab_size);
          const SpeculativeStats stats = generator.generate(prompts[p], sampler, options, [](std::string_view) {});
          EXPECT_EQ(generator.generated(), want);
          drafted += stats.speculation.drafted;
          accepted += stats.speculation.accepted;
        }
        std::vector<std::unique_ptr<ModelRunner>> keep;
        const std::unique_ptr<DraftSource> draft = source.make(*runner, keep);
        const std::vector<int32_t> chunked = chunked_speculation(*runner, *draft, prompts[p], count, 8);
        if (chunked != want) {
          size_t at = 0;
          while (chunked[at] == want[at]) ++at;
          std::printf("  %s: verification without the stepwise flag parts from plain greedy at token %zu\n", what.c_str(), at);
          ++parted;
        }
      }
      // Multi-token verification runs were judged, and many kept.
      EXPECT_GT(accepted, 0) << m.name << " " << placement_name(placement) << ", " << source.name << ": nothing accepted of "
                             << drafted << " drafted";
    }
  }
  return parted;
}

TEST(SpeculativeGreedy, EveryDraftSourceIsPlainGreedyOnStories260K) {
  if (test::stories260k_gguf().empty()) GTEST_SKIP() << test::shared_models_dir() << " has no stories260K.bin";
  const Model s = open_model("stories260K", test::stories260k_gguf(), 1, 1);
  const std::vector<std::vector<int32_t>> prompts = {
      {1}, s.tokenizer->encode("Once upon a time", true), s.tokenizer->encode("Lily and Tom went to the park. Lily and Tom", true)};
  // The target itself as its draft model: it drafts long agreeing runs.
  const int parted = expect_every_source_is_plain_greedy(s, prompts, 200, 256, test::stories260k_gguf());
  std::printf("stories260K: %d of %zu runs part from plain greedy without the stepwise flag\n", parted, 2 * 3 * prompts.size());
}

TEST(SpeculativeGreedy, EveryDraftSourceIsPlainGreedyOnSmolLM2) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model("SmolLM2", path, 10, 10);
  const Tokenizer& t = *m.tokenizer;
  const ChatTemplate chat = ChatTemplate::for_tokenizer(t, "");
  const auto ask = [&](const std::string& user) {
    const std::vector<ChatMessage> messages = {{"user", user}};
    return encode_conversation(t, chat, messages).tokens;
  };
  // The CPU's prompt kinds: on the CPU, chat and code part from plain greedy
  // after about 30 tokens when verification takes the prompt GEMM (docs/PERFORMANCE.md).
  const std::vector<std::vector<int32_t>> prompts = {
      ask("Give me three tips for staying healthy."),
      encode_completion(t, "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n").tokens,
      ask(std::string("Repeat this text word for word:\n\n") + kStory)};
  const int parted = expect_every_source_is_plain_greedy(m, prompts, 128, 512, path);
  // The chunked kernels round differently (no folded norms, other splits,
  // the prefill attention); over these runs that must show in the tokens.
  EXPECT_GT(parted, 0) << "no run parts from plain greedy without the stepwise flag: these prompts cannot tell";
}

// A streamed runner's resident layers are its VRAM tier (the default self
// draft, which then drafts without a transfer); a resident one's are all.
TEST(SelfDraftDefault, AStreamedRunnerDraftsWithItsResidentLayers) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model("SmolLM2", path, 10, 20);
  constexpr int64_t kContext = 256;
  auto resident = runner_for(m, Placement::Resident, kContext);
  const int64_t n_layers = resident->config().n_layers;
  EXPECT_EQ(int64_t(resident->resident_layers().size()), n_layers);
  auto streamed = runner_for(m, Placement::Streamed, kContext);
  const std::vector<int32_t> layers = streamed->resident_layers();
  ASSERT_EQ(int64_t(layers.size()), m.vram_layers) << streamed->description();
  EXPECT_NE(streamed->description().find(fmt::format("layers {} vram", m.vram_layers)), std::string::npos)
      << streamed->description();
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_TRUE(layers[i] >= 0 && layers[i] < n_layers && (i == 0 || layers[i] > layers[i - 1])) << i;
  }
  // Drafting with them keeps greedy output plain greedy's.
  const std::vector<int32_t> prompt = ids_of_length(*m.tokenizer, kStory, 40);
  GenerationOptions options;
  options.max_tokens = 48;
  const std::vector<int32_t> want = plain_greedy(*resident, *m.tokenizer, prompt, options);
  SelfDraft source(*streamed, 0, LayerSchedule{layers}, greedy_sampling());
  SpeculativeGenerator generator(*streamed, *m.tokenizer, source, 4);
  Sampler sampler(greedy_sampling(), streamed->config().vocab_size);
  generator.generate(prompt, sampler, options, [](std::string_view) {});
  EXPECT_EQ(generator.generated(), want);
}

// --- The draft model's share of VRAM ---

// A budget that holds the whole target alone but not beside its draft: the
// target streams layers instead, the pair stays within the budget, and
// speculation through the streamed target is still plain greedy.
TEST(DraftModelVram, TheTargetStreamsLayersToLeaveItsDraftRoom) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const Model m = open_model("SmolLM2", path, 10, 10);
  constexpr int64_t kContext = 256;
  CudaRunnerOptions o;
  o.vram_budget = uint64_t(1) << 50;
  o.ram_budget = uint64_t(1) << 40;
  const CudaPlacement everything = plan_cuda_placement(*m.file, kContext, o);
  o.draft_model = path;
  const uint64_t draft = plan_cuda_placement(*m.file, kContext, o).draft.total();
  ASSERT_GT(draft, 0u);
  const int64_t n_layers = int64_t(everything.footprint.layers.size());
  // Room for the draft and half the target's layers: the other half streams.
  uint64_t layer_bytes = 0;
  for (const LayerFootprint& l : everything.footprint.layers) layer_bytes += l.resident_bytes;
  o.vram_budget = everything.plan.vram_total() + draft - layer_bytes / 2;
  const CudaPlacement beside = plan_cuda_placement(*m.file, kContext, o);
  EXPECT_EQ(beside.request.vram_budget, *o.vram_budget - draft);
  EXPECT_LT(beside.plan.count(Tier::Vram), n_layers) << "the draft's share streamed nothing";
  EXPECT_LE(beside.plan.vram_total() + draft, *o.vram_budget);
  o.draft_model.clear();
  EXPECT_EQ(plan_cuda_placement(*m.file, kContext, o).plan.count(Tier::Vram), n_layers) << "the budget alone holds every layer";

  o.draft_model = path;
  auto target = make_cuda_runner(*m.file, kContext, o);
  EXPECT_NE(target->description().find(fmt::format("layers {} vram", beside.plan.count(Tier::Vram))), std::string::npos)
      << target->description();
  auto draft_runner = make_cuda_runner(*m.file, kContext);
  const std::vector<int32_t> prompt = ids_of_length(*m.tokenizer, kStory, 40);
  GenerationOptions options;
  options.max_tokens = 64;
  auto plain = runner_for(m, Placement::Resident, kContext);
  const std::vector<int32_t> want = plain_greedy(*plain, *m.tokenizer, prompt, options);
  ModelDraft source(*draft_runner, 0, greedy_sampling());
  SpeculativeGenerator generator(*target, *m.tokenizer, source, 8);
  Sampler sampler(greedy_sampling(), target->config().vocab_size);
  generator.generate(prompt, sampler, options, [](std::string_view) {});
  EXPECT_EQ(generator.generated(), want);
}

TEST(DraftModelVram, ADraftLargerThanTheBudgetIsRefusedByName) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto file = GgufFile::open(path);
  CudaRunnerOptions o;
  o.vram_budget = uint64_t(1) << 50;
  o.draft_model = path;
  const DraftVram draft = plan_cuda_placement(*file, 256, o).draft;
  o.vram_budget = draft.total() - 1;
  try {
    make_cuda_runner(*file, 256, o);
    ADD_FAILURE() << "a draft larger than the budget was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--draft-model " + path), std::string::npos) << message;
    EXPECT_NE(message.find(format_size(draft.total())), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace nt
