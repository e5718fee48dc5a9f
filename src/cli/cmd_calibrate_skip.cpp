// `ntransformer calibrate-skip -m MODEL -f TEXT [-o SKIP.json] [-c CTX] [--chunks N]`:
// measures how much each layer changes the residual stream over a text and
// writes the skip list that --layer-skip reads (engine/layer_skip.h).
#include <fmt/core.h>

#include "cli/calibration_command.h"
#include "cli/commands.h"
#include "core/progress.h"
#include "engine/layer_skip.h"
#include "engine/skip_calibration.h"

namespace nt::cli {
namespace {

void calibrate(const CalibrationOptions& o) {
  const CalibrationInput in = load_calibration(o);
  ModelRunner& runner = *in.loaded.runner;
  ProgressLine progress("calibrating layer skip", 0, 10);
  const LayerSimilarity measured =
      measure_layer_similarity(runner, in.tokens, in.n_ctx, in.bos, o.chunks, [&](int64_t done, int64_t total) {
        progress.update(fmt::format("window {} of {} ({} tokens each)", done, total, in.n_ctx));
      });
  progress.finish();

  const int64_t n_layers = runner.config().n_layers;
  const SkipList list = make_skip_list(model_identity(*in.loaded.file, n_layers), measured, o.text_path, in.n_ctx);
  const std::string out = calibration_output(o, in.loaded, ".skip.json");
  write_skip_list(list, out);
  fmt::print("| rank | layer | cosine(input, output) |\n|---|---|---|\n");
  for (size_t r = 0; r < list.ranked.size(); ++r) {
    fmt::print("| {} | {} | {:.6f} |\n", r + 1, list.ranked[r], list.similarity[size_t(list.ranked[r])]);
  }
  fmt::print(stderr, "{} tokens in {} windows of up to {}; skip list written to {}\n", measured.tokens,
             measured.windows, in.n_ctx, out);
}

}  // namespace

void add_calibrate_skip_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate-skip",
      "Measure per layer the cosine similarity of its input and output hidden states over a text, and write the "
      "skip list (most skippable layers first) for --layer-skip");
  static CalibrationOptions o;
  add_calibration_options(*cmd, o, "Text to calibrate on (keep another one held out to measure perplexity)",
                          "Skip list to write (default: MODEL's file name with .skip.json)");
  cmd->callback([] { calibrate(o); });
}

}  // namespace nt::cli
