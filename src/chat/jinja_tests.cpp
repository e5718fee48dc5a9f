// jinja2's tests (`x is defined`, `x is divisibleby 3`, ...).
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <unordered_map>

#include "chat/jinja_builtins.h"

namespace nt::chat {
namespace {

const Value& test_arg(const CallArgs& args) {
  if (args.positional.empty()) render_fail("TypeError: test is missing its argument");
  return args.positional[0];
}

using TestFn = bool (*)(const Value&, CallArgs&);

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"boolean", [](const Value& v, CallArgs&) { return v.is_bool(); }},
      {"callable", [](const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); }},
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby",
       [](const Value& v, CallArgs& a) {
         Value r = binary_op("%", v, test_arg(a));
         return r.as_float() == 0.0;
       }},
      {"eq", [](const Value& v, CallArgs& a) { return values_equal(v, test_arg(a)); }},
      {"escaped", [](const Value&, CallArgs&) { return false; }},
      {"even", [](const Value& v, CallArgs&) { return binary_op("%", v, Value(2)).as_float() == 0.0; }},
      {"false", [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"filter", [](const Value& v, CallArgs&) { return v.is_string() && has_filter(v.str()); }},
      {"float", [](const Value& v, CallArgs&) { return v.is_float(); }},
      {"ge", [](const Value& v, CallArgs& a) { return !values_less(v, test_arg(a)); }},
      {"gt", [](const Value& v, CallArgs& a) { return values_less(test_arg(a), v); }},
      {"in", [](const Value& v, CallArgs& a) { return value_contains(test_arg(a), v); }},
      {"integer", [](const Value& v, CallArgs&) { return v.is_int(); }},
      {"iterable",
       [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping(); }},
      {"le", [](const Value& v, CallArgs& a) { return !values_less(test_arg(a), v); }},
      {"lower", [](const Value& v, CallArgs& a) { return call_str_method(v.to_str(), "islower", a).as_bool(); }},
      {"lt", [](const Value& v, CallArgs& a) { return values_less(v, test_arg(a)); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_mapping(); }},
      {"ne", [](const Value& v, CallArgs& a) { return !values_equal(v, test_arg(a)); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"odd", [](const Value& v, CallArgs&) { return binary_op("%", v, Value(2)).as_float() != 0.0; }},
      {"sameas",
       [](const Value& v, CallArgs& a) {
         const Value& other = test_arg(a);
         if (v.identity() || other.identity()) return v.identity() == other.identity();
         return v.type() == other.type() && values_equal(v, other);
       }},
      {"sequence",
       [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping(); }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"test", [](const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); }},
      {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, CallArgs& a) { return call_str_method(v.to_str(), "isupper", a).as_bool(); }},
  };
  return table;
}

std::string_view canonical_test(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == "<=") return "le";
  if (name == ">=") return "ge";
  return name;
}

}  // namespace

bool has_test(std::string_view name) { return tests().count(canonical_test(name)) != 0; }

bool apply_test(std::string_view name, const Value& value, CallArgs& args) {
  std::string_view canonical = canonical_test(name);
  auto it = tests().find(canonical);
  if (it == tests().end()) render_fail(fmt::format("No test named '{}'.", name));
  // Python checks the arity: `x is defined y` passes defined() an argument it does not take.
  static constexpr std::string_view kOneArgument[] = {"divisibleby", "eq", "ne", "lt",    "gt",
                                                      "le",          "ge", "in", "sameas"};
  size_t wanted = std::find(std::begin(kOneArgument), std::end(kOneArgument), canonical) != std::end(kOneArgument);
  size_t given = args.positional.size() + args.keyword.size();
  if (given != wanted)
    render_fail(fmt::format("TypeError: test_{}() takes {} positional argument(s) but {} were given", canonical,
                            wanted + 1, given + 1));
  return it->second(value, args);
}

}  // namespace nt::chat
