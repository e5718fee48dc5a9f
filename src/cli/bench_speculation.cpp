#include "cli/bench_speculation.h"

#include <fmt/core.h>

#include <vector>

#include "core/repetitions.h"
#include "engine/prompts.h"

namespace nt::cli {

void add_speculation_bench_options(CLI::App& cmd, SpeculationBenchOptions& o) {
  add_speculation_options(cmd, o.speculation);
  cmd.add_option("--spec-prompt", o.prompt,
                 "With a draft source: the raw text prompt the generation continues (default: a passage about a "
                 "lighthouse keeper, then the start of its repetition)");
}

namespace {

struct Measured {
  Spread tokens_per_second;
  SpeculationStats speculation;  // of the last run: greedy runs are alike
};

// One warm-up run, then `repetitions`; each continues the same prompt, whose
// cache the generator reuses, so what is timed is the decode.
Measured measure(SpeculativeOrPlainGenerator& generator, const std::vector<int32_t>& prompt, int64_t vocab,
                 int64_t n_gen, int repetitions) {
  GenerationOptions options;
  options.max_tokens = n_gen;  // no stop tokens: every run generates n_gen
  Sampler greedy(greedy_sampling(), vocab);
  std::vector<double> rates;
  Measured m;
  for (int i = 0; i <= repetitions; ++i) {
    const SpeculativeStats stats = generator.generate(prompt, greedy, options, [](std::string_view) {});
    if (i > 0) rates.push_back(stats.generation.decode_tokens_per_second());
    m.speculation = stats.speculation;
  }
  m.tokens_per_second = spread(rates);
  return m;
}

}  // namespace

void bench_speculation(const SpeculationBenchOptions& o, const ModelOptions& model_options, OpenedModel& model,
                       int64_t n_gen, int repetitions) {
  ModelRunner& runner = *model.runner;
  const Speculation speculation = open_speculation(o.speculation, model_options, model, greedy_sampling());
  const std::vector<int32_t> prompt = encode_completion(*model.tokenizer, o.prompt).tokens;
  const int64_t vocab = runner.config().vocab_size;
  // The plain runs first: each generator trusts the cache to hold what it left there.
  SpeculativeOrPlainGenerator plain(runner, *model.tokenizer, nullptr, 0);
  const Measured without = measure(plain, prompt, vocab, n_gen, repetitions);
  SpeculativeOrPlainGenerator speculative(runner, *model.tokenizer, speculation.source(), o.speculation.draft_max,
                                          speculation.tree_tokens());
  const Measured with = measure(speculative, prompt, vocab, n_gen, repetitions);

  const SpeculationStats& s = with.speculation;
  const std::string draft = o.speculation.source_flag() + (o.speculation.draft_model.empty() ? "" : " " + o.speculation.draft_model) +
                            (speculation.tree_tokens() > 0 ? fmt::format(", tree {}", speculation.tree_tokens()) : "");
  fmt::print("| model | backend | test | draft | tok/s | tok/s without | speedup | acceptance | tokens/pass |\n"
             "|---|---|---|---|---|---|---|---|---|\n");
  fmt::print("| {} | {} | tg{} after {} | {}, max {} | {:.1f} ± {:.1f} | {:.1f} ± {:.1f} | {:.2f} | {:.1f}% | {:.2f} |\n",
             model.file->header().get_string("general.name", std::string("?")), runner.description(), n_gen,
             prompt.size(), draft, o.speculation.draft_max, with.tokens_per_second.mean, with.tokens_per_second.stdev,
             without.tokens_per_second.mean, without.tokens_per_second.stdev,
             with.tokens_per_second.mean / without.tokens_per_second.mean, 100.0 * s.acceptance(), s.tokens_per_pass());
}

}  // namespace nt::cli
