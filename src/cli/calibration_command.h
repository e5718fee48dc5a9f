// What the calibration commands (calibrate-skip, calibrate-experts) share:
// their flags, the model and the text's tokens, and the file they write.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/model_options.h"
#include "engine/open_model.h"

namespace nt::cli {

struct CalibrationOptions {
  ModelOptions model;
  std::string text_path;
  std::string out_path;  // empty: MODEL's file name with the command's suffix, in the current directory
  int64_t chunks = 0;
};

// The model flags with -c 512, -f (`text_help`), -o (`out_help`) and --chunks.
void add_calibration_options(CLI::App& cmd, CalibrationOptions& o, const std::string& text_help, const std::string& out_help);

struct CalibrationInput {
  OpenedModel loaded;
  std::vector<int32_t> tokens;  // the text's, with the BOS the vocabulary asks for
  int64_t n_ctx = 0;            // each window's positions: the runner's context
  int32_t bos = -1;             // the token each window starts with, or -1
};

// The model and the text's tokens; errors name the file, and a text shorter
// than a window gets a warning.
CalibrationInput load_calibration(const CalibrationOptions& o);

// -o, or MODEL's file name with `suffix` (".skip.json").
std::string calibration_output(const CalibrationOptions& o, const OpenedModel& loaded, const std::string& suffix);

}  // namespace nt::cli
