// `ntransformer chat`: an interactive conversation that keeps its history;
// each turn reuses the KV cache of everything before it.
#include <fmt/core.h>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/speculation_options.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace nt::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string system;
  int64_t n_predict = 512;
  std::string chat_template;
  SpeculationOptions speculation;
};

void chat(const ChatOptions& o) {
  check_speculation_options(o.speculation);
  auto loaded = load_target_model(o.model, o.speculation);
  const Speculation speculation(o.speculation, o.model, loaded, o.sampling);
  const Tokenizer& tokenizer = *loaded.tokenizer;
  const auto tmpl = ChatTemplate::for_tokenizer(tokenizer, o.chat_template);
  if (!tmpl.warning().empty()) fmt::print(stderr, "warning: {}\n", tmpl.warning());
  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.stop_tokens = chat_stop_tokens(tokenizer, tmpl);
  Sampler sampler(o.sampling, loaded.runner->config().vocab_size);
  SpeculativeOrPlainGenerator generator(*loaded.runner, tokenizer, speculation.source(), o.speculation.draft_max,
                                        speculation.tree_tokens());

  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  fmt::print(stderr, "chat template: {}. Type a message; /reset clears the history, /exit or Ctrl-D quits.\n", tmpl.name());
  std::string line;
  while (true) {
    fmt::print("\n> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      history.resize(o.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    const auto prompt = encode_chat(tokenizer, tmpl, history, true);
    std::string reply;
    SpeculativeStats stats;
    try {
      stats = generator.generate(prompt, sampler, gen, [&](std::string_view text) {
        reply += text;
        fmt::print("{}", text);
        std::fflush(stdout);
      });
    } catch (const Error& e) {
      // A full context ends the conversation's growth, not the program.
      fmt::print(stderr, "\nerror: {}\n", e.what());
      history.pop_back();
      continue;
    }
    history.push_back({"assistant", reply});
    const GenerationStats& g = stats.generation;
    fmt::print(stderr, "\n[{} tokens, {:.1f} tok/s; prompt {} new + {} cached{}]\n", g.generated_tokens,
               g.decode_tokens_per_second(), g.prompt_tokens - g.reused_tokens, g.reused_tokens,
               generator.speculates() ? "; " + speculation_summary(stats.speculation) : "");
  }
  fmt::print("\n");
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Interactive chat that keeps the conversation history");
  static ChatOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  cmd->add_option("-s,--system", o.system, "System prompt");
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens per reply at most")->capture_default_str();
  cmd->add_option("--chat-template", o.chat_template, "Override the chat template: chatml, llama3, llama2, plain");
  add_speculation_options(*cmd, o.speculation);
  cmd->callback([] { chat(o); });
}

}  // namespace nt::cli
