// `ntransformer run -m MODEL -p PROMPT -n N`: one generation, streamed, then speed.
#include <fmt/core.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/generator.h"
#include "engine/prompts.h"

namespace nt::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string prompt = "Write a short poem about the sea.";
  std::string system;
  int64_t n_predict = 256;
  bool raw = false;
  std::string chat_template;
  std::vector<std::string> stop;
};

void print_stats(const GenerationStats& s) {
  fmt::print(stderr, "\n\nprefill: {} tokens in {:.3f} s ({:.1f} tok/s){}\n", s.prompt_tokens - s.reused_tokens,
             s.prefill_seconds, s.prefill_tokens_per_second(),
             s.reused_tokens ? fmt::format(", {} reused from cache", s.reused_tokens) : "");
  fmt::print(stderr, "decode:  {} tokens in {:.3f} s ({:.1f} tok/s), stopped by {}\n", s.generated_tokens,
             s.decode_seconds, s.decode_tokens_per_second(), stop_reason_name(s.stop));
}

void run(const RunOptions& o) {
  auto loaded = load_model(o.model);
  const Tokenizer& tokenizer = *loaded.tokenizer;
  for (const auto& w : tokenizer.warnings()) fmt::print(stderr, "warning: {}\n", w);

  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.stop_strings = o.stop;
  EncodedPrompt prompt;
  const bool use_template = !o.raw && (!tokenizer.vocab().chat_template().empty() || !o.chat_template.empty());
  if (use_template) {
    const auto chat = ChatTemplate::for_tokenizer(tokenizer, o.chat_template);
    if (!chat.warning().empty()) fmt::print(stderr, "warning: {}\n", chat.warning());
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    prompt = encode_conversation(tokenizer, chat, messages);
  } else {
    prompt = encode_completion(tokenizer, o.prompt);
    // Echo the prompt only once it is known to fit.
    if (int64_t(prompt.tokens.size()) <= loaded.runner->context_size()) fmt::print("{}", o.prompt);
  }
  gen.stop_tokens = prompt.stop_tokens;

  Sampler sampler(o.sampling, loaded.runner->config().vocab_size);
  Generator generator(*loaded.runner, tokenizer);
  const auto stats = generator.generate(prompt.tokens, sampler, gen, [](std::string_view text) {
    fmt::print("{}", text);
    std::fflush(stdout);
  });
  print_stats(stats);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt (chat-formatted when the model has a template)");
  static RunOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  cmd->add_option("-p,--prompt", o.prompt, "Prompt text")->capture_default_str();
  cmd->add_option("-s,--system", o.system, "System prompt (chat models)");
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens to generate at most")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--raw", o.raw, "Plain completion: do not apply the chat template");
  cmd->add_option("--chat-template", o.chat_template, "Override the chat template: chatml, llama3, llama2, plain");
  cmd->add_option("--stop", o.stop, "Stop string (repeatable)");
  cmd->callback([] { run(o); });
}

}  // namespace nt::cli
