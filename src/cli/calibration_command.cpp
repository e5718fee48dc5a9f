#include "cli/calibration_command.h"

#include <fmt/core.h>

#include <filesystem>

#include "cli/number_checks.h"
#include "core/error.h"
#include "core/read_file.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {

void add_calibration_options(CLI::App& cmd, CalibrationOptions& o, const std::string& text_help, const std::string& out_help) {
  o.model.context = 512;
  add_model_options(cmd, o.model);
  cmd.get_option("-c")->description("Context length in tokens, which is also each window's (0: the model's, at most 4096)")
      ->capture_default_str();
  cmd.add_option("-f,--file", o.text_path, text_help)->required()->check(CLI::ExistingFile);
  cmd.add_option("-o,--output", o.out_path, out_help);
  cmd.add_option("--chunks", o.chunks, "Windows of the text to run at most (0: all)")
      ->capture_default_str()
      ->check(non_negative());
}

CalibrationInput load_calibration(const CalibrationOptions& o) {
  const std::string text = read_file(o.text_path);
  if (text.empty()) fail("-f {}: the file is empty; calibrate on a text of at least a few hundred tokens", o.text_path);
  CalibrationInput in{load_model(o.model)};
  const Tokenizer& tokenizer = *in.loaded.tokenizer;
  in.tokens = tokenizer.encode(text, true, false);
  in.n_ctx = in.loaded.runner->context_size();
  in.bos = tokenizer.vocab().add_bos() ? tokenizer.vocab().bos() : -1;
  if (int64_t(in.tokens.size()) < in.n_ctx) {
    fmt::print(stderr, "warning: -f {} is {} tokens, less than one window of {}: the calibration rests on little text "
               "(a longer text, or a smaller -c)\n", o.text_path, in.tokens.size(), in.n_ctx);
  }
  return in;
}

std::string calibration_output(const CalibrationOptions& o, const OpenedModel& loaded, const std::string& suffix) {
  return o.out_path.empty() ? std::filesystem::path(loaded.file->path()).stem().string() + suffix : o.out_path;
}

}  // namespace nt::cli
