// `ntransformer bench -m MODEL [-t N,...] [-p 128,...] [-n 64,...] [-r 3]`: prefill and
// decode speed, and the bandwidth decode achieves: weights alone, and weights
// plus the KV cache entries each step reads (every visible key's K and V).
// Each test runs once uncounted, then -r times; tok/s is their mean ± standard
// deviation, as llama-bench reports it. With -npl, the batched mode of
// cli/bench_batched.h instead; with a draft source, a speculation table
// after (cli/bench_speculation.h).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/bench_batched.h"
#include "cli/bench_ceiling.h"
#include "cli/bench_pass_cost.h"
#include "cli/bench_speculation.h"
#include "cli/commands.h"
#include "cli/layer_skip_options.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/repetitions.h"

namespace nt::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  // Lists, as llama-bench takes them: every combination is a row.
  std::vector<int> threads = {0};
  std::vector<int64_t> n_prompt = {128};
  std::vector<int64_t> n_gen = {64};
  std::vector<int64_t> depths = {0};  // decode starts after this many cached tokens
  int repetitions = 3;
  std::vector<int64_t> pass_tokens;  // --pass-tokens: one pass of each size, timed
  BatchedBenchOptions batched;
  SpeculationBenchOptions speculative;  // with a draft source: a table with and without speculation
  LayerSkipOptions layer_skip;
};

// Per-repetition speeds from per-repetition seconds for `tokens` tokens.
Spread tokens_per_second(const std::vector<double>& seconds, int64_t tokens) {
  std::vector<double> rates;
  for (const double s : seconds) rates.push_back(double(tokens) / s);
  return spread(rates);
}

// Token ids spread over the vocabulary: real-looking work without a tokenizer.
std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
  return ids;
}

void bench_many_sequences(const BenchOptions& o) {
  check_batched_bench(o.batched);
  ModelOptions mo = o.model;
  if (mo.context == 0) mo.context = o.batched.context();
  mo.sequences = o.batched.sequences();
  auto loaded = load_model(mo);
  apply_layer_skip(o.layer_skip, loaded);
  bench_batched(*loaded.runner, loaded.file->header().get_string("general.name", std::string("?")), o.batched, loaded.gpus,
                mo.threads);
}

// The rows of one thread count; false when Ctrl-C cut them short.
bool bench_threads(const BenchOptions& o, int threads) {
  const bool speculates = o.speculative.speculation.enabled();
  ModelOptions mo = o.model;
  mo.threads = threads;
  const int64_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  const int64_t max_prompt = *std::max_element(o.n_prompt.begin(), o.n_prompt.end());
  const int64_t max_gen = *std::max_element(o.n_gen.begin(), o.n_gen.end());
  // Speculation's prompt is text of unknown length: it gets the model's default context.
  const int64_t longest_pass = o.pass_tokens.empty() ? 0 : *std::max_element(o.pass_tokens.begin(), o.pass_tokens.end());
  if (mo.context == 0 && !speculates) mo.context = std::max({max_prompt, max_depth + max_gen, longest_pass, int64_t(8)}) + 1;
  auto loaded = load_target_model(mo, o.speculative.speculation);
  apply_layer_skip(o.layer_skip, loaded);
  auto& runner = *loaded.runner;
  check_pass_tokens(o.pass_tokens, runner.context_size());
  const int64_t vocab = runner.config().vocab_size;
  const auto prompt = bench_tokens(std::max({max_prompt, max_depth, int64_t(8)}), vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));

  const double bytes = double(runner.weight_bytes_per_token());
  const auto name = loaded.file->header().get_string("general.name", std::string("?"));
  // A cached mixture of experts' traffic in each test (its warm-up run too), said after the table.
  std::vector<std::string> expert_lines;
  ExpertTraffic before = runner.expert_traffic();
  const auto note_experts = [&](const std::string& test, int64_t tokens) {
    const ExpertTraffic now = runner.expert_traffic();
    const uint64_t uses = now.uses - before.uses;
    if (uses > 0) {
      expert_lines.push_back(fmt::format(
          "experts in {}: {:.1f}% of {} uses in VRAM, {:.1f}% on the CPU, {:.1f} MiB a token copied in", test,
          100.0 * double(now.in_vram - before.in_vram) / double(uses), uses,
          100.0 * double(now.on_cpu - before.on_cpu) / double(uses),
          double(now.copied_bytes - before.copied_bytes) / double(tokens * (o.repetitions + 1)) / double(1 << 20)));
    }
    before = now;
  };
  for (const int64_t n_prompt : o.n_prompt) {
    if (n_prompt <= 0) continue;
    if (interrupt_requested()) return false;
    const auto seconds = time_repetitions(o.repetitions, [&] {
      runner.forward({prompt.data(), size_t(n_prompt)}, 0, logits.data(), false);
    });
    const Spread ts = tokens_per_second(seconds, n_prompt);
    // Prefill reads the weights once for the whole prompt: its GB/s is not a roofline figure.
    fmt::print("| {} | {} | pp{} | {:.1f} ± {:.1f} | {:.3f} | - | - |\n", name, runner.description(), n_prompt, ts.mean,
               ts.stdev, 1e3 * spread(seconds).mean / double(n_prompt));
    note_experts(fmt::format("pp{}", n_prompt), n_prompt);
    std::fflush(stdout);  // each row as it is measured, into a pipe too
  }
  DecodeStep last_step;
  for (const int64_t n_gen : o.n_gen) {
    for (const int64_t depth : o.depths) {
      if (n_gen <= 0) break;
      if (interrupt_requested()) return false;
      if (depth > 0) runner.forward({prompt.data(), size_t(depth)}, 0, logits.data(), false);
      before = runner.expert_traffic();  // the depth's prompt is not the test's
      const auto seconds = time_repetitions(o.repetitions, [&] {
        // What greedy generation costs: each step's pick is the next step's input.
        runner.decode_greedy(prompt[0], depth, n_gen, [](int32_t) { return true; });
      });
      const Spread ts = tokens_per_second(seconds, n_gen);
      const double t = spread(seconds).mean / double(n_gen);
      // Step i sees depth + i + 1 keys: on average depth + (n_gen + 1) / 2.
      const double kv_bytes = double(runner.kv_bytes_per_position()) * (double(depth) + double(n_gen + 1) / 2.0);
      fmt::print("| {} | {} | tg{} @ {} | {:.1f} ± {:.1f} | {:.3f} | {:.1f} | {:.1f} |\n", name, runner.description(),
                 n_gen, depth, ts.mean, ts.stdev, 1e3 * t, bytes / t / 1e9, (bytes + kv_bytes) / t / 1e9);
      last_step = {t, bytes + kv_bytes};
      note_experts(fmt::format("tg{} @ {}", n_gen, depth), n_gen);
      std::fflush(stdout);
    }
  }
  if (interrupt_requested()) return false;
  for (const std::string& line : expert_lines) fmt::print("{}\n", line);
  print_decode_ceiling(runner, *loaded.file, loaded.gpus, last_step, mo.threads);
  if (!o.pass_tokens.empty()) bench_pass_cost(runner, name, o.pass_tokens, o.repetitions);
  if (speculates && max_gen > 0) bench_speculation(o.speculative, mo, loaded, max_gen, o.repetitions);
  return true;
}

void bench(const BenchOptions& o) {
  const bool speculates = o.speculative.speculation.enabled();
  if (o.batched.enabled()) {
    refuse_speculation_options(o.speculative.speculation, "bench -npl", "the batched mode decodes many sequences");
    if (o.threads.size() > 1) fail("bench -npl with -t {}: the batched mode takes one thread count", fmt::join(o.threads, ","));
    BenchOptions one = o;
    one.model.threads = o.threads.front();
    return bench_many_sequences(one);
  }
  check_speculation_options(o.speculative.speculation);
  check_layer_skip_flags(o.layer_skip);
  if (speculates && o.layer_skip.enabled()) {
    fail("bench --layer-skip with {}: the speculation table measures the full model; drop one", o.speculative.speculation.source_flag());
  }
  // Ctrl-C ends the test running then; the rows measured so far stay printed.
  const InterruptScope interrupts;
  fmt::print("| model | backend | test | tok/s | ms/token | weight GB/s | weight + KV GB/s |\n|---|---|---|---|---|---|---|\n");
  for (const int threads : o.threads) {
    if (!bench_threads(o, threads)) {
      fmt::print(stderr, "bench: interrupted; the rows above are the tests finished\n");
      throw ExitCode(130);
    }
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed: one uncounted warm-up run, then the mean ± standard deviation of the repetitions");
  static BenchOptions o;
  add_model_options(*cmd, o.model);
  // Lists here, as llama-bench takes them: a table row for each.
  cmd->remove_option(cmd->get_option("-t"));
  cmd->add_option("-t,--threads", o.threads, "CPU threads, a comma list (0: physical cores); the model loads once for each")
      ->delimiter(',')
      ->capture_default_str()
      ->transform(at_most_hardware_threads());
  cmd->add_option("-p,--n-prompt", o.n_prompt, "Prompt tokens for the prefill test, a comma list (0: skip)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(within(limits::kPromptTokens));
  cmd->add_option("-n,--n-gen", o.n_gen, "Tokens for the decode test, a comma list (0: skip)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(within(limits::kPromptTokens));
  cmd->add_option("-d,--depth", o.depths, "Cached tokens before decode (repeatable)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o.repetitions, "Timed repetitions of each test, after one uncounted warm-up")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--npp", o.batched.prompt_tokens, "Batched mode: prompt tokens per sequence, a comma list (also -npp)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--ntg", o.batched.generated_tokens, "Batched mode: generated tokens per sequence, a comma list (also -ntg)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--npl", o.batched.parallel, "Batched mode: parallel sequences, a comma list, e.g. 1,4,16,64 (also -npl)")
      ->delimiter(',')
      ->check(positive());
  cmd->add_flag("--batch-invariant", o.batched.batch_invariant,
                "Batched mode: every sequence computed as alone (batch --batch-invariant): prompts prefilled apart, "
                "one-token kernels for each sequence's steps");
  cmd->add_option("--pass-tokens", o.pass_tokens,
                  "Also time one forward pass of each of these token counts (a comma list, e.g. 1,2,4,8,...,256): what "
                  "a speculative verification pass costs against a pass of one token")
      ->delimiter(',')
      ->check(positive());
  add_speculation_bench_options(*cmd, o.speculative);
  add_layer_skip_options(*cmd, o.layer_skip);
  cmd->callback([] { bench(o); });
}

}  // namespace nt::cli
