// --layer-skip FILE with --layer-skip-count N or --layer-skip-threshold T:
// layer skip (lossy, never on by default) for the commands that run a model,
// and the self-speculative draft that skips those layers instead (exact).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "cli/model_options.h"
#include "runtime/layer_schedule.h"

namespace nt::cli {

struct LayerSkipOptions {
  std::string file;
  std::optional<int64_t> count;
  std::optional<double> threshold;

  bool enabled() const { return !file.empty(); }
};

void add_layer_skip_options(CLI::App& cmd, LayerSkipOptions& options);
// Refuses --layer-skip without a count or a threshold (before a model is loaded).
void check_layer_skip_flags(const LayerSkipOptions& options);

// With --layer-skip, every pass of the model leaves out the chosen layers.
void apply_layer_skip(const LayerSkipOptions& options, OpenedModel& model);
// --draft-self with --layer-skip: the schedule of a self-draft that leaves out the chosen layers.
LayerSchedule layer_skip_draft_schedule(const LayerSkipOptions& options, OpenedModel& model);

}  // namespace nt::cli
