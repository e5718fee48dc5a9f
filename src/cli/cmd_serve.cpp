// `ntransformer serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np N] [--api-key KEY]`:
// the OpenAI- and Anthropic-compatible HTTP server (server/server.h) over
// the engine facade, with the model, budget, sampling and draft flags of run.
#include <fmt/core.h>
#include <poll.h>

#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/number_checks.h"
#include "cli/speculation_options.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "engine/default_model.h"
#include "server/server.h"

namespace nt::cli {
namespace {

struct ServeOptions {
  ModelOptions model;
  SamplingParams sampling;
  SpeculationOptions speculation;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int64_t n_predict = -1;
  int64_t batch_size = 256;
  std::string api_key;
  std::string alias;
  std::string chat_template;
  std::string chat_template_file;
  int max_waiting = 64;
  int64_t max_body_mib = 16;
  std::string reasoning_format = "auto";
};

// Ctrl-C or SIGTERM stops the server: a thread waits on the interrupt pipe.
std::thread stop_on_signal(server::Server& server) {
  return std::thread([&server] {
    pollfd p{interrupt_wake_fd(), POLLIN, 0};
    while (p.fd >= 0 && !interrupt_requested()) ::poll(&p, 1, -1);
    server.stop();
  });
}

void serve(const ServeOptions& o) {
  check_speculation_options(o.speculation);
  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.sampling = o.sampling;
  so.max_tokens = o.n_predict < 0 ? kNoTokenLimit : o.n_predict;
  so.max_waiting = o.max_waiting;
  so.max_body_bytes = size_t(o.max_body_mib) << 20;
  so.slots = o.parallel;
  so.reasoning_inline = o.reasoning_format == "none";
  const std::string path = o.model.model.empty() ? default_model_path() : o.model.model;
  so.model_id = o.alias.empty() ? std::filesystem::path(path).stem().string() : o.alias;

  ModelOptions mo = o.model;
  mo.sequences = o.parallel;
  EngineOptions eo;
  eo.model = open_options(mo);
  eo.prompt_budget = o.batch_size;
  eo.chat_template = o.chat_template;
  eo.chat_template_file = o.chat_template_file;
  eo.on_note = print_note;
  server::Server server(so, [&] { return open_engine(mo, o.speculation, eo); });
  const InterruptScope interrupts(true);
  std::thread watcher = stop_on_signal(server);
  try {
    server.run([&](const std::string& address) {
      fmt::print(stderr, "serve: listening on {} (model '{}'; /health answers 503 until it has loaded)\n", address,
                 so.model_id);
    });
  } catch (...) {
    request_interrupt();  // ends the watcher's wait
    watcher.join();
    throw;
  }
  fmt::print(stderr, "serve: stopped\n");
  request_interrupt();
  watcher.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI and Anthropic HTTP APIs (chat, completions, messages)");
  static ServeOptions o;
  add_model_options(*cmd, o.model);
  add_sampling_options(*cmd, o.sampling);
  cmd->add_option("--host", o.host, "Address to listen on (loopback by default; 0.0.0.0 for every interface)")
      ->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free one, printed)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o.parallel, "Requests decoded at once (also -np); more wait for a slot")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-n,--n-predict", o.n_predict, "Tokens per reply for requests without max_tokens (-1: until end of text or a full context)")
      ->capture_default_str()
      ->check(within(limits::kMaxTokens));
  cmd->add_option("-b,--batch-size", o.batch_size, "Prompt tokens per forward pass at most (decode steps ride along)")
      ->capture_default_str()
      ->check(CLI::Range(2 * kMinPromptChunk, int64_t(1) << 30));
  cmd->add_option("--api-key", o.api_key, "Require this key ('Authorization: Bearer KEY' or 'x-api-key: KEY')");
  cmd->add_option("--alias", o.alias, "The model name clients give (default: the file's name without .gguf)");
  cmd->add_option("--chat-template", o.chat_template, "Use a built-in chat format instead of the model's template: chatml, llama3, llama2, gemma, plain");
  cmd->add_option("--chat-template-file", o.chat_template_file, "Use this Jinja chat template instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--reasoning-format", o.reasoning_format,
                  "auto: a reply's reasoning (<think>, gpt-oss's analysis) goes to reasoning_content and thinking "
                  "blocks; none: it stays in the content (a request's reasoning_format overrides)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "deepseek", "none"}));
  cmd->add_option("--max-waiting", o.max_waiting, "Requests that may wait beyond the slots; past them 503 with Retry-After")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--max-body-mib", o.max_body_mib, "Largest request body in MiB; past it 413")
      ->capture_default_str()
      ->check(positive());
  add_speculation_options(*cmd, o.speculation);
  cmd->callback([] { serve(o); });
}

}  // namespace nt::cli
