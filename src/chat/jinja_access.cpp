// Attribute and item access with jinja2's fallbacks, Python's str, dict and
// list methods under the immutable sandbox, and the argument helpers the
// builtins share.
#include <fmt/format.h>

#include <algorithm>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace nt::chat {

Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback) {
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

std::string str_arg(const Value& v, std::string_view what) {
  if (!v.is_string()) render_fail(fmt::format("TypeError: {} must be str, not {}", what, v.type_name()));
  return v.str();
}

Value list_of(std::vector<std::string> parts) {
  std::vector<Value> items(parts.begin(), parts.end());
  return Value::new_list(std::move(items));
}

Value tuple_pair(Value a, Value b) { return Value::new_list({std::move(a), std::move(b)}, true); }

// Python's len().
int64_t py_len(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
      return 0;
    case Value::Type::String:
      return int64_t(utf8_length(v.str()));
    case Value::Type::List:
      return int64_t(v.list().items.size());
    case Value::Type::Dict:
      if (!v.dict().is_namespace) return int64_t(v.dict().entries.size());
      break;
    default:
      break;
  }
  render_fail(fmt::format("TypeError: object of type '{}' has no len()", v.type_name()));
}

std::string py_center(const std::string& s, int64_t width, std::string_view fill) {
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

namespace {

// str.format with automatic or numbered fields and keyword fields; no format specs
// beyond the empty one.
std::string py_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}')
        ++i;
      else
        render_fail("ValueError: Single '}' encountered in format string");
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

}  // namespace

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
  if (name == "startswith" || name == "endswith")
    return Value(starts_or_ends(s, arg(args, 0, "prefix"), name == "startswith"));
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
    if (name == "center") return Value(py_center(s, width, fill));
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

namespace {

constexpr std::string_view kStrMethods[] = {
    "strip",     "lstrip",  "rstrip",  "split",        "rsplit",       "splitlines", "startswith",
    "endswith",  "upper",   "lower",   "title",        "capitalize",   "replace",    "find",
    "rfind",     "index",   "rindex",  "count",        "join",         "format",     "center",
    "ljust",     "rjust",   "zfill",   "removeprefix", "removesuffix", "isdigit",    "isnumeric",
    "isdecimal", "isalpha", "isalnum", "isspace",      "isupper",      "islower"};
// Methods ImmutableSandboxedEnvironment refuses because they mutate.
constexpr std::string_view kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kUnsafeList[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool among(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value unsafe(const Value& object, const std::string& name) {
  std::string message =
      fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, object.type_name());
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
        out.push_back(name == "items" ? tuple_pair(k, v) : name == "keys" ? k : v);
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
  if (name == "copy")
    return Value::function(name, [object](CallArgs&) { return Value::new_list(object.list().items); });
  if (!object.list().tuple && among(kUnsafeList, name)) return unsafe(object, name);
  return Value();
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
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

}  // namespace

// Python's getattr alone: methods, namespace attributes; undefined (not an
// error) when absent, so callers can fall back to items.
Value python_getattr(const Value& object, const std::string& name) {
  switch (object.type()) {
    case Value::Type::String:
      if (among(kStrMethods, name))
        return Value::function(name,
                               [s = object.str(), name](CallArgs& args) { return call_str_method(s, name, args); });
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
  // jinja2 slices with Python's own subscription, not its forgiving getitem.
  if (!object.is_list() && !object.is_string())
    render_fail(fmt::format("TypeError: '{}' object is not subscriptable", object.type_name()));
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      render_fail("TypeError: slice indices must be integers or None or have an __index__ method");
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
    if (object.is_string())
      out += chars[size_t(i)];
    else
      items.push_back(object.list().items[size_t(i)]);
  }
  if (object.is_string()) return Value(utf8_encode(out));
  return Value::new_list(std::move(items), object.list().tuple);
}

}  // namespace nt::chat
