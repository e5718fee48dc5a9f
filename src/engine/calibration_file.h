// What calibration files (layer skip, expert counts) share: the identity of
// the model they were measured on, so that none is ever applied to another
// one, and the reading of their JSON fields with errors that name the file
// and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace nt {

// What ties a calibration to one model.
struct ModelIdentity {
  std::string file;           // the GGUF's file name, for messages
  int64_t layers = 0;
  std::string tensor_digest;  // FNV-1a 64 of the tensor directory (names, types, shapes, offsets), in hex
};

ModelIdentity model_identity(const GgufFile& file, int64_t n_layers);

nlohmann::json identity_json(const ModelIdentity& model);
// The "model" object of a calibration file.
ModelIdentity read_identity(const nlohmann::json& root, const std::string& path);

// nt::Error naming `path` unless it was calibrated (by `command`) on `model`.
void check_calibrated_on(const ModelIdentity& calibrated, const ModelIdentity& model, const std::string& path,
                         const std::string& command);

// The file at `path` as JSON of format `format` and version `version`, or
// nt::Error saying which of those it is not: "not a `what` file" (`command` writes them).
nlohmann::json read_calibration_json(const std::string& path, const std::string& format, int version,
                                     const std::string& what, const std::string& command);

// The value at a '/'-separated `name` of the file, of the type asked for.
template <typename T>
T json_field(const nlohmann::json& root, const std::string& name, const std::string& path) {
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

}  // namespace nt
