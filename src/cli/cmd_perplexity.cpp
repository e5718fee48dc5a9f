// `ntransformer perplexity -m MODEL -f TEXT [-c CTX]`: -c is the context, and
// the text is scored in windows that fill it.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/layer_skip_options.h"
#include "cli/model_options.h"
#include "core/interrupt.h"
#include "core/read_file.h"
#include "engine/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {

void add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a text file: windows of the context length, each from BOS, second half scored");
  static ModelOptions model;
  static std::string text_path;
  static LayerSkipOptions layer_skip;
  model.context = 512;  // the usual perplexity context, as llama-perplexity's default
  add_model_options(*cmd, model);
  // -c is the context here as everywhere; each window fills it, as in llama-perplexity.
  cmd->get_option("-c")
      ->description("Context length in tokens, which is also each scored window's (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd->add_option("-f,--file", text_path, "Text file")->required()->check(CLI::ExistingFile);
  add_layer_skip_options(*cmd, layer_skip);
  cmd->callback([] {
    check_layer_skip_flags(layer_skip);
    const std::string text = read_file(text_path);
    auto loaded = load_model(model);
    apply_layer_skip(layer_skip, loaded);
    const int64_t n_ctx = loaded.runner->context_size();
    const Tokenizer& tokenizer = *loaded.tokenizer;
    const auto tokens = tokenizer.encode(text, true, false);
    fmt::print(stderr, "{} tokens, {} windows of {}\n", tokens.size(), int64_t(tokens.size()) / n_ctx, n_ctx);
    // Ctrl-C after a window: the perplexity of the windows scored so far.
    const InterruptScope interrupts;
    const auto r = perplexity(*loaded.runner, tokens, n_ctx, tokenizer.vocab().add_bos() ? tokenizer.vocab().bos() : -1,
                              [](int64_t w, double ppl) {
                                fmt::print(stderr, "[{}] {:.4f}\n", w + 1, ppl);
                                return !interrupt_requested();
                              });
    const int64_t all_windows = int64_t(tokens.size()) / n_ctx;
    fmt::print("PPL = {:.4f} +/- {:.4f} ({} tokens scored in {} windows of {}{})\n", r.perplexity, r.standard_error,
               r.scored_tokens, r.windows, n_ctx,
               r.windows < all_windows ? fmt::format("; interrupted, {} windows not scored", all_windows - r.windows) : "");
    if (r.windows < all_windows) throw ExitCode(130);
  });
}

}  // namespace nt::cli
