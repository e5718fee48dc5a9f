// `bench` batched mode, after llama.cpp's llama-batched-bench: for each
// prompt length PP, generation length TG and parallel count B, prefill B
// sequences of PP tokens (one batch, which the runner cuts into its chunks),
// then decode TG steps of all B sequences, one batch per step. One run per
// row after a warm-up, as llama-batched-bench does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_runner.h"

namespace nt::cli {

struct BatchedBenchOptions {
  std::vector<int64_t> prompt_tokens = {128};    // -npp, per sequence
  std::vector<int64_t> generated_tokens = {64};  // -ntg, per sequence
  std::vector<int64_t> parallel;                 // -npl, sequences per batch; empty: not batched
  // --batch-invariant: every sequence's numbers as alone (SchedulerOptions::batch_invariant):
  // each prompt prefills in a pass of its own and decode steps run stepwise.
  bool batch_invariant = false;

  bool enabled() const { return !parallel.empty(); }
  // What the runner must hold: the longest sequence, and the most sequences at once.
  int64_t context() const;
  int sequences() const;
};

// Checks the lists (naming the flag at fault) before a model is loaded.
void check_batched_bench(const BatchedBenchOptions& options);

// Prints the table in markdown: PP, TG, B, N_KV, prefill and decode times and
// aggregate tok/s, and the bandwidth decode achieves (one weight pass per step);
// then, when every layer is resident (on the CPU, or one GPU of `gpus`), each
// row's share of the memory ceiling measured right after (bench_ceiling.h).
// threads: the host read probe's (0: one a core).
void bench_batched(ModelRunner& runner, const std::string& model_name, const BatchedBenchOptions& options,
                   const std::vector<int>& gpus, int threads);

}  // namespace nt::cli
