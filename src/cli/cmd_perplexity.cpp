// `ntransformer perplexity -m MODEL -f TEXT [-c CTX]`
#include <fmt/core.h>

#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/error.h"
#include "engine/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {

void add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text file (non-overlapping windows, second half scored)");
  static ModelOptions model;
  static std::string text_path;
  static int64_t n_ctx = 512;
  add_model_options(*cmd, model);
  cmd->add_option("-f,--file", text_path, "Text file")->required()->check(CLI::ExistingFile);
  cmd->remove_option(cmd->get_option("-c"));
  cmd->add_option("-c,--ctx-size", n_ctx, "Window length in tokens")->capture_default_str();
  cmd->callback([] {
    std::ifstream in(text_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    ModelOptions opts = model;
    opts.context = n_ctx;
    auto loaded = load_model(opts);
    const Tokenizer& tokenizer = *loaded.tokenizer;
    const auto tokens = tokenizer.encode(text.str(), true, false);
    fmt::print(stderr, "{} tokens, {} windows of {}\n", tokens.size(), int64_t(tokens.size()) / n_ctx, n_ctx);
    const auto r = perplexity(*loaded.runner, tokens, n_ctx, tokenizer.vocab().add_bos() ? tokenizer.vocab().bos() : -1,
                              [](int64_t w, double ppl) { fmt::print(stderr, "[{}] {:.4f}\n", w + 1, ppl); });
    fmt::print("PPL = {:.4f} +/- {:.4f} ({} tokens scored in {} windows of {})\n", r.perplexity, r.standard_error,
               r.scored_tokens, r.windows, n_ctx);
  });
}

}  // namespace nt::cli
