// `ntransformer chat`: an interactive conversation that keeps its history;
// each turn reuses the KV cache of everything before it. When the history
// outgrows the context, the oldest turns go (the system prompt stays), as
// llama-cli's context shift does. Ctrl-C stops a reply and keeps the
// conversation; at the prompt it quits.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/line_input.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "cli/speculation_options.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "tokenizer/chat_template.h"

namespace nt::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string system;
  int64_t n_predict = 512;
  std::string chat_template;
  std::string chat_template_file;
  SpeculationOptions speculation;
  bool ignore_eos = false;
};

constexpr std::string_view kHelp =
    "/help   this list\n"
    "/reset  forget the conversation (the system prompt stays)\n"
    "/exit   quit (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C while the model replies stops the reply and keeps it.";

// The conversation as it fits: the oldest turns after the system prompt go
// until the prompt leaves `reply_room` positions. Returns how many messages
// went; fails, leaving the history as it was, when the newest message alone
// does not fit.
size_t fit_history(std::vector<ChatMessage>& conversation, bool has_system, const Tokenizer& tokenizer,
                   const ChatTemplate& chat, int64_t context, int64_t reply_room, std::vector<int32_t>& prompt) {
  const size_t first_turn = has_system ? 1 : 0;
  std::vector<ChatMessage> history = conversation;
  size_t dropped = 0;
  for (;;) {
    prompt = encode_chat(tokenizer, chat, history, true);
    if (int64_t(prompt.size()) + reply_room <= context) {
      conversation = std::move(history);
      return dropped;
    }
    if (history.size() - first_turn <= 1) {
      fail("the message makes a prompt of {} tokens, and the context holds {} with {} kept for the reply (raise -c)",
           prompt.size(), context, reply_room);
    }
    // A user turn and the reply to it go together, so the history still alternates.
    const size_t turn = history[first_turn + 1].role == "assistant" ? 2 : 1;
    history.erase(history.begin() + ptrdiff_t(first_turn), history.begin() + ptrdiff_t(first_turn + turn));
    dropped += turn;
  }
}

// Why a reply ended early, or nothing when it ended by itself.
std::string cut_note(StopReason stop, int64_t n_predict, int64_t context) {
  switch (stop) {
    case StopReason::TokenLimit: return fmt::format("reply cut at -n {} tokens", n_predict);
    case StopReason::ContextFull:
      return fmt::format("reply cut: the context of {} tokens is full; the oldest turns go before the next reply", context);
    case StopReason::Interrupted: return "reply stopped by Ctrl-C";
    default: return {};
  }
}

void chat(const ChatOptions& o) {
  check_speculation_options(o.speculation);
  auto loaded = load_target_model(o.model, o.speculation);
  const Speculation speculation = open_speculation(o.speculation, o.model, loaded, o.sampling);
  const Tokenizer& tokenizer = *loaded.tokenizer;
  const auto tmpl = ChatTemplate::for_tokenizer(tokenizer, o.chat_template, o.chat_template_file);
  if (!tmpl.warning().empty()) fmt::print(stderr, "warning: {}\n", tmpl.warning());
  const int64_t context = loaded.runner->context_size();
  GenerationOptions gen;
  gen.max_tokens = o.n_predict < 0 ? kNoTokenLimit : o.n_predict;
  if (!o.ignore_eos) gen.stop_tokens = chat_stop_tokens(tokenizer, tmpl);
  gen.interrupted = interrupt_requested;
  // Room kept for a reply when old turns must go: -n, but never more than half the context.
  const int64_t reply_room = std::min(o.n_predict < 0 ? context : o.n_predict, context / 2);
  announce_seed(o.sampling);
  Sampler sampler(o.sampling, loaded.runner->config().vocab_size);
  SpeculativeOrPlainGenerator generator(*loaded.runner, tokenizer, speculation.source(), o.speculation.draft_max,
                                        speculation.tree_tokens());

  const bool has_system = !o.system.empty();
  std::vector<ChatMessage> history;
  if (has_system) history.push_back({"system", o.system});
  fmt::print(stderr, "chat template: {}. Type a message; /help lists the commands.\n", tmpl.description());
  LineInput input("");
  const InterruptScope interrupts;
  while (true) {
    fmt::print("\n> ");
    std::fflush(stdout);
    const std::optional<std::string> line = input.next(true);
    if (!line || *line == "/exit" || interrupt_requested()) break;
    if (line->find_first_not_of(" \t") == std::string::npos) continue;
    if (*line == "/help") {
      fmt::print("{}\n", kHelp);
      continue;
    }
    if (*line == "/reset") {
      history.resize(has_system ? 1 : 0);
      fmt::print("[conversation cleared{}]\n", has_system ? "; the system prompt stays" : "");
      continue;
    }
    if (line->front() == '/' && line->find(' ') == std::string::npos) {
      fmt::print("[unknown command {}; /help lists the commands]\n", *line);
      continue;
    }
    history.push_back({"user", *line});
    std::vector<int32_t> prompt;
    try {
      const size_t dropped = fit_history(history, has_system, tokenizer, tmpl, context, reply_room, prompt);
      if (dropped > 0) {
        fmt::print(stderr, "[context: the oldest {} message{} went to fit the context of {} tokens{}]\n", dropped,
                   dropped > 1 ? "s" : "", context, has_system ? "; the system prompt stays" : "");
      }
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      history.pop_back();
      continue;
    }
    std::string reply;
    SpeculativeStats stats;
    try {
      stats = generator.generate(prompt, sampler, gen, [&](std::string_view text) {
        reply += text;
        fmt::print("{}", text);
        std::fflush(stdout);
      });
    } catch (const Error& e) {
      fmt::print(stderr, "\nerror: {}\n", e.what());
      history.pop_back();
      continue;
    }
    clear_interrupt();  // a Ctrl-C stopped this reply only
    history.push_back({"assistant", reply});
    const GenerationStats& g = stats.generation;
    const std::string cut = cut_note(g.stop, o.n_predict, context);
    fmt::print(stderr, "\n[{}{} tokens, {}; prompt {} new + {} cached{}]\n", cut.empty() ? "" : cut + "; ",
               g.generated_tokens, rate_text(double(g.decode_tokens), g.decode_seconds), g.prompt_tokens - g.reused_tokens,
               g.reused_tokens, generator.speculates() ? "; " + speculation_summary(stats.speculation) : "");
  }
  fmt::print("\n");
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Interactive chat that keeps the conversation history");
  static ChatOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  cmd->add_option("--system-prompt,--system", o.system, "System prompt (also -sys)");
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens per reply at most (-1: until end of text or a full context)")
      ->capture_default_str()
      ->check(within(limits::kMaxTokens));
  cmd->add_option("--chat-template", o.chat_template, "Use a built-in chat format instead of the model's template: chatml, llama3, llama2, gemma, plain");
  cmd->add_option("--chat-template-file", o.chat_template_file, "Use this Jinja chat template instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Replies go on past the end-of-turn token, up to -n or a full context");
  add_speculation_options(*cmd, o.speculation);
  cmd->callback([] { chat(o); });
}

}  // namespace nt::cli
