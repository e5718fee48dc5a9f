// `ntransformer calibrate-skip -m MODEL -f TEXT [-o SKIP.json] [-c CTX] [--chunks N]`:
// measures how much each layer changes the residual stream over a text and
// writes the skip list that --layer-skip reads (engine/layer_skip.h).
#include <fmt/core.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/read_file.h"
#include "engine/layer_skip.h"
#include "engine/skip_calibration.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {
namespace {

struct CalibrateOptions {
  ModelOptions model;
  std::string text_path;
  std::string out_path;  // empty: MODEL's file name with .skip.json, in the current directory
  int64_t chunks = 0;
};

void calibrate(const CalibrateOptions& o) {
  const std::string text = read_file(o.text_path);
  if (text.empty()) fail("-f {}: the file is empty; calibrate on a text of at least a few hundred tokens", o.text_path);
  auto loaded = load_model(o.model);
  const Tokenizer& tokenizer = *loaded.tokenizer;
  const auto tokens = tokenizer.encode(text, true, false);
  const int64_t n_ctx = loaded.runner->context_size();
  const int32_t bos = tokenizer.vocab().add_bos() ? tokenizer.vocab().bos() : -1;
  if (int64_t(tokens.size()) < n_ctx) {
    fmt::print(stderr, "warning: -f {} is {} tokens, less than one window of {}: the ranking rests on little text "
               "(a longer text, or a smaller -c)\n", o.text_path, tokens.size(), n_ctx);
  }
  ProgressLine progress("calibrating layer skip", 0, 10);
  const LayerSimilarity measured =
      measure_layer_similarity(*loaded.runner, tokens, n_ctx, bos, o.chunks, [&](int64_t done, int64_t total) {
        progress.update(fmt::format("window {} of {} ({} tokens each)", done, total, n_ctx));
      });
  progress.finish();

  const int64_t n_layers = loaded.runner->config().n_layers;
  const SkipList list = make_skip_list(model_identity(*loaded.file, n_layers), measured, o.text_path, n_ctx);
  const std::string out = o.out_path.empty()
                              ? std::filesystem::path(loaded.file->path()).stem().string() + ".skip.json"
                              : o.out_path;
  write_skip_list(list, out);
  fmt::print("| rank | layer | cosine(input, output) |\n|---|---|---|\n");
  for (size_t r = 0; r < list.ranked.size(); ++r) {
    fmt::print("| {} | {} | {:.6f} |\n", r + 1, list.ranked[r], list.similarity[size_t(list.ranked[r])]);
  }
  fmt::print(stderr, "{} tokens in {} windows of up to {}; skip list written to {}\n", measured.tokens,
             measured.windows, n_ctx, out);
}

}  // namespace

void add_calibrate_skip_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate-skip",
      "Measure per layer the cosine similarity of its input and output hidden states over a text, and write the "
      "skip list (most skippable layers first) for --layer-skip");
  static CalibrateOptions o;
  o.model.context = 512;
  add_model_options(*cmd, o.model);
  cmd->get_option("-c")->description("Context length in tokens, which is also each window's (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd->add_option("-f,--file", o.text_path, "Text to calibrate on (keep another one held out to measure perplexity)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o.out_path, "Skip list to write (default: MODEL's file name with .skip.json)");
  cmd->add_option("--chunks", o.chunks, "Windows of the text to run at most (0: all)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->callback([] { calibrate(o); });
}

}  // namespace nt::cli
