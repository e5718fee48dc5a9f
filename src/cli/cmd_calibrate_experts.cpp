// `ntransformer calibrate-experts -m MODEL -f TEXT [-o COUNTS.json] [-c CTX] [--chunks N]`:
// counts how often each layer's router chooses each expert over a text and
// writes the counts that --expert-counts reads (engine/expert_calibration.h).
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/read_file.h"
#include "engine/expert_calibration.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {
namespace {

struct CalibrateOptions {
  ModelOptions model;
  std::string text_path;
  std::string out_path;  // empty: MODEL's file name with .experts.json, in the current directory
  int64_t chunks = 0;
};

// The share of a layer's choices that its `top` most chosen experts take.
double top_share(std::vector<uint64_t> counts, size_t top) {
  std::sort(counts.begin(), counts.end(), std::greater<>());
  uint64_t all = 0, first = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    all += counts[e];
    if (e < top) first += counts[e];
  }
  return all ? double(first) / double(all) : 0.0;
}

void calibrate(const CalibrateOptions& o) {
  const std::string text = read_file(o.text_path);
  if (text.empty()) fail("-f {}: the file is empty; calibrate on a text of at least a few hundred tokens", o.text_path);
  auto loaded = load_model(o.model);
  const Tokenizer& tokenizer = *loaded.tokenizer;
  const auto tokens = tokenizer.encode(text, true, false);
  const int64_t n_ctx = loaded.runner->context_size();
  const int32_t bos = tokenizer.vocab().add_bos() ? tokenizer.vocab().bos() : -1;
  const int64_t n_layers = loaded.runner->config().n_layers;
  ProgressLine progress("counting expert routing", 0, 10);
  const ExpertCounts counts = count_expert_routing(
      *loaded.runner, model_identity(*loaded.file, n_layers), tokens, n_ctx, bos, o.chunks, o.text_path,
      [&](int64_t done, int64_t total) { progress.update(fmt::format("window {} of {} ({} tokens each)", done, total, n_ctx)); });
  progress.finish();
  const std::string out = o.out_path.empty()
                              ? std::filesystem::path(loaded.file->path()).stem().string() + ".experts.json"
                              : o.out_path;
  write_expert_counts(counts, out);
  const size_t eighth = size_t(std::max<int64_t>(1, counts.experts / 8));
  fmt::print("| layer | the most chosen expert | share of choices | share of the top {} |\n|---|---|---|---|\n", eighth);
  for (size_t l = 0; l < counts.counts.size(); ++l) {
    const auto& c = counts.counts[l];
    const auto most = std::max_element(c.begin(), c.end()) - c.begin();
    fmt::print("| {} | {} | {:.3f} | {:.3f} |\n", l, most, top_share(c, 1), top_share(c, eighth));
  }
  fmt::print(stderr, "{} tokens in {} windows of up to {}; expert counts written to {}\n", counts.tokens, counts.windows,
             n_ctx, out);
}

}  // namespace

void add_calibrate_experts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate-experts",
      "Count per layer how often the router chooses each expert of a mixture of experts over a text, and write the "
      "counts --expert-counts reads (the GPU then starts with the most chosen experts in VRAM, and plan predicts its hits)");
  static CalibrateOptions o;
  o.model.context = 512;
  o.model.device = "cpu";  // the CPU backend reports each layer's routing
  add_model_options(*cmd, o.model);
  cmd->get_option("-c")->description("Context length in tokens, which is also each window's (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd->add_option("-f,--file", o.text_path, "Text to count the routing over: what the model will mostly read")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o.out_path, "Counts to write (default: MODEL's file name with .experts.json)");
  cmd->add_option("--chunks", o.chunks, "Windows of the text to run at most (0: all)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->callback([] { calibrate(o); });
}

}  // namespace nt::cli
