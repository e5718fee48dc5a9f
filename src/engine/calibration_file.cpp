#include "engine/calibration_file.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/read_file.h"

namespace nt {
namespace {

void hash_bytes(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
}

template <typename T>
void hash_value(uint64_t& h, T value) {
  hash_bytes(h, &value, sizeof value);
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

nlohmann::json identity_json(const ModelIdentity& model) {
  return {{"file", model.file}, {"layers", model.layers}, {"tensor_digest", model.tensor_digest}};
}

ModelIdentity read_identity(const nlohmann::json& root, const std::string& path) {
  ModelIdentity model;
  model.file = json_field<std::string>(root, "model/file", path);
  model.layers = json_field<int64_t>(root, "model/layers", path);
  model.tensor_digest = json_field<std::string>(root, "model/tensor_digest", path);
  if (model.layers < 1) fail("{}: 'model/layers' is {}; a model has at least one layer", path, model.layers);
  return model;
}

void check_calibrated_on(const ModelIdentity& calibrated, const ModelIdentity& model, const std::string& path,
                         const std::string& command) {
  if (calibrated.layers != model.layers) {
    fail("{}: calibrated on '{}' with {} layers, but '{}' has {}; run {} on this model", path, calibrated.file,
         calibrated.layers, model.file, model.layers, command);
  }
  if (calibrated.tensor_digest != model.tensor_digest) {
    fail("{}: calibrated on '{}' (tensor directory {}), which is not '{}' (tensor directory {}); run {} on this model",
         path, calibrated.file, calibrated.tensor_digest, model.file, model.tensor_digest, command);
  }
}

nlohmann::json read_calibration_json(const std::string& path, const std::string& format, int version,
                                     const std::string& what, const std::string& command) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a {} file (JSON: {})", path, what, e.what());
  }
  if (!json.is_object() || !json.contains("format") || json["format"] != format) {
    fail("{}: not a {} file (its 'format' is not \"{}\"; {} writes them)", path, what, format, command);
  }
  if (const int found = json_field<int>(json, "version", path); found != version) {
    fail("{}: {} file version {}; this build reads version {}", path, what, found, version);
  }
  return json;
}

}  // namespace nt
