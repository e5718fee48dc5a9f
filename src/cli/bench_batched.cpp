#include "cli/bench_batched.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_ceiling.h"
#include "core/error.h"

namespace nt::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Token ids spread over the vocabulary, different for each sequence.
int32_t bench_token(int64_t i, int64_t seq, int64_t vocab) { return int32_t((i * 7919 + seq * 104729 + 13) % vocab); }

struct Row {
  int64_t pp, tg, b;
  double prefill_seconds = 0, decode_seconds = 0;
};

// The runner's sequences for one row: the default one and b - 1 more.
class Sequences {
 public:
  Sequences(ModelRunner& runner, int64_t b) : runner_(runner) {
    runner_.seq_truncate(0, 0);
    ids_.push_back(0);
    while (int64_t(ids_.size()) < b) ids_.push_back(runner_.seq_alloc());
  }
  ~Sequences() {
    for (const SeqId s : ids_) {
      if (s == 0) {
        runner_.seq_truncate(0, 0);
      } else {
        runner_.seq_free(s);
      }
    }
  }
  const std::vector<SeqId>& ids() const { return ids_; }

 private:
  ModelRunner& runner_;
  std::vector<SeqId> ids_;
};

Row run_row(ModelRunner& runner, int64_t pp, int64_t tg, int64_t b, bool invariant) {
  const int64_t vocab = runner.config().vocab_size;
  Sequences seqs(runner, b);
  Row row{pp, tg, b};
  Batch batch;
  BatchOutputs out;
  // Prefill: every sequence's prompt in one batch (invariant: a batch each),
  // each asking for its next token.
  std::vector<int32_t> next(size_t(b), 1);
  auto t0 = Clock::now();
  for (size_t i = 0; i < seqs.ids().size() && pp > 0; ++i) {
    const SeqId s = seqs.ids()[i];
    for (int64_t t = 0; t < pp; ++t) batch.add(bench_token(t, s, vocab), t, s, t + 1 == pp ? Output::Argmax : Output::None);
    if (invariant || i + 1 == seqs.ids().size()) {
      runner.forward(batch, out);
      std::copy(out.argmax.begin(), out.argmax.end(), next.begin() + ptrdiff_t(i + 1 - out.argmax.size()));
      batch.clear();
    }
  }
  row.prefill_seconds = seconds_since(t0);
  // Decode: one batch per step, each sequence's pick fed back.
  t0 = Clock::now();
  for (int64_t step = 0; step < tg; ++step) {
    batch.clear();
    for (size_t i = 0; i < seqs.ids().size(); ++i) batch.add(next[i], pp + step, seqs.ids()[i], Output::Argmax, invariant);
    runner.forward(batch, out);
    next = out.argmax;
  }
  row.decode_seconds = seconds_since(t0);
  return row;
}

}  // namespace

int64_t BatchedBenchOptions::context() const {
  return *std::max_element(prompt_tokens.begin(), prompt_tokens.end()) +
         *std::max_element(generated_tokens.begin(), generated_tokens.end());
}

int BatchedBenchOptions::sequences() const { return int(*std::max_element(parallel.begin(), parallel.end())); }

void check_batched_bench(const BatchedBenchOptions& o) {
  // Each value's range is the flag's own check (cmd_bench.cpp).
  const auto check = [](const std::vector<int64_t>& values, const char* flag) {
    if (values.empty()) fail("{}: give at least one value (a comma list, e.g. 128,512)", flag);
  };
  check(o.prompt_tokens, "-npp");
  check(o.generated_tokens, "-ntg");
  check(o.parallel, "-npl");
  if (o.context() < 1) fail("-npp and -ntg: a row must run at least one token per sequence");
}

void bench_batched(ModelRunner& runner, const std::string& model_name, const BatchedBenchOptions& o,
                   const std::vector<int>& gpus, int threads) {
  // Every row's sequences must fit the pool at once: say so before the first row, not midway through a long run.
  const KvPages& pool = runner.kv_pages();
  for (const int64_t b : o.parallel) {
    const int64_t pages = b * pool.pages_for(o.context());
    if (pages > pool.page_count()) {
      fail("-npl {}: {} sequences of {} positions (-npp + -ntg) need {} KV pages of {} positions, and the pool has {} "
           "(raise --kv-pool, or lower -npl)",
           b, b, o.context(), pages, pool.page_size(), pool.page_count());
    }
  }
  // Warm-up: first-touch of weights and scratch stays out of the numbers.
  {
    Sequences seqs(runner, 1);
    Batch warm;
    BatchOutputs out;
    for (int64_t i = 0; i < std::min<int64_t>(8, runner.context_size()); ++i) warm.add(int32_t(i + 1), i, 0);
    warm.entries.back().output = Output::Argmax;
    runner.forward(warm, out);
  }
  const double weights = double(runner.weight_bytes_per_token());
  const double kv_per_key = double(runner.kv_bytes_per_position());
  fmt::print("{} on {}{}\n\n", model_name, runner.description(),
             o.batch_invariant ? ", batch-invariant (prompts prefilled apart, one-token kernels per sequence)" : "");
  fmt::print("| PP | TG | B | N_KV | T_PP s | S_PP tok/s | T_TG s | S_TG tok/s | T s | S tok/s | weights/pass GB | weight GB/s | weight + KV GB/s |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const bool one_shape = o.prompt_tokens.size() == 1 && o.generated_tokens.size() == 1;
  std::vector<std::pair<std::string, double>> decode_gbps;  // each row's weights + KV a step, for the ceiling line
  for (const int64_t pp : o.prompt_tokens) {
    for (const int64_t tg : o.generated_tokens) {
      if (pp + tg == 0) continue;
      for (const int64_t b : o.parallel) {
        // A short row of b sequences once untimed: a step shape's first
        // pass captures its graph and loads its kernels (40 ms and more on
        // SmolLM2, most of a 64-step row), which later passes skip. Its
        // prompts are short so that a slow prefill (the CPU's) costs little.
        run_row(runner, std::min<int64_t>(pp, 16), std::min<int64_t>(tg, 2), b, o.batch_invariant);
        const Row r = run_row(runner, pp, tg, b, o.batch_invariant);
        const double total = r.prefill_seconds + r.decode_seconds;
        const auto rate = [](double tokens, double secs) { return secs > 0 ? fmt::format("{:.1f}", tokens / secs) : std::string("-"); };
        std::string bandwidth = "- | - | -";
        if (weights > 0 && tg > 0 && r.decode_seconds > 0) {
          // Each step reads the weights once, and every sequence's keys: on average pp + (tg + 1) / 2 of them.
          const double step = r.decode_seconds / double(tg);
          const double kv = kv_per_key * double(b) * (double(pp) + double(tg + 1) / 2.0);
          bandwidth = fmt::format("{:.3f} | {:.1f} | {:.1f}", weights / 1e9, weights / step / 1e9, (weights + kv) / step / 1e9);
          decode_gbps.emplace_back(one_shape ? fmt::format("B = {}", b) : fmt::format("PP {} TG {} B {}", pp, tg, b),
                                   (weights + kv) / step / 1e9);
        }
        fmt::print("| {} | {} | {} | {} | {:.3f} | {} | {:.3f} | {} | {:.3f} | {} | {} |\n", pp, tg, b, b * (pp + tg),
                   r.prefill_seconds, rate(double(b * pp), r.prefill_seconds), r.decode_seconds,
                   rate(double(b * tg), r.decode_seconds), total, rate(double(b * (pp + tg)), total), bandwidth);
        std::fflush(stdout);  // each row as it is measured, into a pipe too (a long run's rows take minutes)
      }
    }
  }
  if (decode_gbps.empty()) return;
  const std::optional<MemoryCeiling> ceiling = measure_memory_ceiling(runner, gpus, threads);
  // None for streamed layers: the link bounds their small batches (the single-sequence bench's host-side line says how close).
  if (!ceiling) return;
  std::string shares;
  for (const auto& [row, gbps] : decode_gbps) {
    shares += fmt::format("{}{:.0f}% at {}", shares.empty() ? "" : ", ", 100.0 * gbps / ceiling->gbps, row);
  }
  fmt::print("\ndecode ceiling: measured now: {} {:.1f} GB/s; a decode step's weights + KV reached {}\n", ceiling->what,
             ceiling->gbps, shares);
}

}  // namespace nt::cli
