#include "server/json_fields.h"

#include <fmt/format.h>

namespace nt::server {

using nlohmann::json;

namespace {
// No request nests deeper; the bound keeps the parser's recursion off the end of the stack.
constexpr int kMaxNesting = 64;
}  // namespace

void bad_field(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, const json&) {
      if (depth > kMaxNesting) throw ApiError(400, fmt::format("malformed JSON: nested deeper than {} levels", kMaxNesting));
      return true;
    });
  } catch (const json::exception& e) {
    // Drop the library's "[json.exception.parse_error.101] " tag; its "last read" can be all of a huge body.
    const std::string what = e.what();
    const size_t tag_end = what.find("] ");
    std::string reason = tag_end == std::string::npos ? what : what.substr(tag_end + 2);
    if (reason.size() > 200) reason = reason.substr(0, 200) + "...";
    throw ApiError(400, "malformed JSON: " + reason);
  }
  if (!j.is_object()) bad_field("", fmt::format("the body must be a JSON object, got {}", shown(j)));
  return j;
}

double setting_field(const json& value, const SettingLimit& limit, const std::string& param) {
  if (limit.integer ? !value.is_number_integer() : !value.is_number()) {
    bad_field(param, fmt::format("{}: expected {}, got {}", param, limit.integer ? "an integer" : "a number", shown(value)));
  }
  if (std::string error = check_limit(limit, value.get<double>()); !error.empty()) bad_field(param, param + ": " + error);
  return value.get<double>();
}

std::string text_field(const json& value, const std::string& param) {
  if (!value.is_string()) bad_field(param, fmt::format("{}: expected a string, got {}", param, shown(value)));
  return value.get<std::string>();
}

bool bool_field(const json& value, const std::string& param) {
  if (!value.is_boolean()) bad_field(param, fmt::format("{}: expected true or false, got {}", param, shown(value)));
  return value.get<bool>();
}

std::string served_model(const json& body, const std::string& model_id) {
  if (!body.contains("model") || body["model"].is_null()) return model_id;
  const std::string model = text_field(body["model"], "model");
  if (model != model_id) {
    throw ApiError(404, fmt::format("the model '{}' is not served here; this server serves '{}'", model, model_id),
                   "model", "not_found_error");
  }
  return model;
}

}  // namespace nt::server
