// Layer skip, which is lossy: every pass leaves out the layers a calibration
// (engine/skip_calibration.h) found to change the residual stream least.
// The calibration is kept as a skip list, a JSON file that names the model
// it was measured on, so that it is never applied to another one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/calibration_file.h"
#include "engine/skip_calibration.h"
#include "gguf/gguf_file.h"
#include "runtime/layer_schedule.h"

namespace nt {

struct SkipList {
  ModelIdentity model;
  std::vector<double> similarity;  // per layer, as measured
  std::vector<int32_t> ranked;     // every layer once, most skippable (highest similarity) first
  // How it was measured, for the record.
  std::string text;
  int64_t context = 0;
  int64_t tokens = 0;
  int64_t windows = 0;
};

// Layers by similarity, highest first; equal ones lower layer first.
std::vector<int32_t> rank_by_similarity(std::span<const double> similarity);

SkipList make_skip_list(ModelIdentity model, const LayerSimilarity& measured, std::string text, int64_t context);

void write_skip_list(const SkipList& list, const std::string& path);
// nt::Error naming the file and the field at fault for anything malformed.
SkipList read_skip_list(const std::string& path);

// nt::Error naming `path` unless `list` was calibrated on `model`.
void check_skip_list_model(const SkipList& list, const ModelIdentity& model, const std::string& path);

// The `count` most skippable layers, in layer order (at least one layer stays).
std::vector<int32_t> skipped_by_count(const SkipList& list, int64_t count);
// The layers whose similarity is at least `threshold`, in layer order.
std::vector<int32_t> skipped_by_threshold(const SkipList& list, double threshold);

// Every layer of n_layers but the skipped ones, in order.
LayerSchedule schedule_without(std::span<const int32_t> skipped, int64_t n_layers);

}  // namespace nt
