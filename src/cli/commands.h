// Each subcommand of the `ntransformer` binary registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace nt::cli {

// Thrown by a command that ends with a status of its own (130 after Ctrl-C,
// 1 when some of batch's lines failed) once it has printed what it has.
struct ExitCode {
  int code;
};

// "12.3 tok/s", or "–" where nothing was timed or counted (a rate of 0 would say the work ran, slowly).
std::string rate_text(double tokens, double seconds);

void add_inspect_command(CLI::App& app);
void add_convert_llama2c_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_make_model_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_batch_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_calibrate_skip_command(CLI::App& app);
void add_calibrate_experts_command(CLI::App& app);
void add_rank_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace nt::cli
