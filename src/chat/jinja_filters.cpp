// jinja2's filters, each following the jinja2 3.1 function of the same name.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace nt::chat {
namespace {

// Sort keys jinja2 compares when case_sensitive is off.
Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str())) : v; }

// jinja2's make_attrgetter: "a.b.0" walks items, digits as indices.
Value get_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  for (const auto& part : py_split(attribute.str(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value(int64_t(std::stoll(part))) : Value(part));
  }
  return v;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, const std::function<Value(const Value&)>& key) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& item : items) keyed.emplace_back(key(item), std::move(item));
  // Python's sort with reverse=True keeps equal items in order too.
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? values_less(b.first, a.first) : values_less(a.first, b.first);
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's int(str, base) and float(str) parsing; nullopt where Python raises ValueError.
std::optional<int64_t> parse_int(std::string text, int base) {
  text = py_strip(text, std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  try {
    int64_t v = std::stoll(text, &used, base);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<double> parse_float(std::string text) {
  text = py_strip(text, std::nullopt, true, true);
  if (text.empty()) return std::nullopt;
  std::string lower = py_lower(text);
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity") return HUGE_VAL;
  if (lower == "-inf" || lower == "-infinity") return -HUGE_VAL;
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return NAN;
  if (lower.find_first_of("xp") != std::string::npos) return std::nullopt;  // strtod accepts hex, Python does not
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

// Python's round(x, ndigits): correctly rounded, ties to even.
Value py_round(const Value& v, int64_t precision) {
  if (!v.is_float()) {
    if (precision >= 0) return Value(v.as_int());
    double scale = std::pow(10.0, double(-precision));
    return Value(int64_t(std::nearbyint(double(v.as_int()) / scale) * scale));
  }
  double x = v.as_float();
  if (!std::isfinite(x)) return v;
  if (precision == 0) return Value(std::nearbyint(x));
  if (precision > 0 && precision < 300) {
    std::string digits = fmt::format("{:.{}f}", x, precision);  // rounds the exact binary value, ties to even
    return Value(std::strtod(digits.c_str(), nullptr));
  }
  double scale = std::pow(10.0, double(-precision));
  return Value(std::nearbyint(x / scale) * scale);
}

Value filter_tojson(const Value& input, CallArgs& args) {
  JsonStyle style;
  style.ensure_ascii = arg(args, 0, "ensure_ascii", Value(false)).truthy();
  Value indent = arg(args, 1, "indent");
  if (indent.is_string()) {
    style.indent = indent.str();
  } else if (!indent.is_none()) {
    style.indent = std::string(size_t(std::max<int64_t>(0, int_arg(indent, "indent"))), ' ');
  }
  if (style.indent) style.item_separator = ",";
  Value separators = arg(args, 2, "separators");
  if (!separators.is_none()) {
    auto parts = separators.iterate();
    if (parts.size() != 2) render_fail("ValueError: separators must be a pair of strings");
    style.item_separator = str_arg(parts[0], "item separator");
    style.key_separator = str_arg(parts[1], "key separator");
  }
  style.sort_keys = arg(args, 3, "sort_keys", Value(false)).truthy();
  return Value(to_json(input, style));
}

Value filter_indent(const Value& input, CallArgs& args) {
  Value width = arg(args, 0, "width", Value(4));
  std::string indention =
      width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, int_arg(width, "width"))), ' ');
  bool first = arg(args, 1, "first", Value(false)).truthy();
  bool blank = arg(args, 2, "blank", Value(false)).truthy();
  std::string s = input.to_str() + "\n";  // jinja2 appends one so splitlines keeps a trailing empty line
  auto lines = py_splitlines(s);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indention : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  return Value(first ? indention + out : out);
}

Value filter_title(const Value& input, CallArgs&) {
  // jinja2 capitalizes each run between -, whitespace, (, {, [ and <.
  std::u32string u = utf8_decode(input.to_str());
  bool word_start = true;
  for (auto& c : u) {
    bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
    if (separator) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return Value(utf8_encode(u));
}

Value filter_truncate(const Value& input, CallArgs& args) {
  std::string s = input.to_str();
  int64_t len = int_arg(arg(args, 0, "length", Value(255)), "length");
  bool killwords = arg(args, 1, "killwords", Value(false)).truthy();
  std::string end = arg(args, 2, "end", Value("...")).to_str();
  Value leeway_v = arg(args, 3, "leeway");
  int64_t leeway = leeway_v.is_none() ? 5 : int_arg(leeway_v, "leeway");
  std::u32string u = utf8_decode(s);
  int64_t end_len = int64_t(utf8_length(end));
  if (len < end_len) render_fail("AssertionError: expected length >= len(end)");
  if (int64_t(u.size()) <= len + leeway) return Value(s);
  std::string head = utf8_encode(u.substr(0, size_t(len - end_len)));
  if (killwords) return Value(head + end);
  return Value(py_rsplit(head, std::string(" "), 1)[0] + end);
}

std::vector<Value> select_items(const Value& input, CallArgs& args, bool select, bool by_attribute) {
  size_t first_test_arg = by_attribute ? 1 : 0;
  Value attribute = by_attribute ? arg(args, 0, "attribute") : Value();
  std::optional<std::string> test;
  if (args.positional.size() > first_test_arg) test = str_arg(args.positional[first_test_arg], "test name");
  CallArgs test_args;
  for (size_t i = first_test_arg + 1; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  std::vector<Value> out;
  for (const auto& item : input.iterate()) {
    Value subject = by_attribute ? get_path(item, attribute) : item;
    bool passed = test ? apply_test(*test, subject, test_args) : subject.truthy();
    if (passed == select) out.push_back(item);
  }
  return out;
}

Value min_or_max(const Value& input, CallArgs& args, bool max) {
  auto items = input.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  bool case_sensitive = arg(args, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = arg(args, 1, "attribute");
  auto key = [&](const Value& v) {
    Value k = attribute.is_none() ? v : get_path(v, attribute);
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? values_less(best_key, k) : values_less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

using FilterFn = Value (*)(const Value&, CallArgs&);

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs",
       [](const Value& v, CallArgs&) {
         v.require_defined();
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         render_fail(fmt::format("TypeError: bad operand type for abs(): '{}'", v.type_name()));
       }},
      {"attr",
       [](const Value& v, CallArgs& a) { return python_getattr(v, str_arg(arg(a, 0, "name"), "attribute name")); }},
      {"batch",
       [](const Value& v, CallArgs& a) {
         int64_t size = int_arg(arg(a, 0, "linecount"), "linecount");
         if (size <= 0) render_fail("ValueError: batch size must be positive");
         Value fill = arg(a, 1, "fill_with");
         std::vector<Value> out, row;
         for (const auto& item : v.iterate()) {
           row.push_back(item);
           if (int64_t(row.size()) == size) out.push_back(Value::new_list(std::exchange(row, {})));
         }
         if (!row.empty()) {
           if (!fill.is_none())
             while (int64_t(row.size()) < size) row.push_back(fill);
           out.push_back(Value::new_list(std::move(row)));
         }
         return Value::new_list(std::move(out));
       }},
      {"capitalize", [](const Value& v, CallArgs&) { return Value(py_capitalize(v.to_str())); }},
      {"center",
       [](const Value& v, CallArgs& a) {
         return Value(py_center(v.to_str(), int_arg(arg(a, 0, "width", Value(80)), "width")));
       }},
      {"count", [](const Value& v, CallArgs&) { return Value(py_len(v)); }},
      {"default",
       [](const Value& v, CallArgs& a) {
         bool boolean = arg(a, 1, "boolean", Value(false)).truthy();
         return v.is_undefined() || (boolean && !v.truthy()) ? arg(a, 0, "default_value", Value("")) : v;
       }},
      {"dictsort",
       [](const Value& v, CallArgs& a) {
         bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
         std::string by = arg(a, 1, "by", Value("key")).to_str();
         if (by != "key" && by != "value")
           render_fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
         bool reverse = arg(a, 2, "reverse", Value(false)).truthy();
         if (!v.is_mapping()) render_fail("TypeError: dictsort needs a mapping");
         std::vector<Value> items;
         for (const auto& [k, item] : v.dict().entries) items.push_back(tuple_pair(k, item));
         return Value::new_list(sorted(std::move(items), reverse, [&](const Value& p) {
           const Value& k = p.list().items[by == "key" ? 0 : 1];
           return case_sensitive ? k : ignore_case(k);
         }));
       }},
      {"escape", [](const Value& v, CallArgs&) { return Value(html_escape(v.to_str())); }},
      {"first",
       [](const Value& v, CallArgs&) {
         auto items = v.iterate();
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"float",
       [](const Value& v, CallArgs& a) {
         Value fallback = arg(a, 0, "default", Value(0.0));
         if (v.is_number()) return Value(v.as_float());
         if (v.is_string())
           if (auto f = parse_float(v.str())) return Value(*f);
         return fallback;
       }},
      {"format",
       [](const Value& v, CallArgs& a) {
         if (!a.keyword.empty()) render_fail("format filter keyword arguments are not supported");
         return binary_op("%", Value(v.to_str()), Value::new_list(a.positional, true));
       }},
      {"groupby",
       [](const Value& v, CallArgs& a) {
         Value attribute = arg(a, 0, "attribute");
         Value fallback = arg(a, 1, "default");
         bool case_sensitive = arg(a, 2, "case_sensitive", Value(false)).truthy();
         auto key_of = [&](const Value& item) {
           Value k = get_path(item, attribute);
           if (k.is_undefined() && !fallback.is_none()) k = fallback;
           return k;
         };
         auto compare_key = [&](const Value& item) {
           return case_sensitive ? key_of(item) : ignore_case(key_of(item));
         };
         std::vector<Value> groups, members;
         Value current;
         for (const auto& item : sorted(v.iterate(), false, compare_key)) {
           Value k = compare_key(item);
           if (!members.empty() && !values_equal(k, current)) {
             Value grouper = key_of(members[0]);  // the first member's own key, not the lowered one
             groups.push_back(tuple_pair(std::move(grouper), Value::new_list(std::exchange(members, {}))));
           }
           current = k;
           members.push_back(item);
         }
         if (!members.empty()) {
           Value grouper = key_of(members[0]);
           groups.push_back(tuple_pair(std::move(grouper), Value::new_list(std::move(members))));
         }
         return Value::new_list(std::move(groups));
       }},
      {"indent", filter_indent},
      {"int",
       [](const Value& v, CallArgs& a) {
         Value fallback = arg(a, 0, "default", Value(0));
         int base = int(int_arg(arg(a, 1, "base", Value(10)), "base"));
         if (v.is_float()) return std::isfinite(v.as_float()) ? Value(int64_t(v.as_float())) : fallback;
         if (v.is_number()) return Value(v.as_int());
         if (v.is_string()) {
           if (auto i = parse_int(v.str(), base)) return Value(*i);
           if (auto f = parse_float(v.str()); f && std::isfinite(*f)) return Value(int64_t(*f));
         }
         return fallback;
       }},
      {"items",
       [](const Value& v, CallArgs&) {
         if (v.is_undefined()) return Value::new_list();
         if (!v.is_mapping()) render_fail("TypeError: Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, item] : v.dict().entries) out.push_back(tuple_pair(k, item));
         return Value::new_list(std::move(out));
       }},
      {"join",
       [](const Value& v, CallArgs& a) {
         std::string separator = arg(a, 0, "d", Value("")).to_str();
         Value attribute = arg(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const auto& item : v.iterate()) {
           if (!first) out += separator;
           first = false;
           out += (attribute.is_none() ? item : get_path(item, attribute)).to_str();
         }
         return Value(std::move(out));
       }},
      {"last",
       [](const Value& v, CallArgs&) {
         auto items = v.iterate();
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](const Value& v, CallArgs&) { return Value(py_len(v)); }},
      {"list", [](const Value& v, CallArgs&) { return Value::new_list(v.iterate()); }},
      {"lower", [](const Value& v, CallArgs&) { return Value(py_lower(v.to_str())); }},
      {"map",
       [](const Value& v, CallArgs& a) {
         std::vector<Value> out;
         if (a.positional.empty()) {
           Value attribute = arg(a, 99, "attribute");
           Value fallback = arg(a, 99, "default");
           for (const auto& item : v.iterate()) {
             Value x = get_path(item, attribute);
             out.push_back(x.is_undefined() && !fallback.is_none() ? fallback : x);
           }
         } else {
           std::string name = str_arg(a.positional[0], "filter name");
           if (!has_filter(name)) render_fail(fmt::format("No filter named '{}'.", name));
           CallArgs rest{std::vector<Value>(a.positional.begin() + 1, a.positional.end()), a.keyword};
           for (const auto& item : v.iterate()) out.push_back(apply_filter(name, item, rest));
         }
         return Value::new_list(std::move(out));
       }},
      {"max", [](const Value& v, CallArgs& a) { return min_or_max(v, a, true); }},
      {"min", [](const Value& v, CallArgs& a) { return min_or_max(v, a, false); }},
      {"reject", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, false, false)); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, false, true)); }},
      {"replace",
       [](const Value& v, CallArgs& a) {
         Value count = arg(a, 2, "count");
         return Value(py_replace(v.to_str(), arg(a, 0, "old").to_str(), arg(a, 1, "new").to_str(),
                                 count.is_none() ? -1 : int_arg(count, "count")));
       }},
      {"reverse",
       [](const Value& v, CallArgs&) {
         if (v.is_string()) {
           std::u32string u = utf8_decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value(utf8_encode(u));
         }
         auto items = v.iterate();
         std::reverse(items.begin(), items.end());
         return Value::new_list(std::move(items));
       }},
      {"round",
       [](const Value& v, CallArgs& a) {
         int64_t precision = int_arg(arg(a, 0, "precision", Value(0)), "precision");
         std::string method = arg(a, 1, "method", Value("common")).to_str();
         v.require_defined();
         if (!v.is_number())
           render_fail(fmt::format("TypeError: type {} doesn't define __round__ method", v.type_name()));
         if (method == "common") return py_round(v, precision);
         if (method != "ceil" && method != "floor")
           render_fail("FilterArgumentError: method must be common, ceil or floor");
         double scale = std::pow(10.0, double(precision));
         double x = v.as_float() * scale;
         return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
       }},
      {"safe", [](const Value& v, CallArgs&) { return v; }},
      {"select", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, true, false)); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, true, true)); }},
      {"sort",
       [](const Value& v, CallArgs& a) {
         bool reverse = arg(a, 0, "reverse", Value(false)).truthy();
         bool case_sensitive = arg(a, 1, "case_sensitive", Value(false)).truthy();
         Value attribute = arg(a, 2, "attribute");
         return Value::new_list(sorted(v.iterate(), reverse, [&](const Value& item) {
           Value k = attribute.is_none() ? item : get_path(item, attribute);
           return case_sensitive ? k : ignore_case(k);
         }));
       }},
      {"string", [](const Value& v, CallArgs&) { return Value(v.to_str()); }},
      {"sum",
       [](const Value& v, CallArgs& a) {
         Value attribute = arg(a, 0, "attribute");
         Value total = arg(a, 1, "start", Value(0));
         for (const auto& item : v.iterate())
           total = binary_op("+", total, attribute.is_none() ? item : get_path(item, attribute));
         return total;
       }},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", [](const Value& v,
                  CallArgs& a) { return Value(py_strip(v.to_str(), optional_str(arg(a, 0, "chars")), true, true)); }},
      {"truncate", filter_truncate},
      {"unique",
       [](const Value& v, CallArgs& a) {
         bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
         Value attribute = arg(a, 1, "attribute");
         std::vector<Value> out, seen;
         for (const auto& item : v.iterate()) {
           Value k = attribute.is_none() ? item : get_path(item, attribute);
           if (!case_sensitive) k = ignore_case(k);
           if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); })) continue;
           seen.push_back(k);
           out.push_back(item);
         }
         return Value::new_list(std::move(out));
       }},
      {"upper", [](const Value& v, CallArgs&) { return Value(py_upper(v.to_str())); }},
      {"wordcount",
       [](const Value& v, CallArgs&) {
         int64_t words = 0;
         bool in_word = false;
         for (char32_t c : utf8_decode(v.to_str())) {
           bool word_char = is_alpha(c) || (c >= '0' && c <= '9') || c == '_';
           if (word_char && !in_word) ++words;
           in_word = word_char;
         }
         return Value(words);
       }},
  };
  return table;
}

// jinja2's other names for the same filters and tests.
std::string_view canonical_filter(std::string_view name) {
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
}

// How many arguments each filter's Python signature takes after its input;
// absent: any number (format, map, select and the like).
int max_arguments(std::string_view name) {
  static const std::unordered_map<std::string_view, int> table = {
      {"abs", 0},     {"attr", 1},     {"batch", 2},    {"capitalize", 0}, {"center", 1},  {"count", 0},
      {"default", 2}, {"dictsort", 3}, {"escape", 0},   {"first", 0},      {"float", 1},   {"groupby", 3},
      {"indent", 3},  {"int", 2},      {"items", 0},    {"join", 2},       {"last", 0},    {"length", 0},
      {"list", 0},    {"lower", 0},    {"max", 2},      {"min", 2},        {"replace", 3}, {"reverse", 0},
      {"round", 2},   {"safe", 0},     {"sort", 3},     {"string", 0},     {"sum", 2},     {"title", 0},
      {"tojson", 4},  {"trim", 1},     {"truncate", 4}, {"unique", 2},     {"upper", 0},   {"wordcount", 0}};
  auto it = table.find(name);
  return it == table.end() ? -1 : it->second;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(canonical_filter(name)) != 0; }
Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  std::string_view canonical = canonical_filter(name);
  auto it = filters().find(canonical);
  if (it == filters().end()) render_fail(fmt::format("No filter named '{}'.", name));
  int most = max_arguments(canonical);
  if (most >= 0 && args.positional.size() + args.keyword.size() > size_t(most))
    render_fail(fmt::format("TypeError: filter '{}' takes at most {} argument(s), {} given", name, most,
                            args.positional.size() + args.keyword.size()));
  return it->second(input, args);
}

}  // namespace nt::chat
