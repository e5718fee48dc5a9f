// jinja2's filters and tests, Python's str/dict/list methods, and attribute
// and item access with jinja2's fallbacks (x.key reads a dict item, x['items']
// the method), under transformers' ImmutableSandboxedEnvironment rules.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace nt::chat {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& value, CallArgs& args);

Value get_attribute(const Value& object, const std::string& name);  // obj.name
Value get_item(const Value& object, const Value& key);              // obj[key]
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

// Shared by the builtins (jinja_access.cpp): arguments read like a Python
// signature, positionally or by name, and Python primitives several need.
Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback = Value(nullptr));
int64_t int_arg(const Value& v, std::string_view what);
std::string str_arg(const Value& v, std::string_view what);  // a copy: callers pass temporaries
std::optional<std::string> optional_str(const Value& v);     // none/undefined: nullopt
Value list_of(std::vector<std::string> parts);
Value tuple_pair(Value a, Value b);
int64_t py_len(const Value& v);
std::string py_center(const std::string& s, int64_t width, std::string_view fill = " ");
Value call_str_method(const std::string& s, const std::string& name, CallArgs& args);
// Python's getattr alone (methods, namespace attributes), undefined when absent.
Value python_getattr(const Value& object, const std::string& name);

}  // namespace nt::chat
