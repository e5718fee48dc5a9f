// Continuous batching against the single-sequence Generator as the
// reference: each request's tokens, text and stop reason must be what the
// Generator produces for it alone. First over a fake runner whose next-token
// logits hash the sequence's cached tokens (so a mixed-up position, sequence
// or page shows), then on the real models: stories260K exactly (and its
// BOS-only sequence must reproduce llama2.c's golden ids), and SmolLM2 for
// all of 8 prompts over 64 tokens. With speculation, the references are the
// same (greedy) or the SpeculativeGenerator alone with the same draft
// (sampling: its tests show it keeps the target's distribution).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"
#include "engine/batch_scheduler.h"
#include "engine/draft_tree.h"
#include "engine/generator.h"
#include "engine/lookup_draft.h"
#include "engine/self_draft.h"
#include "engine/step_drafter.h"
#include "engine_test_models.h"
#include "tokenizer/synthetic_vocab.h"

namespace nt {
namespace {

constexpr int32_t kVocab = 600;
constexpr int64_t kPage = 16;

// Logits that depend on every token the entry attends to (the sequence's
// cache before its run, then its path in the run: a token tree's ancestors),
// read back through its pages.
class FakeRunner final : public ModelRunner {
 public:
  // A pool of pool_positions, for any number of sequences, or (`sequences` > 0)
  // for that many, each with its whole context, as the CUDA runner's pool.
  FakeRunner(int64_t context, int64_t pool_positions, int sequences = 0) {
    config_.vocab_size = kVocab;
    config_.context_length = context;
    config_.n_layers = 1;
    const int64_t pages_per_sequence = (context + kPage - 1) / kPage;
    init_pages(sequences > 0 ? KvPages(sequences * pages_per_sequence, kPage, context, sequences)
                             : KvPages((pool_positions + kPage - 1) / kPage, kPage, context));
    cache_.assign(size_t(kv_pages().page_count() * kv_pages().page_size()), -1);
  }

  const ModelSpec& config() const override { return config_; }
  std::string description() const override { return "fake"; }
  uint64_t weight_bytes_per_token() const override { return 0; }
  uint64_t kv_bytes_per_position() const override { return 0; }

  void forward_pages(const Batch& batch, std::span<const SequenceRun> runs, std::span<const int32_t>,
                     BatchOutputs& out) override {
    batches.push_back(batch);
    live_max = std::max(live_max, int64_t(runs.size()));
    for (const SequenceRun& run : runs) {
      for (int64_t i = 0; i < run.count; ++i) {
        cache_[size_t(kv_pages().slot(run.seq, run.pos + i))] = batch.entries[size_t(run.first + i)].token;
      }
    }
    std::vector<float> row(kVocab);
    std::vector<int32_t> path;
    for (const SequenceRun& run : runs) {
      for (int64_t i = run.first; i < run.first + run.count; ++i) {
        tree_path(batch, run, i, path);
        if (batch.entries[size_t(i)].output != Output::None) logits_of(batch, run, path, i, row, out);
      }
    }
  }

  void copy_rows(std::span<const RowCopy> copies) override {
    for (const RowCopy& c : copies) cache_[size_t(c.to)] = cache_[size_t(c.from)];
  }

  void copy_pages(std::span<const PageCopy> copies) override {
    const int64_t n = kv_pages().page_size();
    for (const PageCopy& c : copies) {
      std::copy_n(cache_.begin() + c.from * n, n, cache_.begin() + c.to * n);
    }
  }

  int64_t pass_chunk_entries() const override { return chunk_entries; }
  // Token trees verify exactly while they end by this position.
  bool verifies_trees_exactly(int64_t pos, int64_t tokens) const override { return pos + tokens <= exact_trees_until; }

  std::vector<Batch> batches;
  int64_t live_max = 0;  // most sequences in one pass
  int64_t exact_trees_until = std::numeric_limits<int64_t>::max();
  int64_t chunk_entries = std::numeric_limits<int64_t>::max();

 private:
  // Entry i's output, from the cache before its run and its path through the run.
  void logits_of(const Batch& batch, const SequenceRun& run, std::span<const int32_t> path, int64_t i,
                 std::vector<float>& row, BatchOutputs& out) const {
    const BatchEntry& e = batch.entries[size_t(i)];
    uint64_t h = 1469598103934665603ull;
    const auto mix = [&](int32_t token) { h = (h ^ uint64_t(token + 1)) * 1099511628211ull; };
    for (int64_t p = 0; p < run.pos; ++p) mix(cache_[size_t(kv_pages().slot(run.seq, p))]);
    for (const int32_t index : path) mix(batch.entries[size_t(run.first + index)].token);
    // A clear favourite among 200 ordinary tokens, and a spread for sampling to choose from.
    for (int32_t t = 0; t < kVocab; ++t) row[size_t(t)] = float((h >> (t % 40)) % 7) * 0.3f;
    row[size_t(300 + h % 200)] += 3.0f;
    const size_t slot = size_t(out.index[size_t(i)]);
    switch (e.output) {
      case Output::Logits: std::copy(row.begin(), row.end(), out.logits.begin() + ptrdiff_t(slot * kVocab)); break;
      case Output::Argmax: out.argmax[slot] = argmax_first(row); break;
      case Output::Top: {
        Candidates top;
        top.assign(row, batch.top_k);
        out.top[slot].assign(top.view().begin(), top.view().end());
        break;
      }
      case Output::None: break;
    }
  }

  ModelSpec config_;
  std::vector<int32_t> cache_;  // the token at each physical position
};

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams top_k_sampling(uint64_t seed, int32_t top_k = 40) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = top_k;
  p.seed = seed;
  return p;
}

GenerationRequest request(std::vector<int32_t> prompt, SamplingParams sampling, int64_t max_tokens,
                          std::vector<std::string> stop_strings = {}, std::vector<int32_t> stop_tokens = {}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling = sampling;
  r.options.max_tokens = max_tokens;
  r.options.stop_strings = std::move(stop_strings);
  r.options.stop_tokens = std::move(stop_tokens);
  return r;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t(20 + (i * 37 + salt * 101) % 500));
  return p;
}

// What the Generator makes of the request alone, on a fresh runner.
template <typename MakeRunner>
GenerationResult alone(MakeRunner make_runner, const Tokenizer& tokenizer, const GenerationRequest& r) {
  auto runner = make_runner();
  Generator g(*runner, tokenizer);
  Sampler sampler(r.sampling, runner->config().vocab_size);
  GenerationResult out;
  const auto stats = g.generate(r.prompt, sampler, r.options, [&](std::string_view piece) { out.text += piece; });
  out.tokens = g.generated();
  out.prompt_tokens = stats.prompt_tokens;
  out.completion_tokens = stats.generated_tokens;
  out.stop = stats.stop;
  return out;
}

void expect_same(const GenerationResult& got, const GenerationResult& want, size_t i) {
  EXPECT_EQ(got.error, "") << "request " << i;
  EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
  EXPECT_EQ(got.text, want.text) << "request " << i;
  EXPECT_EQ(got.stop, want.stop) << "request " << i << ": " << stop_reason_name(got.stop) << " vs "
                                 << stop_reason_name(want.stop);
  EXPECT_EQ(got.prompt_tokens, want.prompt_tokens) << "request " << i;
  EXPECT_EQ(got.completion_tokens, want.completion_tokens) << "request " << i;
}

// The requests through a scheduler with `options`, or of `parallel` slots
// with prompts in chunks of up to `budget`.
struct Scheduled {
  std::vector<GenerationResult> results;
  SchedulerProgress progress;
};

Scheduled schedule(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& requests,
                   const SchedulerOptions& options) {
  BatchScheduler scheduler(runner, tokenizer, options);
  for (const auto& r : requests) scheduler.submit(r);
  scheduler.run();
  Scheduled out;
  for (size_t i = 0; i < requests.size(); ++i) out.results.push_back(scheduler.result(i));
  out.progress = scheduler.progress();
  return out;
}

Scheduled schedule(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<GenerationRequest>& requests,
                   int parallel, int64_t budget) {
  SchedulerOptions options;
  options.parallel = parallel;
  options.prompt_budget = budget;
  return schedule(runner, tokenizer, requests, options);
}

class BatchSchedulerTest : public ::testing::Test {
 protected:
  Tokenizer tokenizer{make_synthetic_bpe_vocab(kVocab, SyntheticVocabStyle::SmolLM2)};
};

TEST_F(BatchSchedulerTest, EachRequestGetsWhatItWouldAlone) {
  const int64_t context = 96;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  SamplingParams penalised = top_k_sampling(7);
  penalised.repeat_penalty = 1.3f;
  SamplingParams whole_row = top_k_sampling(8, 0);
  std::vector<GenerationRequest> requests = {
      request(prompt_of(1, 1), greedy(), 20),
      request(prompt_of(40, 2), top_k_sampling(3), 25),
      request(prompt_of(75, 3), greedy(), 30),  // 75 + 30 > 96: the context fills
      request(prompt_of(9, 4), penalised, 18),
      request(prompt_of(2, 5), whole_row, 22),
      request(prompt_of(20, 6), top_k_sampling(4), 16),
      request(prompt_of(33, 7), greedy(), 24),
  };
  // Stop strings and a stop token taken from the requests' own text alone.
  const GenerationResult free6 = alone(make_runner, tokenizer, requests[6]);
  ASSERT_GE(free6.text.size(), 8u);
  requests[6].options.stop_strings = {free6.text.substr(free6.text.size() / 2, 2)};
  requests[0].options.stop_tokens = {alone(make_runner, tokenizer, requests[0]).tokens.at(11)};

  FakeRunner runner(context, 3 * context);
  const int parallel = 3;
  const int64_t budget = 32;
  const Scheduled got = schedule(runner, tokenizer, requests, parallel, budget);

  for (size_t i = 0; i < requests.size(); ++i) expect_same(got.results[i], alone(make_runner, tokenizer, requests[i]), i);
  EXPECT_EQ(got.results[0].stop, StopReason::StopToken);
  EXPECT_EQ(got.results[2].stop, StopReason::ContextFull);
  EXPECT_EQ(got.results[6].stop, StopReason::StopString);

  // Continuous batching: three sequences served seven requests; a pass holds
  // at most one decode step per sequence and 32 prompt tokens, and prompt
  // chunks ran beside other sequences' steps.
  std::set<SeqId> seqs;
  bool mixed = false;
  for (const Batch& b : runner.batches) {
    const auto runs = sequence_runs(b);
    for (const SequenceRun& run : runs) seqs.insert(run.seq);
    EXPECT_LE(int64_t(b.size()), parallel + budget);
    mixed |= runs.size() > 1 && std::any_of(runs.begin(), runs.end(), [](const SequenceRun& r) { return r.count > 1; });
  }
  EXPECT_EQ(seqs.size(), 3u);
  EXPECT_LE(runner.live_max, 3);
  EXPECT_TRUE(mixed) << "no pass ran a prompt chunk beside another sequence";
}

TEST_F(BatchSchedulerTest, CutsLongPromptsIntoChunksOfAtLeastTheMinimum) {
  FakeRunner runner(160, 3 * 160);
  SchedulerOptions options;
  options.parallel = 3;
  options.prompt_budget = 40;
  BatchScheduler scheduler(runner, tokenizer, options);
  const std::vector<int64_t> lengths = {70, 45, 3};
  for (size_t i = 0; i < lengths.size(); ++i) scheduler.submit(request(prompt_of(lengths[i], int32_t(i)), greedy(), 4));
  scheduler.run();
  std::map<SeqId, std::vector<int64_t>> chunks;  // each sequence's prompt runs, in order
  for (const Batch& b : runner.batches) {
    int64_t prompt_tokens = 0;
    for (const SequenceRun& run : sequence_runs(b)) {
      if (run.pos >= lengths[size_t(run.seq)]) continue;  // a decode step
      chunks[run.seq].push_back(run.count);
      prompt_tokens += run.count;
    }
    EXPECT_LE(prompt_tokens, options.prompt_budget);
  }
  for (size_t s = 0; s < lengths.size(); ++s) {
    const auto& c = chunks[SeqId(s)];
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t(0)), lengths[s]) << s;
    if (c.size() > 1) {
      for (const int64_t n : c) EXPECT_GE(n, kMinPromptChunk) << "sequence " << s;
    }
  }
  EXPECT_GT(chunks[0].size(), 1u);  // the long prompts were cut
  EXPECT_GT(chunks[1].size(), 1u);
}

// A prompt that begins as an earlier running request's: `shared` tokens of
// `base`, then its own.
std::vector<int32_t> with_prefix(const std::vector<int32_t>& base, size_t shared, int64_t own, int32_t salt) {
  std::vector<int32_t> p(base.begin(), base.begin() + ptrdiff_t(shared));
  for (const int32_t t : prompt_of(own, salt)) p.push_back(t);
  return p;
}

TEST_F(BatchSchedulerTest, PromptsThatBeginAlikeShareTheCachedPrefix) {
  const int64_t context = 160;
  const std::vector<int32_t> system = prompt_of(50, 9);
  const std::vector<GenerationRequest> requests = {
      request(with_prefix(system, 50, 10, 1), greedy(), 12),
      request(with_prefix(system, 50, 20, 2), top_k_sampling(3), 12),  // waits for request 0's prefill, then shares 50
      request(with_prefix(system, 50, 0, 0), greedy(), 12),            // the system prompt alone: its last 16 tokens evaluated
      request(with_prefix(system, 30, 25, 3), greedy(), 12),           // shares 30 with whichever runs
      request(with_prefix(system, 10, 30, 4), greedy(), 12),           // 10 < kMinPromptChunk: evaluates all
  };
  for (const int sequences : {0, 3}) {
    SCOPED_TRACE(sequences ? "a pool for 3 sequences" : "a pool for any number");
    FakeRunner runner(context, 3 * context, sequences);
    const Scheduled got = schedule(runner, tokenizer, requests, 3, 32);
    const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
    for (size_t i = 0; i < requests.size(); ++i) expect_same(got.results[i], alone(make_runner, tokenizer, requests[i]), i);
    const std::vector<int64_t> shared = {0, 50, 34, 30, 0};
    int64_t total = 0, evaluated = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got.results[i].shared_prompt_tokens, shared[i]) << i;
      total += int64_t(requests[i].prompt.size());
      evaluated += int64_t(requests[i].prompt.size()) - shared[i];
    }
    EXPECT_EQ(got.progress.shared_prompt_tokens, total - evaluated);
    EXPECT_EQ(got.progress.prompt_tokens, evaluated);
    // Request 1 waited: its first prompt run starts at the shared 50, after request 0 cached them.
    bool second_started = false;
    for (const Batch& b : runner.batches) {
      for (const SequenceRun& run : sequence_runs(b)) {
        if (run.seq == 1 && !second_started) {
          EXPECT_EQ(run.pos, 50);
          second_started = true;
        }
      }
    }
    EXPECT_TRUE(second_started);
  }
}

// Batch-invariant mode: every decode step runs stepwise, a pass holds one
// prompt chunk, first in the batch and cut where the runner cuts the prompt
// alone (at multiples of its chunk from the sequence's start), and prompts
// that begin alike evaluate all their tokens instead of sharing.
TEST_F(BatchSchedulerTest, BatchInvariantPassesCutPromptsAsAloneAndStepEachToken) {
  const int64_t context = 160, chunk = 24;
  const std::vector<int32_t> system = prompt_of(50, 9);
  const std::vector<GenerationRequest> requests = {
      request(with_prefix(system, 50, 10, 1), greedy(), 12),
      request(with_prefix(system, 50, 20, 2), top_k_sampling(3), 14),
      request(prompt_of(5, 5), greedy(), 20),
      request(prompt_of(70, 6), greedy(), 9),
      request(with_prefix(system, 30, 25, 3), greedy(), 12),
  };
  FakeRunner runner(context, 3 * context);
  runner.chunk_entries = chunk;
  SchedulerOptions options;
  options.parallel = 3;
  options.batch_invariant = true;
  const Scheduled got = schedule(runner, tokenizer, requests, options);
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same(got.results[i], alone(make_runner, tokenizer, requests[i]), i);
    EXPECT_EQ(got.results[i].shared_prompt_tokens, 0) << i;
  }
  int64_t prompt_tokens = 0, decode_steps = 0;
  bool beside_steps = false;
  for (const Batch& b : runner.batches) {
    const auto runs = sequence_runs(b);
    int64_t prompt_runs = 0;
    for (const SequenceRun& run : runs) {
      if (run.count == 1 && b.entries[size_t(run.first)].stepwise) {
        ++decode_steps;
        continue;
      }
      ++prompt_runs;
      prompt_tokens += run.count;
      EXPECT_EQ(run.first, 0) << "a prompt chunk comes first in its pass";
      EXPECT_EQ(run.pos % chunk, 0) << "a chunk starts where alone's does";
      EXPECT_LE(run.count, chunk);
      EXPECT_FALSE(b.entries[size_t(run.first)].stepwise);
      beside_steps |= runs.size() > 1;
    }
    EXPECT_LE(prompt_runs, 1);
  }
  int64_t total = 0, generated = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    total += int64_t(requests[i].prompt.size());
    generated += got.results[i].completion_tokens;
  }
  EXPECT_EQ(prompt_tokens, total);
  EXPECT_EQ(got.progress.prompt_tokens, total);
  EXPECT_GE(decode_steps, generated - int64_t(requests.size()));  // every token after a prompt's pick is a step
  EXPECT_TRUE(beside_steps) << "no prompt chunk ran beside other sequences' steps";
}

TEST_F(BatchSchedulerTest, AFreedSlotKeepsItsPromptForTheNextOneThatBeginsAlike) {
  const int64_t context = 96;
  const std::vector<int32_t> system = prompt_of(40, 9);
  const std::vector<GenerationRequest> requests = {
      request(with_prefix(system, 40, 10, 1), greedy(), 8),
      request(with_prefix(system, 40, 20, 2), top_k_sampling(3), 8),  // continues from the slot's 40 kept tokens
      request(prompt_of(30, 3), greedy(), 8),                         // begins otherwise: the slot starts empty
      request(with_prefix(system, 40, 5, 4), greedy(), 8),            // the kept prompt went with request 2
  };
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  for (const int sequences : {0, 1}) {
    SCOPED_TRACE(sequences ? "a pool for 1 sequence" : "a pool for any number");
    FakeRunner runner(context, context, sequences);
    const Scheduled got = schedule(runner, tokenizer, requests, 1, 32);
    const std::vector<int64_t> kept = {0, 40, 0, 0};
    for (size_t i = 0; i < requests.size(); ++i) {
      expect_same(got.results[i], alone(make_runner, tokenizer, requests[i]), i);
      EXPECT_EQ(got.results[i].shared_prompt_tokens, kept[i]) << i;
    }
  }
}

TEST_F(BatchSchedulerTest, KeptPromptsGiveTheirPagesBackWhenThePoolNeedsThem) {
  // Room for two requests at a time; three slots, so a finished one's kept
  // prompt holds pages that the third slot's request needs.
  const int64_t context = 96;
  const std::vector<GenerationRequest> requests = {
      request(prompt_of(60, 1), greedy(), 10),  // 5 pages of 16 positions
      request(prompt_of(60, 2), greedy(), 30),  // 6 pages, still running when the third starts
      request(prompt_of(60, 3), greedy(), 10),  // an empty slot, 5 more pages: request 0's kept 4 go
  };
  FakeRunner runner(context, 11 * kPage);
  const Scheduled got = schedule(runner, tokenizer, requests, 3, 64);
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  for (size_t i = 0; i < requests.size(); ++i) expect_same(got.results[i], alone(make_runner, tokenizer, requests[i]), i);
  // The third started before the second finished: it did not wait for pages.
  bool overlapped = false;
  for (const Batch& b : runner.batches) {
    std::set<SeqId> seqs;
    for (const SequenceRun& run : sequence_runs(b)) seqs.insert(run.seq);
    overlapped |= seqs.size() == 2 && !seqs.contains(0);
  }
  EXPECT_TRUE(overlapped);
}

TEST_F(BatchSchedulerTest, AsksForTheLeastEachChainNeeds) {
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(64, 64); };
  FakeRunner runner(64, 3 * 64);
  SchedulerOptions options;
  options.parallel = 3;
  BatchScheduler scheduler(runner, tokenizer, options);
  const std::vector<GenerationRequest> requests = {
      request(prompt_of(3, 1), greedy(), 4),
      request(prompt_of(3, 2), top_k_sampling(1, 5), 12),
      request(prompt_of(3, 3), top_k_sampling(2, 0), 4),
      request(prompt_of(3, 4), top_k_sampling(3, 12), 4),  // waits for a slot
  };
  for (const auto& r : requests) scheduler.submit(r);
  ASSERT_TRUE(scheduler.step());
  const Batch& first = runner.batches.at(0);
  std::map<SeqId, Output> asked;
  for (const BatchEntry& e : first.entries) {
    if (e.output != Output::None) asked[e.seq] = e.output;
  }
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_EQ(asked[0], Output::Argmax);
  EXPECT_EQ(asked[1], Output::Top);
  EXPECT_EQ(asked[2], Output::Logits);
  EXPECT_EQ(first.top_k, 5);
  scheduler.run();
  // Beside the top-5 request, the top-12 one gets one list of 12 for both.
  EXPECT_TRUE(std::any_of(runner.batches.begin(), runner.batches.end(), [](const Batch& b) {
    return b.top_k == 12 && std::count_if(b.entries.begin(), b.entries.end(),
                                          [](const BatchEntry& e) { return e.output == Output::Top; }) == 2;
  }));
  for (size_t i = 0; i < requests.size(); ++i) expect_same(scheduler.result(i), alone(make_runner, tokenizer, requests[i]), i);
}

TEST_F(BatchSchedulerTest, ARequestThatCannotRunFailsAloneAndTheOthersFinish) {
  const int64_t context = 64;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  SamplingParams bad_top_p = greedy();
  bad_top_p.top_p = 2.0f;
  std::vector<GenerationRequest> requests = {
      request(prompt_of(5, 1), greedy(), 10),
      request(prompt_of(65, 2), greedy(), 10),  // longer than the context
      request({}, greedy(), 10),
      request(prompt_of(5, 3), bad_top_p, 10),
      request({1, kVocab, 2}, greedy(), 10),
      request(prompt_of(5, 4), greedy(), 0),
      request(prompt_of(8, 5), top_k_sampling(9), 12),
  };
  FakeRunner runner(context, 2 * context);
  SchedulerOptions options;
  options.parallel = 2;
  std::vector<int> finished(requests.size(), 0);
  SchedulerCallbacks callbacks;
  callbacks.on_finish = [&](size_t i, const GenerationResult&) { ++finished.at(i); };
  BatchScheduler scheduler(runner, tokenizer, options, callbacks);
  for (const auto& r : requests) scheduler.submit(r);
  scheduler.run();

  EXPECT_EQ(finished, std::vector<int>(requests.size(), 1));
  EXPECT_NE(scheduler.result(1).error.find("the prompt has 65 tokens but the context holds 64"), std::string::npos)
      << scheduler.result(1).error;
  EXPECT_EQ(scheduler.result(1).prompt_tokens, 65);
  EXPECT_NE(scheduler.result(2).error.find("empty prompt"), std::string::npos) << scheduler.result(2).error;
  EXPECT_NE(scheduler.result(3).error.find("top_p"), std::string::npos) << scheduler.result(3).error;
  EXPECT_NE(scheduler.result(4).error.find("outside the vocabulary"), std::string::npos) << scheduler.result(4).error;
  for (size_t i : {1, 2, 3, 4}) EXPECT_TRUE(scheduler.result(i).tokens.empty()) << i;
  for (size_t i : {0, 5, 6}) expect_same(scheduler.result(i), alone(make_runner, tokenizer, requests[i]), i);
  EXPECT_EQ(scheduler.result(5).completion_tokens, 0);
}

TEST_F(BatchSchedulerTest, AdmitsOnlyWhatThePoolCanHold) {
  // A pool of 128 positions for three slots: each request may reach 64
  // positions (prompt 10 + 54 tokens), so only two run at once.
  const int64_t context = 64;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  FakeRunner runner(context, 128);
  SchedulerOptions options;
  options.parallel = 3;
  int64_t most_running = 0;
  SchedulerCallbacks callbacks;
  callbacks.on_progress = [&](const SchedulerProgress& p) { most_running = std::max(most_running, p.running); };
  BatchScheduler scheduler(runner, tokenizer, options, callbacks);
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 4; ++i) requests.push_back(request(prompt_of(10, i), top_k_sampling(uint64_t(i)), 54));
  for (const auto& r : requests) scheduler.submit(r);
  scheduler.run();
  EXPECT_EQ(most_running, 2);
  EXPECT_LE(runner.live_max, 2);
  for (size_t i = 0; i < requests.size(); ++i) expect_same(scheduler.result(i), alone(make_runner, tokenizer, requests[i]), i);
}

// As `batch` feeds it: requests submitted while others run (and after the
// scheduler has gone idle) get what they get alone; a released result keeps
// its counts and drops its text and tokens.
TEST_F(BatchSchedulerTest, RequestsSubmittedBetweenStepsGetWhatTheyWouldAlone) {
  const int64_t context = 64;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  FakeRunner runner(context, 3 * context);
  SchedulerOptions options;
  options.parallel = 2;
  BatchScheduler scheduler(runner, tokenizer, options);
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 4; ++i) requests.push_back(request(prompt_of(6 + i, i), top_k_sampling(uint64_t(i)), 20));
  scheduler.submit(requests[0]);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(scheduler.step());
  scheduler.submit(requests[1]);  // beside a request mid-decode
  scheduler.submit(requests[2]);  // waits for a slot
  scheduler.run();
  EXPECT_FALSE(scheduler.step());
  scheduler.submit(requests[3]);  // after the scheduler went idle
  scheduler.run();
  for (size_t i = 0; i < requests.size(); ++i) expect_same(scheduler.result(i), alone(make_runner, tokenizer, requests[i]), i);
  // Released requests are dropped once every earlier one is released too.
  EXPECT_EQ(scheduler.held(), 4u);
  scheduler.release(1);
  EXPECT_THROW(scheduler.result(1), Error);
  EXPECT_EQ(scheduler.held(), 4u);
  scheduler.release(0);
  EXPECT_EQ(scheduler.held(), 2u);
  expect_same(scheduler.result(2), alone(make_runner, tokenizer, requests[2]), 2);
  scheduler.release(2);
  scheduler.release(3);
  EXPECT_EQ(scheduler.held(), 0u);
  EXPECT_THROW(scheduler.release(3), Error);
  EXPECT_THROW(scheduler.result(4), Error);
  // A request is released only once it finished.
  scheduler.submit(requests[0]);
  EXPECT_THROW(scheduler.release(4), Error);
  scheduler.run();
  expect_same(scheduler.result(4), alone(make_runner, tokenizer, requests[0]), 4);
}

TEST_F(BatchSchedulerTest, RunsOnAPoolForThreeSequencesAndRefusesAFourth) {
  const int64_t context = 48;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  FakeRunner runner(context, 0, 3);
  {
    SchedulerOptions four;
    four.parallel = 4;
    try {
      BatchScheduler too_many(runner, tokenizer, four);
      FAIL() << "four parallel sequences on a runner of three";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("4 parallel sequences"), std::string::npos) << e.what();
    }
  }
  SchedulerOptions options;
  options.parallel = 3;
  BatchScheduler scheduler(runner, tokenizer, options);
  std::vector<GenerationRequest> requests;
  for (int32_t i = 0; i < 5; ++i) requests.push_back(request(prompt_of(3 + 7 * i, i), greedy(), 40));
  for (const auto& r : requests) scheduler.submit(r);
  scheduler.run();
  for (size_t i = 0; i < requests.size(); ++i) expect_same(scheduler.result(i), alone(make_runner, tokenizer, requests[i]), i);
}

TEST_F(BatchSchedulerTest, StreamsEachRequestsTextAndCountsProgress) {
  FakeRunner runner(64, 2 * 64);
  SchedulerOptions options;
  options.parallel = 2;
  std::map<size_t, std::string> streamed;
  SchedulerCallbacks callbacks;
  callbacks.on_text = [&](size_t i, std::string_view piece, std::span<const TokenLogprobs>) { streamed[i] += piece; };
  BatchScheduler scheduler(runner, tokenizer, options, callbacks);
  int64_t prompt_tokens = 0;
  for (int32_t i = 0; i < 5; ++i) {
    scheduler.submit(request(prompt_of(4 + i, i), top_k_sampling(uint64_t(i)), 10 + i));
    prompt_tokens += 4 + i;
  }
  scheduler.run();
  int64_t generated = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(streamed[i], scheduler.result(i).text) << i;
    generated += scheduler.result(i).completion_tokens;
  }
  const SchedulerProgress& p = scheduler.progress();
  EXPECT_EQ(p.requests, 5);
  EXPECT_EQ(p.finished, 5);
  EXPECT_EQ(p.running, 0);
  EXPECT_EQ(p.prompt_tokens, prompt_tokens);
  EXPECT_EQ(p.generated_tokens, generated);
  EXPECT_EQ(p.passes, int64_t(runner.batches.size()));
}

// The log-softmax of a row in double, as the test computes it.
std::vector<double> log_softmax(std::span<const float> row) {
  double highest = -INFINITY;
  for (const float x : row) highest = std::max(highest, double(x));
  double sum = 0.0;
  for (const float x : row) sum += std::exp(double(x) - highest);
  std::vector<double> out;
  for (const float x : row) out.push_back(double(x) - highest - std::log(sum));
  return out;
}

TEST_F(BatchSchedulerTest, LogprobsAreTheRowsLogSoftmaxAndLeaveTheOutputAlone) {
  const int64_t context = 64;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  SamplingParams penalised = top_k_sampling(5);
  penalised.repeat_penalty = 1.5f;  // applied in place on the row: the reported values must be the raw row's
  std::vector<GenerationRequest> requests = {
      request(prompt_of(4, 1), greedy(), 12),
      request(prompt_of(7, 2), penalised, 14),
      request(prompt_of(5, 3), top_k_sampling(6), 10),  // no logprobs: its chain's least output
      request(prompt_of(6, 4), greedy(), 16),
  };
  requests[0].logprobs = 5;
  requests[1].logprobs = 3;
  requests[3].logprobs = 0;
  // A stop string from request 3's own text: the text of a token past its middle that occurs there first.
  const GenerationResult free3 = alone(make_runner, tokenizer, requests[3]);
  size_t stop_at = free3.tokens.size() / 2;
  for (; stop_at < free3.tokens.size(); ++stop_at) {
    const std::string piece = tokenizer.token_bytes(free3.tokens[stop_at]);
    const size_t offset = tokenizer.decode(std::span(free3.tokens).first(stop_at)).size();
    if (!piece.empty() && free3.text.find(piece) == offset) break;
  }
  ASSERT_LT(stop_at, free3.tokens.size());
  requests[3].options.stop_strings = {tokenizer.token_bytes(free3.tokens[stop_at])};

  FakeRunner runner(context, 4 * context);
  SchedulerOptions options;
  options.parallel = 4;
  std::map<size_t, std::string> streamed_text;
  std::map<size_t, std::vector<TokenLogprobs>> streamed;
  SchedulerCallbacks callbacks;
  callbacks.on_text = [&](size_t i, std::string_view piece, std::span<const TokenLogprobs> logprobs) {
    EXPECT_FALSE(piece.empty() && logprobs.empty()) << i;
    streamed_text[i] += piece;
    streamed[i].insert(streamed[i].end(), logprobs.begin(), logprobs.end());
  };
  BatchScheduler scheduler(runner, tokenizer, options, callbacks);
  for (const auto& r : requests) scheduler.submit(r);
  scheduler.run();

  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationResult& got = scheduler.result(i);
    expect_same(got, alone(make_runner, tokenizer, requests[i]), i);
    EXPECT_EQ(streamed_text[i], got.text) << i;
    ASSERT_EQ(streamed[i].size(), got.logprobs.size()) << i;
    if (!requests[i].logprobs) {
      EXPECT_TRUE(got.logprobs.empty()) << i;
      continue;
    }
    if (got.stop != StopReason::StopString) {
      ASSERT_EQ(got.logprobs.size(), got.tokens.size()) << i;
    }
    // Each reported value against the row the token was sampled from, recomputed on a fresh runner.
    auto reference = make_runner();
    std::vector<int32_t> context_tokens = requests[i].prompt;
    std::vector<float> row(kVocab);
    int64_t previous_offset = 0;
    for (size_t t = 0; t < got.logprobs.size(); ++t) {
      const TokenLogprobs& lp = got.logprobs[t];
      EXPECT_EQ(streamed[i][t].chosen.id, lp.chosen.id);
      ASSERT_EQ(lp.chosen.id, got.tokens[t]) << i << " token " << t;
      reference->seq_truncate(0, 0);
      reference->forward(context_tokens, 0, row.data(), false);
      const std::vector<double> expected = log_softmax(row);
      EXPECT_NEAR(lp.chosen.logprob, expected[size_t(lp.chosen.id)], 1e-5) << i << " token " << t;
      ASSERT_EQ(int64_t(lp.top.size()), *requests[i].logprobs);
      std::vector<double> sorted = expected;
      std::sort(sorted.rbegin(), sorted.rend());
      double mass = 0.0;
      for (size_t k = 0; k < lp.top.size(); ++k) {
        EXPECT_NEAR(lp.top[k].logprob, expected[size_t(lp.top[k].id)], 1e-5);
        EXPECT_NEAR(lp.top[k].logprob, sorted[k], 1e-5) << "the " << k << "th likeliest";
        mass += std::exp(lp.top[k].logprob);
      }
      EXPECT_LE(mass, 1.0 + 1e-6);
      if (requests[i].sampling.temperature == 0.0f && !lp.top.empty()) {
        EXPECT_EQ(lp.chosen.id, lp.top[0].id);
      }
      EXPECT_GE(lp.text_offset, previous_offset);
      EXPECT_LT(lp.text_offset, std::max<int64_t>(1, int64_t(got.text.size())));
      previous_offset = lp.text_offset;
      context_tokens.push_back(lp.chosen.id);
    }
  }
  // The stop string's own token is not reported; every one before it is.
  const GenerationResult& cut = scheduler.result(3);
  ASSERT_EQ(cut.stop, StopReason::StopString);
  EXPECT_EQ(cut.tokens.size(), stop_at + 1);
  EXPECT_EQ(cut.logprobs.size(), stop_at);
  // Requests with logprobs asked for the whole row; the greedy one without would have asked for the argmax.
  for (const Batch& b : runner.batches) {
    for (const BatchEntry& e : b.entries) {
      if (e.output != Output::None && e.seq != 2) {
        EXPECT_EQ(e.output, Output::Logits);
      }
    }
  }
}

// --- Speculation ---

// Drafts what a known reference continuation of the context holds, with
// every third proposed token off by one: some drafts are kept whole, some
// in part, so acceptance and rollback both happen.
class OracleDraft final : public DraftSource {
 public:
  explicit OracleDraft(std::vector<std::vector<int32_t>> references) : references_(std::move(references)) {}
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override {
    for (const auto& ref : references_) {
      if (ref.size() <= context.size() || !std::equal(context.begin(), context.end(), ref.begin())) continue;
      for (size_t i = context.size(); i < ref.size() && int64_t(draft.size()) < max; ++i) {
        draft.push_back(i % 3 == 2 ? (ref[i] + 1) % kVocab : ref[i]);
      }
      return;
    }
  }

 private:
  std::vector<std::vector<int32_t>> references_;
};

// Drafts a tree from a known reference continuation: below each node a
// wrong first child, then the reference's token (but at every third level,
// where only the wrong one is offered): kept paths move down the cache, over
// page boundaries too, and rejections happen.
class OracleTreeDraft final : public DraftSource {
 public:
  explicit OracleTreeDraft(std::vector<std::vector<int32_t>> references) : references_(std::move(references)) {}
  void propose(std::span<const int32_t>, int64_t, std::vector<int32_t>&) override {
    ADD_FAILURE() << "a tree draft was asked for a chain";
  }
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override {
    tree.clear();
    for (const auto& ref : references_) {
      if (ref.size() <= context.size() || !std::equal(context.begin(), context.end(), ref.begin())) continue;
      int32_t node = -1;
      for (size_t i = context.size(); i < ref.size() && int64_t(i - context.size()) < max_depth; ++i) {
        if (int64_t(tree.size()) + 2 > max_nodes) return;
        tree.add((ref[i] + 1) % kVocab, node);
        if (i % 3 == 2) return;
        node = tree.add(ref[i], node);
      }
      return;
    }
  }

 private:
  std::vector<std::vector<int32_t>> references_;
};

// What the SpeculativeGenerator makes of the request alone with `draft`.
GenerationResult alone_speculative(ModelRunner& runner, const Tokenizer& tokenizer, const GenerationRequest& r,
                                   DraftSource& draft, int64_t draft_max, int64_t tree_tokens = 0) {
  SpeculativeGenerator g(runner, tokenizer, draft, draft_max, 0, tree_tokens);
  Sampler sampler(r.sampling, runner.config().vocab_size);
  GenerationResult out;
  const auto stats = g.generate(r.prompt, sampler, r.options, [&](std::string_view piece) { out.text += piece; });
  out.tokens = g.generated();
  out.prompt_tokens = stats.generation.prompt_tokens;
  out.completion_tokens = stats.generation.generated_tokens;
  out.stop = stats.generation.stop;
  out.speculation = stats.speculation;
  return out;
}

// Requests speculating with `make_draft` (a chain, or trees of tree_tokens)
// in shared passes: each gets what it gets alone, greedy ones plain greedy's
// output; one pass verified several sequences' runs of up to run_limit entries.
void expect_speculating_requests_keep_their_output(const Tokenizer& tokenizer,
                                                   const std::function<std::unique_ptr<DraftSource>(
                                                       const std::vector<std::vector<int32_t>>&)>& make_draft,
                                                   int64_t draft_max, int64_t tree_tokens, int64_t run_limit) {
  const int64_t context = 96;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  std::vector<GenerationRequest> requests = {
      request(prompt_of(5, 1), greedy(), 30),
      request(prompt_of(40, 2), top_k_sampling(3), 25),
      request(prompt_of(70, 3), greedy(), 40),  // the context fills
      request(prompt_of(9, 4), top_k_sampling(4, 0), 18),
      request(prompt_of(20, 5), greedy(), 24),
  };
  // The oracle knows every request's plain output.
  std::vector<std::vector<int32_t>> references;
  for (const auto& r : requests) {
    std::vector<int32_t> full = r.prompt;
    const GenerationResult plain = alone(make_runner, tokenizer, r);
    full.insert(full.end(), plain.tokens.begin(), plain.tokens.end());
    references.push_back(std::move(full));
  }
  FakeRunner runner(context, 3 * context);
  SchedulerOptions options;
  options.parallel = 3;
  options.prompt_budget = 32;
  options.draft = [&](SeqId, const GenerationRequest&) { return make_draft(references); };
  options.draft_max = draft_max;
  options.draft_tree = tree_tokens;
  const Scheduled scheduled = schedule(runner, tokenizer, requests, options);

  SpeculationStats total;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationResult& got = scheduled.results[i];
    auto alone_runner = make_runner();
    const auto draft = make_draft(references);
    const GenerationResult want = alone_speculative(*alone_runner, tokenizer, requests[i], *draft, draft_max, tree_tokens);
    expect_same(got, want, i);
    EXPECT_EQ(got.speculation.passes, want.speculation.passes) << i;
    EXPECT_EQ(got.speculation.drafted, want.speculation.drafted) << i;
    EXPECT_EQ(got.speculation.accepted, want.speculation.accepted) << i;
    if (requests[i].sampling.temperature == 0.0f) {
      expect_same(got, alone(make_runner, tokenizer, requests[i]), i);  // greedy: plain greedy's output
      EXPECT_GT(got.speculation.accepted, 0) << i;
      EXPECT_LT(got.speculation.accepted, got.speculation.drafted) << i;
    }
    total.passes += got.speculation.passes;
    total.drafted += got.speculation.drafted;
    total.accepted += got.speculation.accepted;
  }
  EXPECT_EQ(scheduled.results[2].stop, StopReason::ContextFull);
  const SchedulerProgress& p = scheduled.progress;
  EXPECT_EQ(p.speculation.passes, total.passes);
  EXPECT_EQ(p.speculation.drafted, total.drafted);
  EXPECT_EQ(p.speculation.accepted, total.accepted);

  // One pass verified several sequences' drafts, each a stepwise run of up to run_limit entries.
  bool shared = false;
  for (const Batch& b : runner.batches) {
    int drafts = 0;
    for (const SequenceRun& run : sequence_runs(b)) {
      if (!run.stepwise) continue;
      EXPECT_LE(run.count, run_limit);
      EXPECT_EQ(run.tree, tree_tokens > 0 && run.count > 2);
      drafts += run.count > 1 ? 1 : 0;
    }
    shared |= drafts > 1;
  }
  EXPECT_TRUE(shared) << "no pass verified the drafts of two sequences";
}

TEST_F(BatchSchedulerTest, SpeculatingRequestsVerifyTheirDraftsInSharedPassesAndKeepTheirOutput) {
  const int64_t draft_max = 4;
  expect_speculating_requests_keep_their_output(
      tokenizer, [](const auto& references) { return std::make_unique<OracleDraft>(references); }, draft_max, 0,
      draft_max + 1);
}

TEST_F(BatchSchedulerTest, SpeculatingRequestsVerifyTheirTreesInSharedPassesAndKeepTheirOutput) {
  // Two children a level, 4 levels: trees of up to 9 tokens.
  const int64_t draft_max = 4, tree_tokens = 2 * draft_max + 1;
  expect_speculating_requests_keep_their_output(
      tokenizer, [](const auto& references) { return std::make_unique<OracleTreeDraft>(references); }, draft_max,
      tree_tokens, tree_tokens);
}

// OracleTreeDraft's trees and OracleDraft's chains, counting which the engine asked for.
class TreeOrChainDraft final : public DraftSource {
 public:
  TreeOrChainDraft(const std::vector<std::vector<int32_t>>& references, int64_t exact_trees_until)
      : chain_(references), tree_(references), exact_trees_until_(exact_trees_until) {}
  void propose(std::span<const int32_t> context, int64_t max, std::vector<int32_t>& draft) override {
    ++chains;
    chain_.propose(context, max, draft);
  }
  void propose_tree(std::span<const int32_t> context, int64_t max_depth, int64_t max_nodes, DraftTree& tree) override {
    ++trees;
    // The pending token is the context's last; the tree's nodes take the positions after it.
    EXPECT_LE(int64_t(context.size()) + max_nodes, exact_trees_until_);
    tree_.propose_tree(context, max_depth, max_nodes, tree);
  }
  int chains = 0, trees = 0;

 private:
  OracleDraft chain_;
  OracleTreeDraft tree_;
  int64_t exact_trees_until_;
};

TEST_F(BatchSchedulerTest, TreesBecomeChainsWhereTheRunnerCannotVerifyThemExactly) {
  const int64_t context = 96, exact_until = 50, draft_max = 4, tree_tokens = 9;
  const auto make_runner = [&] { return std::make_unique<FakeRunner>(context, context); };
  const GenerationRequest r = request(prompt_of(20, 1), greedy(), 60);
  const GenerationResult plain = alone(make_runner, tokenizer, r);
  std::vector<int32_t> reference = r.prompt;
  reference.insert(reference.end(), plain.tokens.begin(), plain.tokens.end());
  ASSERT_GT(int64_t(reference.size()), exact_until + 2 * tree_tokens);
  // Alone through the SpeculativeGenerator, then through the scheduler.
  for (const bool scheduled : {false, true}) {
    SCOPED_TRACE(scheduled ? "scheduler" : "alone");
    FakeRunner runner(context, context);
    runner.exact_trees_until = exact_until;
    TreeOrChainDraft draft({reference}, exact_until);
    GenerationResult got;
    if (scheduled) {
      SchedulerOptions options;
      options.draft = [&](SeqId, const GenerationRequest&) {
        return std::make_unique<TreeOrChainDraft>(std::vector<std::vector<int32_t>>{reference}, exact_until);
      };
      options.draft_max = draft_max;
      options.draft_tree = tree_tokens;
      BatchScheduler scheduler(runner, tokenizer, options);
      scheduler.submit(r);
      scheduler.run();
      got = scheduler.result(0);
      // The scheduler's own draft counted its proposals: judge them by the batches it ran.
      bool tree_run = false, chain_run = false;
      for (const Batch& b : runner.batches) {
        for (const SequenceRun& run : sequence_runs(b)) {
          if (!run.stepwise || run.count < 3) continue;
          EXPECT_EQ(run.tree, run.pos + tree_tokens <= exact_until) << "a run at " << run.pos;
          (run.tree ? tree_run : chain_run) = true;
        }
      }
      EXPECT_TRUE(tree_run);
      EXPECT_TRUE(chain_run);
    } else {
      got = alone_speculative(runner, tokenizer, r, draft, draft_max, tree_tokens);
      EXPECT_GT(draft.trees, 0);
      EXPECT_GT(draft.chains, 0);
    }
    expect_same(got, plain, 0);
  }
}

TEST_F(BatchSchedulerTest, RefusesAnEmptyDraftBudget) {
  FakeRunner runner(64, 64);
  SchedulerOptions options;
  options.draft = [](SeqId, const GenerationRequest&) { return std::make_unique<LookupDraft>(); };
  options.draft_max = 0;
  EXPECT_THROW(BatchScheduler(runner, tokenizer, options), Error);
  options.draft_max = 4;
  options.draft_tree = 1;  // the pending token alone
  EXPECT_THROW(BatchScheduler(runner, tokenizer, options), Error);
}

// --- Real models on the CPU backend ---

std::unique_ptr<ModelRunner> cpu_runner(const std::shared_ptr<const GgufFile>& file, int64_t context, int sequences) {
  CpuRunnerOptions o;
  o.context = context;
  o.sequences = sequences;
  return make_cpu_runner(file, o);
}

// A draft source on the batched run's runner.
using RunnerDraft = std::function<std::unique_ptr<DraftSource>(ModelRunner& runner, SeqId seq, const SamplingParams& s)>;

std::unique_ptr<DraftSource> lookup_draft(ModelRunner&, SeqId, const SamplingParams&) {
  return std::make_unique<LookupDraft>();
}

std::unique_ptr<DraftSource> two_layer_self_draft(ModelRunner& runner, SeqId seq, const SamplingParams& s) {
  return std::make_unique<SelfDraft>(runner, seq, 2, draft_sampling(s));
}

// Runs the requests through a scheduler of `parallel` slots (prompts in
// chunks of `budget`, each drafting with `draft` when set), and each alone
// through the Generator on its own runner.
struct BatchedAndAlone {
  std::vector<GenerationResult> batched, alone;
};

BatchedAndAlone run_both(const std::string& path, int64_t context, const std::vector<GenerationRequest>& requests,
                         int parallel, int64_t budget, const RunnerDraft& draft = {}, int64_t draft_tree = 0) {
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  BatchedAndAlone out;
  {
    auto runner = cpu_runner(file, context, parallel);
    SchedulerOptions options;
    options.parallel = parallel;
    options.prompt_budget = budget;
    if (draft) options.draft = [&](SeqId seq, const GenerationRequest& r) { return draft(*runner, seq, r.sampling); };
    options.draft_tree = draft_tree;
    BatchScheduler scheduler(*runner, tokenizer, options);
    for (const auto& r : requests) scheduler.submit(r);
    scheduler.run();
    for (size_t i = 0; i < requests.size(); ++i) out.batched.push_back(scheduler.result(i));
  }
  for (const auto& r : requests) out.alone.push_back(alone([&] { return cpu_runner(file, context, 1); }, tokenizer, r));
  return out;
}

std::vector<GenerationRequest> stories_requests(const Tokenizer& tokenizer, const std::vector<SamplingParams>& sampling) {
  const std::vector<std::string> prompts = {
      "",  // BOS alone, as llama2.c starts
      "Once upon a time",
      "Lily",
      "One day, Tom went to the park with his mom. He saw a big red ball under a tree and wanted to play with it, "
      "but a dog",
      "The cat sat on the mat",
      "Sam and his sister",
  };
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(request(tokenizer.encode(prompts[i], true), sampling[i % sampling.size()], 64));
  }
  return requests;
}

// The stories requests over three chains: top-k, the whole row, and penalties.
std::vector<GenerationRequest> stories_sampled_requests(const Tokenizer& tokenizer) {
  SamplingParams penalised = top_k_sampling(11);
  penalised.repeat_penalty = 1.2f;
  return stories_requests(tokenizer, {top_k_sampling(5), top_k_sampling(6, 0), penalised});
}

TEST(BatchSchedulerModels, Stories260KBatchedGreedyIsExactlyTheSingleSequenceOutput) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::vector<int32_t> golden = test::stories260k_golden_ids();
  ASSERT_EQ(golden.size(), 64u) << "golden ids not found in the shared models' README (format changed?)";
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const auto requests = stories_requests(tokenizer, {greedy()});
  ASSERT_EQ(requests[0].prompt, std::vector<int32_t>{1});
  ASSERT_GT(requests[3].prompt.size(), 32u);  // spans prompt chunks and KV pages
  // Three slots for six requests, prompts in chunks of up to 32.
  const BatchedAndAlone r = run_both(path, 128, requests, 3, 32);
  EXPECT_EQ(r.batched[0].tokens, golden) << "the BOS-only sequence leaves llama2.c's greedy path";
  for (size_t i = 0; i < requests.size(); ++i) expect_same(r.batched[i], r.alone[i], i);
}

TEST(BatchSchedulerModels, Stories260KSampledRequestsAreExactlyTheirSingleSequenceOutput) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const auto requests = stories_sampled_requests(tokenizer);
  const BatchedAndAlone r = run_both(path, 128, requests, 4, 32);
  for (size_t i = 0; i < requests.size(); ++i) expect_same(r.batched[i], r.alone[i], i);
}

// Speculating greedy requests in a batch give plain greedy output alone, with
// lookup drafts and self drafts (each on its request's sequence), chains and
// token trees alike.
TEST(BatchSchedulerModels, Stories260KSpeculativeBatchedGreedyIsExactlyTheSingleSequenceOutput) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const auto requests = stories_requests(tokenizer, {greedy()});
  for (const int64_t tree : {0, 12}) {
    for (const RunnerDraft& draft : {RunnerDraft(lookup_draft), RunnerDraft(two_layer_self_draft)}) {
      const BatchedAndAlone r = run_both(path, 128, requests, 3, 32, draft, tree);
      int64_t accepted = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        expect_same(r.batched[i], r.alone[i], i);
        accepted += r.batched[i].speculation.accepted;
      }
      EXPECT_GT(accepted, 0) << "tree " << tree;
    }
  }
}

// Sampling: each request is what the SpeculativeGenerator gives alone with the same draft and seed.
TEST(BatchSchedulerModels, Stories260KSpeculativeSampledRequestsAreTheirSingleSequenceSpeculativeOutput) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const auto requests = stories_sampled_requests(tokenizer);
  for (const int64_t tree : {0, 12}) {
    for (const RunnerDraft& draft : {RunnerDraft(lookup_draft), RunnerDraft(two_layer_self_draft)}) {
      const BatchedAndAlone r = run_both(path, 128, requests, 4, 32, draft, tree);
      for (size_t i = 0; i < requests.size(); ++i) {
        auto runner = cpu_runner(file, 128, 1);
        const auto source = draft(*runner, 0, requests[i].sampling);
        expect_same(r.batched[i], alone_speculative(*runner, tokenizer, requests[i], *source, 8, tree), i);
      }
    }
  }
}

// Greedy picks of `steps` tokens of seq after its cached positions, the
// first input being `token` at `pos`.
std::vector<int32_t> greedy_steps(ModelRunner& runner, SeqId seq, int32_t token, int64_t pos, int steps) {
  std::vector<int32_t> picks;
  Batch batch;
  BatchOutputs out;
  for (int i = 0; i < steps; ++i) {
    batch.clear();
    batch.add(token, pos + i, seq, Output::Argmax);
    runner.forward(batch, out);
    token = out.argmax[0];
    picks.push_back(token);
  }
  return picks;
}

TEST(BatchSchedulerModels, ACopiedPrefixContinuesExactlyAsAFullPrefill) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const std::vector<int32_t> prompt = tokenizer.encode(
      "One day, Tom went to the park with his mom. He saw a big red ball under a tree and wanted to play", true);
  ASSERT_GT(prompt.size(), 33u);
  const int64_t n = int64_t(prompt.size());
  auto runner = cpu_runner(file, 128, 4);
  Batch batch;
  BatchOutputs out;
  // The source: the whole prompt, then 24 greedy tokens.
  const SeqId src = runner->seq_alloc();
  batch.add_run(prompt, 0, src, Output::Argmax);
  runner->forward(batch, out);
  const int32_t first = out.argmax[0];
  const std::vector<int32_t> want = greedy_steps(*runner, src, first, n, 24);
  // Copies of a page-aligned prefix (32: whole shared pages) and of one that
  // ends inside a page (n - 1: the shared last page is copied when written);
  // each prefills only the rest of the prompt.
  for (const int64_t shared : {int64_t(32), n - 1}) {
    SCOPED_TRACE(shared);
    const SeqId dst = runner->seq_alloc();
    runner->seq_copy_prefix(src, dst, shared);
    batch.clear();
    batch.add_run(std::span(prompt).subspan(size_t(shared)), shared, dst, Output::Argmax);
    runner->forward(batch, out);
    EXPECT_EQ(out.argmax[0], first);
    EXPECT_EQ(greedy_steps(*runner, dst, out.argmax[0], n, 24), want);
    runner->seq_free(dst);
  }
  // The source's own cache was not written through the shared pages.
  runner->seq_truncate(src, n - 1);
  batch.clear();
  batch.add(prompt.back(), n - 1, src, Output::Argmax);
  runner->forward(batch, out);
  EXPECT_EQ(out.argmax[0], first);
  EXPECT_EQ(greedy_steps(*runner, src, first, n, 24), want);
}

TEST(BatchSchedulerModels, Stories260KPromptsSharingAPrefixAreExactlyTheirSingleSequenceOutput) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const std::string opening = "One day, Tom went to the park with his mom. He saw a big red ball under a tree and";
  std::vector<GenerationRequest> requests;
  for (const char* rest : {" wanted to play with it", " a dog ran", " his mom said", " the sun was hot and bright"}) {
    requests.push_back(request(tokenizer.encode(opening + rest, true), greedy(), 48));
  }
  requests.push_back(request(tokenizer.encode("Lily", true), greedy(), 48));
  ASSERT_GT(tokenizer.encode(opening, true).size(), size_t(kMinPromptChunk));
  // Two slots: the later prompts share the opening with whichever runs before them.
  const BatchedAndAlone r = run_both(path, 128, requests, 2, 32);
  int64_t shared = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same(r.batched[i], r.alone[i], i);
    shared += r.batched[i].shared_prompt_tokens;
  }
  EXPECT_GT(shared, 0) << "no request shared the opening";
}

// SmolLM2's 8 prompts over 64 greedy tokens, batched (drafting with `draft`
// when set) against each alone through the plain Generator.
void expect_smollm2_batched_greedy_is_alone(const std::string& path, const RunnerDraft& draft) {
  const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  const Tokenizer tokenizer = Tokenizer::from_gguf(file->header(), path);
  const std::vector<std::string> prompts = {
      "The capital of France is",
      "Once upon a time, in a small village by the sea, there lived an old fisherman and his granddaughter. Every "
      "morning before dawn they pushed their little blue boat into the waves, and every evening",
      "def fibonacci(n):",
      "1, 2, 3, 4, 5,",
      "The three primary colors are",
      "Water boils at",
      "In 1969, the first humans to walk on the Moon were",
      "Here is a simple recipe for fluffy pancakes that anyone can make at home on a weekend morning, with "
      "ingredients you probably already have in the kitchen. First,",
  };
  std::vector<GenerationRequest> requests;
  for (const auto& p : prompts) requests.push_back(request(tokenizer.encode(p, true), greedy(), 64));
  // Four slots for eight requests.
  const BatchedAndAlone r = run_both(path, 256, requests, 4, 32, draft);
  int same = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& got = r.batched[i].tokens;
    const auto& want = r.alone[i].tokens;
    if (got == want) {
      ++same;
      continue;
    }
    const auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
    std::printf("prompt %zu (\"%s\") differs from token %td: batched %s | alone %s\n", i, prompts[i].c_str(),
                a - got.begin(), r.batched[i].text.c_str(), r.alone[i].text.c_str());
  }
  // The GPU target allows one near-tie flip in 8; the CPU runner gives a batched
  // run its single-sequence kernels (cpu::matmul_groups), so none may flip.
  EXPECT_EQ(same, 8);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(r.batched[i].completion_tokens, 64) << i;
}

TEST(BatchSchedulerModels, SmolLM2BatchedGreedyIsTheSingleSequenceOutputForEveryPrompt) {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "the default SmolLM2 model is absent";
  expect_smollm2_batched_greedy_is_alone(path, {});
}

TEST(BatchSchedulerModels, SmolLM2LookupBatchedGreedyIsTheSingleSequenceOutputForEveryPrompt) {
  const std::string path = test::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "the default SmolLM2 model is absent";
  expect_smollm2_batched_greedy_is_alone(path, lookup_draft);
}

}  // namespace
}  // namespace nt
