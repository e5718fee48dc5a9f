#include "engine/layer_skip.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "core/output_file.h"
#include "engine/calibration_file.h"

namespace nt {
namespace {

constexpr const char* kFormat = "ntransformer layer-skip calibration";
constexpr int kVersion = 1;

}  // namespace

std::vector<int32_t> rank_by_similarity(std::span<const double> similarity) {
  std::vector<int32_t> ranked(similarity.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](int32_t a, int32_t b) { return similarity[size_t(a)] > similarity[size_t(b)]; });
  return ranked;
}

SkipList make_skip_list(ModelIdentity model, const LayerSimilarity& measured, std::string text, int64_t context) {
  SkipList list;
  list.model = std::move(model);
  list.similarity = measured.similarity;
  list.ranked = rank_by_similarity(measured.similarity);
  list.text = std::move(text);
  list.context = context;
  list.tokens = measured.tokens;
  list.windows = measured.windows;
  return list;
}

void write_skip_list(const SkipList& list, const std::string& path) {
  const nlohmann::json json = {
      {"format", kFormat},
      {"version", kVersion},
      {"model", identity_json(list.model)},
      {"calibration", {{"text", list.text}, {"context", list.context}, {"tokens", list.tokens}, {"windows", list.windows}}},
      {"similarity", list.similarity},
      {"most_skippable_first", list.ranked},
  };
  write_file_atomically(path, "the skip list", json.dump(2) + "\n");
}

SkipList read_skip_list(const std::string& path) {
  const nlohmann::json json = read_calibration_json(path, kFormat, kVersion, "layer-skip", "calibrate-skip");
  SkipList list;
  list.model = read_identity(json, path);
  list.text = json_field<std::string>(json, "calibration/text", path);
  list.context = json_field<int64_t>(json, "calibration/context", path);
  list.tokens = json_field<int64_t>(json, "calibration/tokens", path);
  list.windows = json_field<int64_t>(json, "calibration/windows", path);
  list.similarity = json_field<std::vector<double>>(json, "similarity", path);
  list.ranked = json_field<std::vector<int32_t>>(json, "most_skippable_first", path);
  const size_t layers = size_t(list.model.layers);
  if (list.similarity.size() != layers) {
    fail("{}: 'similarity' has {} values for the {} layers of 'model/layers'", path, list.similarity.size(), layers);
  }
  std::vector<bool> seen(layers, false);
  for (const int32_t l : list.ranked) {
    if (l < 0 || size_t(l) >= layers || seen[size_t(l)]) {
      fail("{}: 'most_skippable_first' must list each of the {} layers once; {} is out of range or repeated", path,
           layers, l);
    }
    seen[size_t(l)] = true;
  }
  if (list.ranked.size() != layers) {
    fail("{}: 'most_skippable_first' lists {} of the {} layers", path, list.ranked.size(), layers);
  }
  return list;
}

void check_skip_list_model(const SkipList& list, const ModelIdentity& model, const std::string& path) {
  check_calibrated_on(list.model, model, path, "calibrate-skip");
}

std::vector<int32_t> skipped_by_count(const SkipList& list, int64_t count) {
  if (count < 0 || count >= list.model.layers) {
    fail("a layer-skip count of {}: the model has {} layers, so skip 0 to {}", count, list.model.layers,
         list.model.layers - 1);
  }
  std::vector<int32_t> skipped(list.ranked.begin(), list.ranked.begin() + count);
  std::sort(skipped.begin(), skipped.end());
  return skipped;
}

std::vector<int32_t> skipped_by_threshold(const SkipList& list, double threshold) {
  int64_t count = 0;
  while (count < int64_t(list.ranked.size()) && list.similarity[size_t(list.ranked[size_t(count)])] >= threshold) ++count;
  if (count == list.model.layers) {
    fail("a layer-skip threshold of {} skips all {} layers (the least similar is {:.6f}); raise it", threshold,
         list.model.layers, list.similarity[size_t(list.ranked.back())]);
  }
  return skipped_by_count(list, count);
}

LayerSchedule schedule_without(std::span<const int32_t> skipped, int64_t n_layers) {
  LayerSchedule schedule;
  for (int32_t l = 0; l < n_layers; ++l) {
    if (std::find(skipped.begin(), skipped.end(), l) == skipped.end()) schedule.layers.push_back(l);
  }
  // Every layer in order is what all() runs.
  if (int64_t(schedule.layers.size()) == n_layers) return LayerSchedule::all();
  return schedule;
}

}  // namespace nt
