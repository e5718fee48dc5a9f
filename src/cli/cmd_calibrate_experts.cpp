// `ntransformer calibrate-experts -m MODEL -f TEXT [-o COUNTS.json] [-c CTX] [--chunks N]`:
// counts how often each layer's router chooses each expert over a text and
// writes the counts that --expert-counts reads (engine/expert_calibration.h).
#include <fmt/core.h>

#include <algorithm>
#include <functional>

#include "cli/calibration_command.h"
#include "cli/commands.h"
#include "core/progress.h"
#include "engine/expert_calibration.h"

namespace nt::cli {
namespace {

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

void calibrate(const CalibrationOptions& o) {
  const CalibrationInput in = load_calibration(o);
  ModelRunner& runner = *in.loaded.runner;
  ProgressLine progress("counting expert routing", 0, 10);
  const ExpertCounts counts = count_expert_routing(
      runner, model_identity(*in.loaded.file, runner.config().n_layers), in.tokens, in.n_ctx, in.bos, o.chunks,
      o.text_path,
      [&](int64_t done, int64_t total) { progress.update(fmt::format("window {} of {} ({} tokens each)", done, total, in.n_ctx)); });
  progress.finish();
  const std::string out = calibration_output(o, in.loaded, ".experts.json");
  write_expert_counts(counts, out);
  const size_t eighth = size_t(std::max<int64_t>(1, counts.experts / 8));
  fmt::print("| layer | the most chosen expert | share of choices | share of the top {} |\n|---|---|---|---|\n", eighth);
  for (size_t l = 0; l < counts.counts.size(); ++l) {
    const auto& c = counts.counts[l];
    const auto most = std::max_element(c.begin(), c.end()) - c.begin();
    fmt::print("| {} | {} | {:.3f} | {:.3f} |\n", l, most, top_share(c, 1), top_share(c, eighth));
  }
  fmt::print(stderr, "{} tokens in {} windows of up to {}; expert counts written to {}\n", counts.tokens, counts.windows,
             in.n_ctx, out);
}

}  // namespace

void add_calibrate_experts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate-experts",
      "Count per layer how often the router chooses each expert of a mixture of experts over a text, and write the "
      "counts --expert-counts reads (the GPU then starts with the most chosen experts in VRAM, and plan predicts its hits)");
  static CalibrationOptions o;
  o.model.device = "cpu";  // the CPU backend reports each layer's routing
  add_calibration_options(*cmd, o, "Text to count the routing over: what the model will mostly read",
                          "Counts to write (default: MODEL's file name with .experts.json)");
  cmd->callback([] { calibrate(o); });
}

}  // namespace nt::cli
