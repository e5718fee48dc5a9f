// Filters, tests, methods and attribute access; each follows the jinja2 3.1
// (or CPython) function of the same name.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace nt::chat {
namespace {

Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback = Value(nullptr)) {
  const Value* v = args.get(index, name);
  return v ? *v : fallback;
}

int64_t int_arg(const Value& v, std::string_view what) {
  if (!v.is_int() && !v.is_bool())
    render_fail(fmt::format("TypeError: {} must be an integer, not '{}'", what, v.type_name()));
  return v.as_int();
}

std::optional<std::string> optional_str(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) render_fail(fmt::format("TypeError: expected a string, not '{}'", v.type_name()));
  return v.str();
}

const std::string& str_arg(const Value& v, std::string_view what) {
  if (!v.is_string()) render_fail(fmt::format("TypeError: {} must be str, not {}", what, v.type_name()));
  return v.str();
}

Value list_of(std::vector<std::string> parts) {
  std::vector<Value> items(parts.begin(), parts.end());
  return Value::new_list(std::move(items));
}

Value pair(Value a, Value b) { return Value::new_list({std::move(a), std::move(b)}, true); }

// Python's len().
int64_t length(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return int64_t(utf8_length(v.str()));
    case Value::Type::List: return int64_t(v.list().items.size());
    case Value::Type::Dict:
      if (!v.dict().is_namespace) return int64_t(v.dict().entries.size());
      break;
    default: break;
  }
  render_fail(fmt::format("TypeError: object of type '{}' has no len()", v.type_name()));
}

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
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
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

// str.format with automatic or numbered fields and keyword fields; no format specs
// beyond the empty one.
std::string py_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}' ) {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else render_fail("ValueError: Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) render_fail("ValueError: Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (!spec.empty()) render_fail(fmt::format("format spec ':{}' is not supported", spec));
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t n = std::stoul(field);
      v = n < args.positional.size() ? &args.positional[n] : nullptr;
    } else {
      for (const auto& [k, kv] : args.keyword)
        if (k == field) v = &kv;
      if (!v) render_fail(fmt::format("KeyError: '{}'", field));
    }
    if (!v) render_fail("IndexError: Replacement index out of range for positional args tuple");
    out += v->to_str();
  }
  return out;
}

std::string center(const std::string& s, int64_t width, std::string_view fill = " ") {
  int64_t n = int64_t(utf8_length(s));
  if (width <= n) return s;
  int64_t margin = width - n;
  int64_t left = margin / 2 + (margin & width & 1);  // CPython's pad split
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  if (affix.is_list() && affix.list().tuple) {
    for (const auto& a : affix.list().items)
      if (starts_or_ends(s, a, start)) return true;
    return false;
  }
  const std::string& x = str_arg(affix, start ? "startswith first arg" : "endswith first arg");
  if (x.size() > s.size()) return false;
  return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// Python str methods templates call.
Value call_str_method(const std::string& s, const std::string& name, CallArgs& args) {
  auto chars = [&] { return optional_str(arg(args, 0, "chars")); };
  if (name == "strip") return Value(py_strip(s, chars(), true, true));
  if (name == "lstrip") return Value(py_strip(s, chars(), true, false));
  if (name == "rstrip") return Value(py_strip(s, chars(), false, true));
  if (name == "split" || name == "rsplit") {
    auto sep = optional_str(arg(args, 0, "sep"));
    int64_t maxsplit = int_arg(arg(args, 1, "maxsplit", Value(-1)), "maxsplit");
    return list_of(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") return list_of(py_splitlines(s));
  if (name == "startswith" || name == "endswith") return Value(starts_or_ends(s, arg(args, 0, "prefix"), name == "startswith"));
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    return Value(py_replace(s, str_arg(arg(args, 0, "old"), "replace() argument 1"),
                            str_arg(arg(args, 1, "new"), "replace() argument 2"),
                            int_arg(arg(args, 2, "count", Value(-1)), "count")));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    int64_t at = py_find(s, str_arg(arg(args, 0, "sub"), "find() argument"), name[0] == 'r');
    if (at < 0 && name.find("index") != std::string::npos) render_fail("ValueError: substring not found");
    return Value(at);
  }
  if (name == "count") return Value(int64_t(py_count(s, str_arg(arg(args, 0, "sub"), "count() argument"))));
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : arg(args, 0, "iterable").iterate()) {
      if (!first) out += s;
      first = false;
      out += str_arg(item, "sequence item");
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(py_format(s, args));
  if (name == "center" || name == "ljust" || name == "rjust") {
    int64_t width = int_arg(arg(args, 0, "width"), "width");
    std::string fill = arg(args, 1, "fillchar", Value(" ")).to_str();
    int64_t pad = std::max<int64_t>(0, width - int64_t(utf8_length(s)));
    if (name == "center") return Value(center(s, width, fill));
    std::string padding;
    for (int64_t i = 0; i < pad; ++i) padding += fill;
    return Value(name == "ljust" ? s + padding : padding + s);
  }
  if (name == "zfill") {
    int64_t width = int_arg(arg(args, 0, "width"), "width");
    int64_t pad = std::max<int64_t>(0, width - int64_t(utf8_length(s)));
    bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value((sign ? s.substr(0, 1) : "") + std::string(pad, '0') + (sign ? s.substr(1) : s));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& affix = str_arg(arg(args, 0, "affix"), name);
    bool prefix = name == "removeprefix";
    if (starts_or_ends(s, Value(affix), prefix) && !affix.empty())
      return Value(prefix ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
    return Value(s);
  }
  std::u32string u = utf8_decode(s);
  auto all = [&](auto pred) { return !u.empty() && std::all_of(u.begin(), u.end(), pred); };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value(all([](char32_t c) { return is_alpha(c); }));
  if (name == "isalnum") return Value(all([](char32_t c) { return is_alpha(c) || (c >= '0' && c <= '9'); }));
  if (name == "isspace") return Value(all([](char32_t c) { return is_python_space(c); }));
  if (name == "isupper" || name == "islower") {
    bool upper = name == "isupper", cased = false;
    for (char32_t c : u) {
      if (to_upper(c) == c && to_lower(c) == c) continue;
      cased = true;
      if ((upper ? to_upper(c) : to_lower(c)) != c) return Value(false);
    }
    return Value(cased);
  }
  render_fail(fmt::format("'str object' has no attribute '{}'", name));
}

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "format", "center", "ljust", "rjust",
    "zfill", "removeprefix", "removesuffix", "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace",
    "isupper", "islower"};
// Methods ImmutableSandboxedEnvironment refuses because they mutate.
constexpr std::string_view kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kUnsafeList[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool among(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value unsafe(const Value& object, const std::string& name) {
  std::string message = fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name,
                                    object.type_name());
  return Value::function(name, [message](CallArgs&) -> Value { render_fail(message); });
}

Value dict_method(const Value& object, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values" || name == "copy") {
    return Value::function(name, [object, name](CallArgs&) {
      if (name == "copy") {
        auto d = std::make_shared<DictData>(object.dict());
        return Value(std::move(d));
      }
      std::vector<Value> out;
      for (const auto& [k, v] : object.dict().entries)
        out.push_back(name == "items" ? pair(k, v) : name == "keys" ? k : v);
      return Value::new_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function(name, [object](CallArgs& args) {
      const Value* found = object.dict().find(arg(args, 0, "key"));
      return found ? *found : arg(args, 1, "default");
    });
  }
  if (among(kUnsafeDict, name)) return unsafe(object, name);
  return Value();
}

Value list_method(const Value& object, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function(name, [object, name](CallArgs& args) {
      Value x = arg(args, 0, "value");
      const auto& items = object.list().items;
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!values_equal(items[i], x)) continue;
        if (name == "index") return Value(int64_t(i));
        ++n;
      }
      if (name == "index") render_fail(fmt::format("ValueError: {} is not in list", x.repr()));
      return Value(n);
    });
  }
  if (name == "copy") return Value::function(name, [object](CallArgs&) { return Value::new_list(object.list().items); });
  if (!object.list().tuple && among(kUnsafeList, name)) return unsafe(object, name);
  return Value();
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
}

// Python's getattr alone: methods, namespace attributes; undefined (not an
// error) when absent, so callers can fall back to items.
Value python_getattr(const Value& object, const std::string& name) {
  switch (object.type()) {
    case Value::Type::String:
      if (among(kStrMethods, name))
        return Value::function(name, [s = object.str(), name](CallArgs& args) { return call_str_method(s, name, args); });
      break;
    case Value::Type::Dict:
      if (object.dict().is_namespace) {
        if (const Value* v = object.dict().find(std::string_view(name))) return *v;
        break;
      }
      return dict_method(object, name);
    case Value::Type::List:
      return list_method(object, name);
    default:
      break;
  }
  return Value();
}

// Python's `seq[index]` for an int index: nullptr when out of range.
std::optional<Value> index_sequence(const Value& object, int64_t index) {
  if (object.is_list()) {
    const auto& items = object.list().items;
    if (index < 0) index += int64_t(items.size());
    if (index < 0 || index >= int64_t(items.size())) return std::nullopt;
    return items[size_t(index)];
  }
  std::u32string u = utf8_decode(object.str());
  if (index < 0) index += int64_t(u.size());
  if (index < 0 || index >= int64_t(u.size())) return std::nullopt;
  return Value(utf8_encode(u.substr(size_t(index), 1)));
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // a surrogate pair, as Python writes astral characters
            char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", uint32_t(c));
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  return out + "\"";
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(f);
}

void write_json(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  switch (v.type()) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: out += json_float(v.as_float()); return;
    case Value::Type::String: out += json_string(v.str(), style.ensure_ascii); return;
    case Value::Type::List:
    case Value::Type::Dict: {
      bool is_list = v.is_list();
      if (!is_list && v.dict().is_namespace) break;
      size_t n = is_list ? v.list().items.size() : v.dict().entries.size();
      if (n == 0) {
        out += is_list ? "[]" : "{}";
        return;
      }
      std::string newline, separator = style.item_separator;
      if (style.indent) {
        newline = "\n";
        for (int i = 0; i <= depth; ++i) newline += *style.indent;
        separator += newline;
      }
      out += is_list ? "[" : "{";
      out += newline;
      if (is_list) {
        for (size_t i = 0; i < n; ++i) {
          if (i) out += separator;
          write_json(out, v.list().items[i], style, depth + 1);
        }
      } else {
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, item] : v.dict().entries) {
          std::string key;
          switch (k.type()) {
            case Value::Type::String: key = k.str(); break;
            case Value::Type::Bool: key = k.as_bool() ? "true" : "false"; break;
            case Value::Type::None: key = "null"; break;
            case Value::Type::Int: key = std::to_string(k.as_int()); break;
            case Value::Type::Float: key = json_float(k.as_float()); break;
            default:
              render_fail(fmt::format("TypeError: keys must be str, int, float, bool or None, not {}", k.type_name()));
          }
          entries.emplace_back(std::move(key), &item);
        }
        if (style.sort_keys)
          std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += separator;
          out += json_string(entries[i].first, style.ensure_ascii);
          out += style.key_separator;
          write_json(out, *entries[i].second, style, depth + 1);
        }
      }
      if (style.indent) {
        out += "\n";
        for (int i = 0; i < depth; ++i) out += *style.indent;
      }
      out += is_list ? "]" : "}";
      return;
    }
    default:
      break;
  }
  render_fail(fmt::format("TypeError: Object of type {} is not JSON serializable", v.type_name()));
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
  std::string indention = width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(0, int_arg(width, "width"))), ' ');
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
  for (size_t i = first_test_arg + 1; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
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
      {"abs", [](const Value& v, CallArgs&) {
         v.require_defined();
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         render_fail(fmt::format("TypeError: bad operand type for abs(): '{}'", v.type_name()));
       }},
      {"attr", [](const Value& v, CallArgs& a) { return python_getattr(v, str_arg(arg(a, 0, "name"), "attribute name")); }},
      {"batch", [](const Value& v, CallArgs& a) {
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
      {"center", [](const Value& v, CallArgs& a) { return Value(center(v.to_str(), int_arg(arg(a, 0, "width", Value(80)), "width"))); }},
      {"count", [](const Value& v, CallArgs&) { return Value(length(v)); }},
      {"default", [](const Value& v, CallArgs& a) {
         bool boolean = arg(a, 1, "boolean", Value(false)).truthy();
         return v.is_undefined() || (boolean && !v.truthy()) ? arg(a, 0, "default_value", Value("")) : v;
       }},
      {"dictsort", [](const Value& v, CallArgs& a) {
         bool case_sensitive = arg(a, 0, "case_sensitive", Value(false)).truthy();
         std::string by = arg(a, 1, "by", Value("key")).to_str();
         if (by != "key" && by != "value") render_fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
         bool reverse = arg(a, 2, "reverse", Value(false)).truthy();
         if (!v.is_mapping()) render_fail("TypeError: dictsort needs a mapping");
         std::vector<Value> items;
         for (const auto& [k, item] : v.dict().entries) items.push_back(pair(k, item));
         return Value::new_list(sorted(std::move(items), reverse, [&](const Value& p) {
           const Value& k = p.list().items[by == "key" ? 0 : 1];
           return case_sensitive ? k : ignore_case(k);
         }));
       }},
      {"escape", [](const Value& v, CallArgs&) { return Value(html_escape(v.to_str())); }},
      {"first", [](const Value& v, CallArgs&) {
         auto items = v.iterate();
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"float", [](const Value& v, CallArgs& a) {
         Value fallback = arg(a, 0, "default", Value(0.0));
         if (v.is_number()) return Value(v.as_float());
         if (v.is_string())
           if (auto f = parse_float(v.str())) return Value(*f);
         return fallback;
       }},
      {"format", [](const Value& v, CallArgs& a) {
         if (!a.keyword.empty()) render_fail("format filter keyword arguments are not supported");
         return binary_op("%", Value(v.to_str()), Value::new_list(a.positional, true));
       }},
      {"groupby", [](const Value& v, CallArgs& a) {
         Value attribute = arg(a, 0, "attribute");
         Value fallback = arg(a, 1, "default");
         bool case_sensitive = arg(a, 2, "case_sensitive", Value(false)).truthy();
         auto key_of = [&](const Value& item) {
           Value k = get_path(item, attribute);
           if (k.is_undefined() && !fallback.is_none()) k = fallback;
           return k;
         };
         auto compare_key = [&](const Value& item) { return case_sensitive ? key_of(item) : ignore_case(key_of(item)); };
         std::vector<Value> groups, members;
         Value current;
         for (const auto& item : sorted(v.iterate(), false, compare_key)) {
           Value k = compare_key(item);
           if (!members.empty() && !values_equal(k, current)) {
             Value grouper = key_of(members[0]);  // the first member's own key, not the lowered one
             groups.push_back(pair(std::move(grouper), Value::new_list(std::exchange(members, {}))));
           }
           current = k;
           members.push_back(item);
         }
         if (!members.empty()) {
           Value grouper = key_of(members[0]);
           groups.push_back(pair(std::move(grouper), Value::new_list(std::move(members))));
         }
         return Value::new_list(std::move(groups));
       }},
      {"indent", filter_indent},
      {"int", [](const Value& v, CallArgs& a) {
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
      {"items", [](const Value& v, CallArgs&) {
         if (v.is_undefined()) return Value::new_list();
         if (!v.is_mapping()) render_fail("TypeError: Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, item] : v.dict().entries) out.push_back(pair(k, item));
         return Value::new_list(std::move(out));
       }},
      {"join", [](const Value& v, CallArgs& a) {
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
      {"last", [](const Value& v, CallArgs&) {
         auto items = v.iterate();
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](const Value& v, CallArgs&) { return Value(length(v)); }},
      {"list", [](const Value& v, CallArgs&) { return Value::new_list(v.iterate()); }},
      {"lower", [](const Value& v, CallArgs&) { return Value(py_lower(v.to_str())); }},
      {"map", [](const Value& v, CallArgs& a) {
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
      {"replace", [](const Value& v, CallArgs& a) {
         Value count = arg(a, 2, "count");
         return Value(py_replace(v.to_str(), arg(a, 0, "old").to_str(), arg(a, 1, "new").to_str(),
                                 count.is_none() ? -1 : int_arg(count, "count")));
       }},
      {"reverse", [](const Value& v, CallArgs&) {
         if (v.is_string()) {
           std::u32string u = utf8_decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value(utf8_encode(u));
         }
         auto items = v.iterate();
         std::reverse(items.begin(), items.end());
         return Value::new_list(std::move(items));
       }},
      {"round", [](const Value& v, CallArgs& a) {
         int64_t precision = int_arg(arg(a, 0, "precision", Value(0)), "precision");
         std::string method = arg(a, 1, "method", Value("common")).to_str();
         v.require_defined();
         if (!v.is_number()) render_fail(fmt::format("TypeError: type {} doesn't define __round__ method", v.type_name()));
         if (method == "common") return py_round(v, precision);
         if (method != "ceil" && method != "floor") render_fail("FilterArgumentError: method must be common, ceil or floor");
         double scale = std::pow(10.0, double(precision));
         double x = v.as_float() * scale;
         return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
       }},
      {"safe", [](const Value& v, CallArgs&) { return v; }},
      {"select", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, true, false)); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return Value::new_list(select_items(v, a, true, true)); }},
      {"sort", [](const Value& v, CallArgs& a) {
         bool reverse = arg(a, 0, "reverse", Value(false)).truthy();
         bool case_sensitive = arg(a, 1, "case_sensitive", Value(false)).truthy();
         Value attribute = arg(a, 2, "attribute");
         return Value::new_list(sorted(v.iterate(), reverse, [&](const Value& item) {
           Value k = attribute.is_none() ? item : get_path(item, attribute);
           return case_sensitive ? k : ignore_case(k);
         }));
       }},
      {"string", [](const Value& v, CallArgs&) { return Value(v.to_str()); }},
      {"sum", [](const Value& v, CallArgs& a) {
         Value attribute = arg(a, 0, "attribute");
         Value total = arg(a, 1, "start", Value(0));
         for (const auto& item : v.iterate()) total = binary_op("+", total, attribute.is_none() ? item : get_path(item, attribute));
         return total;
       }},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", [](const Value& v, CallArgs& a) { return Value(py_strip(v.to_str(), optional_str(arg(a, 0, "chars")), true, true)); }},
      {"truncate", filter_truncate},
      {"unique", [](const Value& v, CallArgs& a) {
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
      {"wordcount", [](const Value& v, CallArgs&) {
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
      {"divisibleby", [](const Value& v, CallArgs& a) {
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
      {"iterable", [](const Value& v, CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
       }},
      {"le", [](const Value& v, CallArgs& a) { return !values_less(test_arg(a), v); }},
      {"lower", [](const Value& v, CallArgs& a) { return call_str_method(v.to_str(), "islower", a).as_bool(); }},
      {"lt", [](const Value& v, CallArgs& a) { return values_less(v, test_arg(a)); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_mapping(); }},
      {"ne", [](const Value& v, CallArgs& a) { return !values_equal(v, test_arg(a)); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"odd", [](const Value& v, CallArgs&) { return binary_op("%", v, Value(2)).as_float() != 0.0; }},
      {"sameas", [](const Value& v, CallArgs& a) {
         const Value& other = test_arg(a);
         if (v.identity() || other.identity()) return v.identity() == other.identity();
         return v.type() == other.type() && values_equal(v, other);
       }},
      {"sequence", [](const Value& v, CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
       }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"test", [](const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); }},
      {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, CallArgs& a) { return call_str_method(v.to_str(), "isupper", a).as_bool(); }},
  };
  return table;
}

// jinja2's other names for the same filters and tests.
std::string_view canonical_filter(std::string_view name) {
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return name;
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

bool has_filter(std::string_view name) { return filters().count(canonical_filter(name)) != 0; }
bool has_test(std::string_view name) { return tests().count(canonical_test(name)) != 0; }

Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  auto it = filters().find(canonical_filter(name));
  if (it == filters().end()) render_fail(fmt::format("No filter named '{}'.", name));
  return it->second(input, args);
}

bool apply_test(std::string_view name, const Value& value, CallArgs& args) {
  auto it = tests().find(canonical_test(name));
  if (it == tests().end()) render_fail(fmt::format("No test named '{}'.", name));
  return it->second(value, args);
}

Value get_attribute(const Value& object, const std::string& name) {
  object.require_defined();
  Value v = python_getattr(object, name);
  if (!v.is_undefined()) return v;
  if (object.is_mapping())
    if (const Value* item = object.dict().find(std::string_view(name))) return *item;
  return no_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  object.require_defined();
  if (object.is_mapping()) {
    if (const Value* item = object.dict().find(key)) return *item;
  } else if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    if (auto item = index_sequence(object, key.as_int())) return *item;
    return Value::undefined(fmt::format("'{} object' has no element {}", object.type_name(), key.as_int()));
  }
  if (key.is_string()) {
    Value v = python_getattr(object, key.str());
    if (!v.is_undefined()) return v;
    return no_attribute(object, key.str());
  }
  return Value::undefined(fmt::format("'{} object' has no element {}", object.type_name(), key.repr()));
}

Value get_slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  object.require_defined();
  if (!object.is_list() && !object.is_string()) return Value::undefined(fmt::format("'{} object' is not subscriptable", object.type_name()));
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) render_fail("TypeError: slice indices must be integers or None");
    return v.as_int();
  };
  std::u32string chars;
  int64_t n;
  if (object.is_string()) {
    chars = utf8_decode(object.str());
    n = int64_t(chars.size());
  } else {
    n = int64_t(object.list().items.size());
  }
  int64_t step = bound(step_v).value_or(1);
  if (step == 0) render_fail("ValueError: slice step cannot be zero");
  // CPython's PySlice_AdjustIndices
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(bound(start_v), step < 0 ? n - 1 : 0);
  int64_t stop = adjust(bound(stop_v), step < 0 ? -1 : n);
  std::vector<Value> items;
  std::u32string out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_string()) out += chars[size_t(i)];
    else items.push_back(object.list().items[size_t(i)]);
  }
  if (object.is_string()) return Value(utf8_encode(out));
  return Value::new_list(std::move(items), object.list().tuple);
}

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  write_json(out, value, style, 0);
  return out;
}

}  // namespace nt::chat
