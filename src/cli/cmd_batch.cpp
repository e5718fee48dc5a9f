// `ntransformer batch -m MODEL [-i IN.jsonl] [-o OUT.jsonl] [--parallel N]
// [--lookup | --draft-self [N] | --draft-model FILE] [--draft-max N] [--draft-tree [N]] [--batch-invariant]`: many generations through
// continuous batching, a JSONL adapter over the engine facade (engine/engine.h), each sequence drafting for
// itself when a draft source is given. Input lines are described in
// cli/batch_lines.h. Lines are taken as they arrive (a pipe still being
// written starts at once), a few sequences' worth ahead of the slots; each
// gets one output line, in input order, written as soon as it and every line
// before it are done:
//   {"id", "text", "prompt_tokens", "completion_tokens", "stop_reason", "seconds"}
// plus "drafted" and "accepted" when speculating, or, for a line that could
// not run, {"id", "line", "field", "error"}.
#include <fmt/core.h>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "cli/batch_lines.h"
#include "cli/commands.h"
#include "cli/line_input.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "cli/speculation_options.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/output_file.h"
#include "core/progress.h"
#include "engine/engine.h"

namespace nt::cli {
namespace {

using nlohmann::ordered_json;

struct BatchOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string input, output;  // empty: stdin, stdout
  int parallel = 4;
  int64_t n_predict = 256;
  int64_t batch_size = 256;
  std::string chat_template;
  std::string chat_template_file;
  std::vector<std::string> stop;
  SpeculationOptions speculation;  // --lookup, --draft-self or --draft-model
  bool batch_invariant = false;
  bool keep_going = false;  // exit 0 even when some lines failed
  bool ignore_eos = false;
};

// What a line's output object needs once its request is done.
struct InputLine {
  int64_t number;  // 1-based, counting blank lines
  ordered_json id;
  bool predicted = false;  // it gave a prediction: its object counts drafts
};

ordered_json error_object(const InputLine& line, const std::string& error, const std::string& field) {
  ordered_json j;
  j["id"] = line.id;
  j["line"] = line.number;
  if (!field.empty()) j["field"] = field;
  j["error"] = field.empty() ? fmt::format("line {}: {}", line.number, error)
                             : fmt::format("line {}: field \"{}\": {}", line.number, field, error);
  return j;
}

ordered_json result_object(const InputLine& line, const GenerationResult& r, bool speculating) {
  if (!r.error.empty()) {
    ordered_json j = error_object(line, r.error, "");
    j["prompt_tokens"] = r.prompt_tokens;
    return j;
  }
  ordered_json j;
  j["id"] = line.id;
  j["text"] = r.text;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["stop_reason"] = std::string(stop_reason_name(r.stop));
  j["seconds"] = std::round(r.seconds * 1e3) / 1e3;
  if (speculating) {
    j["drafted"] = r.speculation.drafted;
    j["accepted"] = r.speculation.accepted;
  }
  return j;
}

// Writes each line's object once it and every line before it are known,
// keeping only the lines not written yet.
class OrderedWriter {
 public:
  explicit OrderedWriter(std::FILE* out) : out_(out) {}
  // A new line, numbered in order from 0; its object comes with set().
  size_t add(InputLine line) {
    pending_.push_back({std::move(line), std::nullopt});
    return written_ + pending_.size() - 1;
  }
  const InputLine& line(size_t index) const { return pending_.at(index - written_).line; }
  size_t lines() const { return written_ + pending_.size(); }
  void set(size_t index, ordered_json object) {
    pending_.at(index - written_).object = std::move(object);
    for (; !pending_.empty() && pending_.front().object; ++written_) {
      const std::string text = pending_.front().object->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      fmt::print(out_, "{}\n", text);
      pending_.pop_front();
    }
    std::fflush(out_);
  }

 private:
  struct Pending {
    InputLine line;
    std::optional<ordered_json> object;
  };
  std::FILE* out_;
  std::deque<Pending> pending_;
  size_t written_ = 0;
};

std::string progress_text(const SchedulerProgress& p) {
  std::string text = fmt::format("{}/{} done, {} running, prefill {} tokens ({}), decode {} tokens ({})", p.finished,
                                 p.requests, p.running, p.prompt_tokens, rate_text(double(p.prompt_tokens), p.prefill_seconds),
                                 p.generated_tokens, rate_text(double(p.generated_tokens), p.decode_seconds));
  if (p.shared_prompt_tokens > 0) text += fmt::format(", {} more shared from cached prefixes", p.shared_prompt_tokens);
  if (p.speculation.passes > 0) {
    text += fmt::format(", {:.2f} tokens per sequence per pass ({:.0f}% of drafts accepted)", p.speculation.tokens_per_pass(),
                        100.0 * p.speculation.acceptance());
  }
  return text;
}

void batch(const BatchOptions& o) {
  check_speculation_options(o.speculation);
  BatchDefaults defaults{o.sampling, o.n_predict < 0 ? kNoTokenLimit : o.n_predict, o.stop};
  if (!o.input.empty() && !o.output.empty()) refuse_output_over_input(o.input, "-i", o.output, "-o");
  LineInput input(o.input);
  // A file output appears only when complete (after an interrupt: with every answer finished by then).
  std::optional<OutputFile> file_out;
  if (!o.output.empty()) file_out.emplace(o.output, "-o");
  std::FILE* out = file_out ? file_out->stream() : stdout;

  ModelOptions mo = o.model;
  mo.sequences = o.parallel;
  if (o.batch_invariant) {
    // A hybrid split computes its CPU layers on the host only in passes of a
    // few tokens; batched passes stream them to the GPU, which rounds otherwise.
    if (mo.cpu_layers == "auto") {
      mo.cpu_layers = "0";
    } else if (mo.cpu_layers != "0") {
      fail("--batch-invariant with --cpu-layers {}: a batched pass computes the CPU layers on the GPU, a step alone on "
           "the host; use --cpu-layers 0",
           mo.cpu_layers);
    }
  }
  EngineOptions eo;
  eo.model = open_options(mo);
  eo.model.sequences = o.parallel;
  eo.prompt_budget = o.batch_size;
  eo.batch_invariant = o.batch_invariant;
  eo.chat_template = o.chat_template;
  eo.chat_template_file = o.chat_template_file;
  eo.on_note = print_note;
  std::unique_ptr<Engine> engine = open_engine(mo, o.speculation, eo);
  announce_seed(o.sampling);
  const Tokenizer& tokenizer = engine->tokenizer();

  OrderedWriter writer(out);
  std::unordered_map<size_t, RequestId> request_of_line;  // of the lines running or waiting
  size_t errors = 0;
  ProgressLine progress("batch", 0.0, 10.0);

  // Submits the line (or writes its error object); whether it was submitted.
  const auto take = [&](const std::string& text) {
    const BatchLine line = parse_batch_line(text, defaults);
    const size_t index = writer.add({input.line_number(), line.id, !line.prediction.empty()});
    const auto refuse = [&](const std::string& error, const std::string& field) {
      writer.set(index, error_object(writer.line(index), error, field));
      ++errors;
      return false;
    };
    if (!line.error.empty()) return refuse(line.error, line.field);
    EngineRequest request;
    request.prompt = line.prompt;
    request.messages = line.messages;
    request.sampling = line.sampling;
    request.max_tokens = line.max_tokens;
    request.stop = line.stop;
    if (!line.prediction.empty()) request.prediction = tokenizer.encode(line.prediction, false);
    request.ignore_eos = o.ignore_eos;
    RequestSink sink;
    sink.on_finish = [&, index](const GenerationResult& r) {
      request_of_line.erase(index);
      const InputLine& input_line = writer.line(index);
      writer.set(index, result_object(input_line, r, engine->speculates() || input_line.predicted));
      if (!r.error.empty()) ++errors;
    };
    try {
      request_of_line.emplace(index, engine->submit(std::move(request), std::move(sink)));
    } catch (const Error& e) {  // a conversation the template cannot render
      return refuse(e.what(), "messages");
    }
    return true;
  };
  // Lines are read while fewer than this many requests wait for a slot: the
  // slots never starve, and a large input is not held in memory whole.
  const int64_t read_ahead = 2 * int64_t(o.parallel);
  bool busy = false;  // the scheduler has requests
  // SIGINT or SIGTERM: no more lines are read, the running ones end where
  // they are ("interrupted"), and every answer is written in order.
  const InterruptScope interrupts(true);
  bool interrupted = false;
  for (;;) {
    for (;;) {
      const SchedulerProgress& p = engine->progress();
      if (interrupt_requested() || p.requests - p.finished - p.running >= read_ahead) break;
      // With nothing to run, wait for the next line; otherwise take only lines already there.
      const std::optional<std::string> text = input.next(!busy);
      if (!text) break;
      // Blank lines are skipped: they get no output line (their numbers still count).
      if (text->find_first_not_of(" \t") == std::string::npos) continue;
      busy = take(*text) || busy;
    }
    if (interrupt_requested() && !interrupted) {
      interrupted = true;
      for (const auto& [line, request] : request_of_line) engine->cancel(request);
    }
    busy = engine->step();
    progress.update(progress_text(engine->progress()));
    if (!busy && (interrupted || input.ended())) break;
  }
  progress.finish();
  if (file_out) file_out->commit();
  if (interrupted) {
    const int signal = interrupt_signal();
    fmt::print(stderr, "batch: interrupted by {}; {} lines answered, the unfinished ones with stop_reason \"interrupted\"\n",
               signal == SIGTERM ? "SIGTERM" : "Ctrl-C", writer.lines());
    throw ExitCode(128 + signal);
  }
  if (errors > 0) {
    fmt::print(stderr, "batch: {} of {} lines could not run (see their error objects){}\n", errors, writer.lines(),
               o.keep_going ? "" : "; exit status 1 (--keep-going: 0)");
    if (!o.keep_going) throw ExitCode(1);
  }
}

}  // namespace

void add_batch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("batch", "Run many generations from JSONL through continuous batching");
  static BatchOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  cmd->add_option("-i,--input", o.input, "JSONL input, one request per line (default: stdin)");
  cmd->add_option("-o,--output", o.output, "JSONL output, one object per input line in input order (default: stdout)");
  cmd->add_option("--parallel", o.parallel, "Sequences decoded at once (also -np)")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-n,--n-predict", o.n_predict,
                  "Tokens to generate at most, for lines without max_tokens (-1: until end of text or a full context)")
      ->capture_default_str()
      ->check(within(limits::kMaxTokens));
  cmd->add_option("-b,--batch-size", o.batch_size, "Prompt tokens per forward pass at most (decode steps ride along)")
      ->capture_default_str()
      ->check(CLI::Range(2 * kMinPromptChunk, int64_t(1) << 30));
  cmd->add_flag("--batch-invariant", o.batch_invariant,
               "Give every line the output `run` gives it alone, token for token (the GPU's batched kernels round "
               "differently): one-token kernels for each sequence's steps, one prompt chunk a pass, no shared prefixes");
  cmd->add_option("--chat-template", o.chat_template, "Use a built-in chat format for messages lines instead of the model's template: chatml, llama3, llama2, gemma, plain");
  cmd->add_option("--chat-template-file", o.chat_template_file, "Use this Jinja chat template instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--stop", o.stop, "Stop string for lines without stop (repeatable)");
  cmd->add_flag("--keep-going", o.keep_going, "Exit 0 even when some lines could not run (their error objects say why)");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Generate past the end-of-text token, up to max_tokens or a full context");
  add_speculation_options(*cmd, o.speculation);
  cmd->callback([] { batch(o); });
}

}  // namespace nt::cli
