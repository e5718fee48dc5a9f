// Expert calibration: how often a mixture of experts' router chooses each
// expert of each layer over a text, kept as a JSON file that names the model
// it was counted on. The GPU's expert placement starts from these counts
// (the most chosen experts in VRAM first) and `plan` predicts the share of
// a token's expert reads that VRAM then serves.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/calibration_file.h"
#include "runtime/model_runner.h"

namespace nt {

struct ExpertCounts {
  ModelIdentity model;
  int64_t experts = 0;                        // per layer
  std::vector<std::vector<uint64_t>> counts;  // [layer][expert]: the tokens that chose it
  // How it was counted, for the record.
  std::string text;
  int64_t context = 0;
  int64_t tokens = 0;
  int64_t windows = 0;

  // [layer * experts + expert], as the runner takes them.
  std::vector<uint64_t> flat() const;
};

// Counts every layer's routing over the text as engine/calibration_windows.h
// cuts it. nt::Error when the model has no mixture of experts, or when the
// runner cannot report its routing.
ExpertCounts count_expert_routing(ModelRunner& runner, ModelIdentity model, std::span<const int32_t> tokens, int64_t n_ctx,
                                  int32_t bos, int64_t max_windows, std::string text,
                                  const std::function<void(int64_t, int64_t)>& on_window);

void write_expert_counts(const ExpertCounts& counts, const std::string& path);
// nt::Error naming the file and the field at fault for anything malformed.
ExpertCounts read_expert_counts(const std::string& path);
// read_expert_counts, checked against the model it is for: its identity and
// its experts per layer.
ExpertCounts read_expert_counts_for(const std::string& path, const ModelIdentity& model, int64_t experts_per_layer);

}  // namespace nt
