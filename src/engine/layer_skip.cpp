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
#include "core/read_file.h"

namespace nt {
namespace {

constexpr const char* kFormat = "ntransformer layer-skip calibration";
constexpr int kVersion = 1;

void hash_bytes(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
}

template <typename T>
void hash_value(uint64_t& h, T value) {
  hash_bytes(h, &value, sizeof value);
}

// The value at a '/'-separated `field` of the file, of the type asked for.
template <typename T>
T field(const nlohmann::json& root, const std::string& name, const std::string& path) {
  const nlohmann::json* at = &root;
  size_t from = 0;
  while (from <= name.size()) {
    const size_t to = std::min(name.find('/', from), name.size());
    const std::string key = name.substr(from, to - from);
    if (!at->is_object() || !at->contains(key)) fail("{}: the field '{}' is missing", path, name);
    at = &(*at)[key];
    from = to + 1;
  }
  try {
    return at->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: the field '{}' has the wrong type ({})", path, name, at->type_name());
  }
}

}  // namespace

ModelIdentity model_identity(const GgufFile& file, int64_t n_layers) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const GgufTensorInfo& t : file.header().tensors) {
    hash_bytes(h, t.name.data(), t.name.size() + 1);  // with the terminator, so names cannot run together
    hash_value(h, uint32_t(t.type));
    hash_value(h, uint64_t(t.shape.size()));
    for (const int64_t d : t.shape) hash_value(h, d);
    hash_value(h, t.offset);
  }
  return {std::filesystem::path(file.path()).filename().string(), n_layers, fmt::format("{:016x}", h)};
}

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
      {"model", {{"file", list.model.file}, {"layers", list.model.layers}, {"tensor_digest", list.model.tensor_digest}}},
      {"calibration", {{"text", list.text}, {"context", list.context}, {"tokens", list.tokens}, {"windows", list.windows}}},
      {"similarity", list.similarity},
      {"most_skippable_first", list.ranked},
  };
  write_file_atomically(path, "the skip list", json.dump(2) + "\n");
}

SkipList read_skip_list(const std::string& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a layer-skip file (JSON: {})", path, e.what());
  }
  if (!json.is_object() || !json.contains("format") || json["format"] != kFormat) {
    fail("{}: not a layer-skip file (its 'format' is not \"{}\"; calibrate-skip writes them)", path, kFormat);
  }
  if (const int version = field<int>(json, "version", path); version != kVersion) {
    fail("{}: layer-skip file version {}; this build reads version {}", path, version, kVersion);
  }
  SkipList list;
  list.model.file = field<std::string>(json, "model/file", path);
  list.model.layers = field<int64_t>(json, "model/layers", path);
  list.model.tensor_digest = field<std::string>(json, "model/tensor_digest", path);
  list.text = field<std::string>(json, "calibration/text", path);
  list.context = field<int64_t>(json, "calibration/context", path);
  list.tokens = field<int64_t>(json, "calibration/tokens", path);
  list.windows = field<int64_t>(json, "calibration/windows", path);
  list.similarity = field<std::vector<double>>(json, "similarity", path);
  list.ranked = field<std::vector<int32_t>>(json, "most_skippable_first", path);
  const size_t layers = size_t(std::max<int64_t>(0, list.model.layers));
  if (list.model.layers < 1) fail("{}: 'model/layers' is {}; a model has at least one layer", path, list.model.layers);
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
  if (list.model.layers != model.layers) {
    fail("{}: calibrated on '{}' with {} layers, but '{}' has {}; run calibrate-skip on this model", path,
         list.model.file, list.model.layers, model.file, model.layers);
  }
  if (list.model.tensor_digest != model.tensor_digest) {
    fail("{}: calibrated on '{}' (tensor directory {}), which is not '{}' (tensor directory {}); run calibrate-skip "
         "on this model",
         path, list.model.file, list.model.tensor_digest, model.file, model.tensor_digest);
  }
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
