// ntransformer: one binary, one subcommand per job.
#include <fmt/core.h>

#include <string>
#include <vector>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "cli/llama_style_flags.h"
#include "core/error.h"
#include "core/interrupt.h"

int main(int argc, char** argv) {
  nt::install_signal_handlers();
  CLI::App app{"ntransformer: Llama-architecture GGUF inference, streamed through VRAM, RAM and NVMe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", nt::cli::version_text(), "Print the version, git commit and CUDA architectures, then exit");
  nt::cli::add_inspect_command(app);
  nt::cli::add_convert_llama2c_command(app);
  nt::cli::add_quantize_command(app);
  nt::cli::add_make_model_command(app);
  nt::cli::add_run_command(app);
  nt::cli::add_chat_command(app);
  nt::cli::add_perplexity_command(app);
  nt::cli::add_calibrate_skip_command(app);
  nt::cli::add_calibrate_experts_command(app);
  nt::cli::add_bench_command(app);
  nt::cli::add_plan_command(app);
  nt::cli::add_batch_command(app);
  nt::cli::add_tokenize_command(app);
  nt::cli::add_rank_command(app);
  nt::cli::add_serve_command(app);
  const std::vector<std::string> args = nt::cli::expand_llama_style_flags(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every usage error exits 1 like every other error.
    return app.exit(e) == 0 ? 0 : 1;
  } catch (const nt::cli::ExitCode& e) {
    return e.code;
  } catch (const nt::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of host memory\n");
    return 1;
  }
  return 0;
}
