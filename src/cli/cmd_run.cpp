// `ntransformer run -m MODEL -p PROMPT -n N`: one generation, streamed, then speed.
// For comparisons with other engines it also gives out the ids (--show-ids,
// --ids-out), the logits (--logits-out), and scores a reference continuation
// instead of generating (--teacher-ids).
#include <fmt/core.h>
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/id_list.h"
#include "cli/layer_skip_options.h"
#include "cli/logits_file.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "cli/speculation_options.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/output_file.h"
#include "core/read_file.h"
#include "engine/logit_rows.h"
#include "engine/prompts.h"
#include "engine/teacher_forcing.h"

namespace nt::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string prompt = "Write a short poem about the sea.";
  std::string prompt_file;
  std::string system;
  int64_t n_predict = 256;
  bool raw = false;
  bool display_prompt = true;
  bool ignore_eos = false;
  std::string chat_template;
  std::string chat_template_file;
  std::vector<std::string> stop;
  bool show_ids = false;
  std::string ids_out;
  std::string logits_out;
  bool all_logits = false;
  std::string teacher_ids;
  SpeculationOptions speculation;
  LayerSkipOptions layer_skip;
};

// Refuses flag combinations speculation does not support, naming the flag.
void check_speculation_flags(const RunOptions& o) {
  check_speculation_options(o.speculation);
  check_layer_skip_flags(o.layer_skip);
  if (o.speculation.draft_self_layers > 0 && o.layer_skip.enabled()) {
    fail("--draft-self {} with --layer-skip: the draft runs the first {} layers or the layers the skip list keeps; drop one",
         o.speculation.draft_self_layers, o.speculation.draft_self_layers);
  }
  if (o.speculation.enabled() && !o.teacher_ids.empty()) {
    fail("{} with --teacher-ids: teacher forcing generates nothing to draft for", o.speculation.source_flag());
  }
}

void print_stats(const GenerationStats& s, const SpeculationStats* spec) {
  fmt::print(stderr, "\nprefill: {} tokens in {:.3f} s ({}){}\n", s.prompt_tokens - s.reused_tokens,
             s.prefill_seconds, rate_text(double(s.prompt_tokens - s.reused_tokens), s.prefill_seconds),
             s.reused_tokens ? fmt::format(", {} reused from cache", s.reused_tokens) : "");
  fmt::print(stderr, "decode:  {} tokens in {:.3f} s ({}), stopped by {}\n", s.generated_tokens,
             s.decode_seconds, rate_text(double(s.decode_tokens), s.decode_seconds),
             s.stop == StopReason::Interrupted ? "Ctrl-C" : stop_reason_name(s.stop));
  if (spec) fmt::print(stderr, "{}\n", speculation_summary(*spec));
}

// A piece as a JSON string: quoted, escaped, split characters as U+FFFD.
std::string quoted(const std::string& bytes) {
  return nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Created before the work, so that a bad path fails at once.
std::optional<OutputFile> create_ids_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return std::optional<OutputFile>(std::in_place, path, "--ids-out");
}

void write_ids(const RunOptions& o, std::optional<OutputFile>& ids_file, const std::vector<int32_t>& prompt,
               const std::vector<int32_t>& generated) {
  if (o.show_ids) {
    fmt::print(stderr, "prompt ids: [{}]\ngenerated ids: [{}]\n", fmt::join(prompt, ", "), fmt::join(generated, ", "));
  }
  if (!ids_file) return;
  fmt::print(ids_file->stream(), "{{\"prompt\": [{}], \"generated\": [{}]}}\n", fmt::join(prompt, ", "),
             fmt::join(generated, ", "));
  ids_file->commit();
}

// Evaluates prompt + reference in one pass of the model: each position's logits
// go to the logits file (from `first_logits` on), and each reference token is
// scored against the row that predicts it. Prints a tab-separated table.
void evaluate(ModelRunner& runner, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
              const std::vector<int32_t>& reference, const RunOptions& o) {
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), reference.begin(), reference.end());
  const int64_t n = int64_t(tokens.size()), n_prompt = int64_t(prompt.size());
  if (n_prompt == 0) fail("empty prompt: --logits-out and --teacher-ids need at least one prompt token");
  if (n > runner.context_size()) {
    fail("{} tokens ({} of the prompt, {} of --teacher-ids) but the context holds {} (raise -c, up to the model's {})",
         n, n_prompt, reference.size(), runner.context_size(), runner.config().context_length);
  }
  const int64_t vocab = runner.config().vocab_size;
  const int64_t first_logits = o.all_logits ? 0 : n - 1;
  std::optional<LogitsFile> logits;
  if (!o.logits_out.empty()) logits.emplace(o.logits_out, n - first_logits, vocab, first_logits);
  const int64_t first_scored = n_prompt - 1;  // the last prompt position predicts reference[0]
  if (!reference.empty()) fmt::print("position\treference\ttop\tmargin\tgap\treference_piece\ttop_piece\n");
  int64_t agree = 0;
  float smallest_disagreeing = INFINITY;
  for_each_logit_row(runner, tokens, logits ? std::min(first_logits, first_scored) : first_scored,
                     [&](int64_t pos, std::span<const float> row) {
    if (logits && pos >= first_logits) logits->write_row(row);
    if (pos < first_scored || pos + 1 >= n) return;
    const ForcedStep s = score_step(row, tokens[size_t(pos + 1)]);
    fmt::print("{}\t{}\t{}\t{:.4f}\t{:.4f}\t{}\t{}\n", pos, s.reference, s.top, s.margin, s.gap,
               quoted(tokenizer.token_bytes(s.reference)), quoted(tokenizer.token_bytes(s.top)));
    if (s.top == s.reference) {
      ++agree;
    } else {
      smallest_disagreeing = std::min(smallest_disagreeing, s.margin);
    }
  });
  if (logits) logits->close();
  if (!reference.empty()) {
    fmt::print(stderr, "teacher forcing: our top token is the reference's at {} of {} positions{}\n", agree,
               reference.size(), agree == int64_t(reference.size()) ? ""
                   : fmt::format("; the smallest margin where they differ is {:.4f}", smallest_disagreeing));
  }
}

void run(const RunOptions& o) {
  check_speculation_flags(o);
  auto loaded = load_target_model(o.model, o.speculation);
  // With --draft-self the skip list shapes the draft alone (exact); otherwise every pass skips (lossy).
  if (!o.speculation.draft_self()) apply_layer_skip(o.layer_skip, loaded);
  const Speculation speculation = open_speculation(o.speculation, o.model, loaded, o.sampling, &o.layer_skip);  // a bad draft fails before any output
  const Tokenizer& tokenizer = *loaded.tokenizer;
  for (const auto& w : tokenizer.warnings()) fmt::print(stderr, "warning: {}\n", w);
  std::optional<OutputFile> ids_file = create_ids_file(o.ids_out);
  std::vector<int32_t> reference;
  if (!o.teacher_ids.empty()) {
    reference = read_id_list(o.teacher_ids, "--teacher-ids");
    check_ids_in_vocabulary(reference, loaded.runner->config().vocab_size, "--teacher-ids");
  }

  GenerationOptions gen;
  gen.max_tokens = o.n_predict < 0 ? kNoTokenLimit : o.n_predict;
  gen.stop_strings = o.stop;
  EncodedPrompt prompt;
  const bool use_template =
      !o.raw && (!tokenizer.vocab().chat_template().empty() || !o.chat_template.empty() || !o.chat_template_file.empty());
  if (use_template) {
    const auto chat = ChatTemplate::for_tokenizer(tokenizer, o.chat_template, o.chat_template_file);
    if (!chat.warning().empty()) fmt::print(stderr, "warning: {}\n", chat.warning());
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    prompt = encode_conversation(tokenizer, chat, messages);
  } else {
    prompt = encode_completion(tokenizer, o.prompt);
  }
  if (!o.ignore_eos) gen.stop_tokens = prompt.stop_tokens;

  // The logits and the teacher's scores come from their own pass over the prompt.
  const bool generating = reference.empty();
  if (!o.logits_out.empty() || !generating) evaluate(*loaded.runner, tokenizer, prompt.tokens, reference, o);
  if (!generating) {
    write_ids(o, ids_file, prompt.tokens, {});
    return;
  }
  // Echo a plain prompt only once it is known to fit.
  const bool echo = !use_template && o.display_prompt && int64_t(prompt.tokens.size()) <= loaded.runner->context_size();
  if (echo) fmt::print("{}", o.prompt);

  bool ends_with_newline = echo ? o.prompt.ends_with('\n') : true;
  const auto print_text = [&](std::string_view text) {
    fmt::print("{}", text);
    std::fflush(stdout);
    if (!text.empty()) ends_with_newline = text.back() == '\n';
  };
  ModelRunner& runner = *loaded.runner;
  announce_seed(o.sampling);
  Sampler sampler(o.sampling, runner.config().vocab_size);
  SpeculativeOrPlainGenerator generator(runner, tokenizer, speculation.source(), o.speculation.draft_max,
                                        speculation.tree_tokens());
  // Ctrl-C stops at the next token; the text so far and the statistics still print.
  const InterruptScope interrupts;
  gen.interrupted = interrupt_requested;
  const SpeculativeStats stats = generator.generate(prompt.tokens, sampler, gen, print_text);
  // A shell prompt after the text starts on a line of its own.
  if (!ends_with_newline && isatty(STDOUT_FILENO)) fmt::print("\n");
  std::fflush(stdout);
  print_stats(stats.generation, generator.speculates() ? &stats.speculation : nullptr);
  write_ids(o, ids_file, prompt.tokens, generator.generated());
  if (stats.generation.stop == StopReason::Interrupted) throw ExitCode(130);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt (chat-formatted when the model has a template)");
  static RunOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  auto* prompt = cmd->add_option("-p,--prompt", o.prompt, "Prompt text (default: a short poem about the sea)");
  cmd->add_option("-f,--file", o.prompt_file, "Prompt from a file, its whole content (instead of -p)")
      ->check(CLI::ExistingFile)
      ->excludes(prompt);
  cmd->add_option("--system-prompt,--system", o.system, "System prompt for chat models (also -sys)");
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens to generate at most (-1: until end of text or a full context)")
      ->capture_default_str()
      ->check(within(limits::kMaxTokens));
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Generate past the end-of-text token, up to -n or a full context");
  cmd->add_flag("--raw", o.raw, "Plain completion: do not apply the chat template");
  cmd->add_flag_callback("--no-display-prompt", [] { o.display_prompt = false; },
                         "With --raw (or a model without a template): do not echo the prompt before its continuation");
  cmd->add_option("--chat-template", o.chat_template, "Use a built-in chat format instead of the model's template: chatml, llama3, llama2, gemma, plain");
  cmd->add_option("--chat-template-file", o.chat_template_file, "Use this Jinja chat template instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--stop", o.stop, "Stop string (repeatable)");
  cmd->add_flag("--show-ids", o.show_ids, "After the run, print the prompt's and the generated token ids to stderr");
  cmd->add_option("--ids-out", o.ids_out,
                  "After the run, write the ids to this file as JSON: {\"prompt\": [...], \"generated\": [...]}");
  auto* logits = cmd->add_option("--logits-out", o.logits_out,
      "Write the logits of the prompt's last position (with --teacher-ids: of the last reference token) to this "
      "file: a JSON header line with the shape, then float32 rows");
  cmd->add_flag("--all-logits", o.all_logits, "--logits-out writes every position's logits, one row each")->needs(logits);
  cmd->add_option("--teacher-ids", o.teacher_ids,
      "Instead of generating, read these reference ids after the prompt (a file, or a list: 1,2,3 or [1, 2, 3]) and "
      "print for each our top token, its margin over our second and its gap over the reference's, tab-separated");
  add_speculation_options(*cmd, o.speculation);
  add_layer_skip_options(*cmd, o.layer_skip);
  cmd->callback([] {
    if (!o.prompt_file.empty()) o.prompt = read_file(o.prompt_file);
    run(o);
  });
}

}  // namespace nt::cli
