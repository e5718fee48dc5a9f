// jinja2's filters and tests, Python's str/dict/list methods, and attribute
// and item access with jinja2's fallbacks (x.key reads a dict item, x['items']
// the method), under transformers' ImmutableSandboxedEnvironment rules.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace nt::chat {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& value, CallArgs& args);

Value get_attribute(const Value& object, const std::string& name);  // obj.name
Value get_item(const Value& object, const Value& key);               // obj[key]
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// json.dumps as transformers' tojson calls it (ensure_ascii off by default).
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonStyle& style);

}  // namespace nt::chat
