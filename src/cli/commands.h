// Each subcommand of the `ntransformer` binary registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace nt::cli {

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
void add_rank_command(CLI::App& app);

}  // namespace nt::cli
