// `bench` with a draft source (the speculation flags of run): greedy
// generation of -n tokens after a text prompt, without speculation and with
// it, on the same runner. Reports both decode speeds (mean ± standard
// deviation over the repetitions, after one uncounted warm-up), the speedup,
// the acceptance and the tokens per verification pass.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/model_options.h"
#include "cli/speculation_options.h"

namespace nt::cli {

struct SpeculationBenchOptions {
  SpeculationOptions speculation;
  // A passage and the start of its repetition: text a lookup draft can predict.
  std::string prompt =
      "The lighthouse stood at the end of the harbour wall. Every night the keeper climbed its hundred and twelve "
      "steps, trimmed the wick, wound the clockwork that turned the lens, and wrote the weather in a leather "
      "book.\n\nThe lighthouse stood";
};

void add_speculation_bench_options(CLI::App& cmd, SpeculationBenchOptions& options);

// Prints the markdown table's header and row.
void bench_speculation(const SpeculationBenchOptions& options, const ModelOptions& model_options, OpenedModel& model,
                       int64_t n_gen, int repetitions);

}  // namespace nt::cli
