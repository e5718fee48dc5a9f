#include "chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_strings.h"

namespace nt::chat {

void render_fail(std::string message) { throw RenderFailure{std::move(message)}; }

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  if (const Value* existing = find(key)) {
    const_cast<Value&>(*existing) = std::move(value);
    return;
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::new_list(std::vector<Value> items, bool tuple) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->tuple = tuple;
  return Value(std::move(data));
}

Value Value::new_dict() { return Value(std::make_shared<DictData>()); }

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(call)}));
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(nullptr);
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(int64_t(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return new_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto data = std::make_shared<DictData>();
      data->entries.reserve(json.size());
      for (const auto& [k, v] : json.items()) data->entries.emplace_back(Value(k), from_json(v));
      return Value(std::move(data));
    }
    default:
      return Value(nullptr);  // binary and discarded values never come from JSON text
  }
}

const void* Value::identity() const {
  switch (type()) {
    case Type::List:
      return &list();
    case Type::Dict:
      return &dict();
    case Type::Callable:
      return &callable();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (type()) {
    case Type::Undefined:
    case Type::None:
      return false;
    case Type::Bool:
      return as_bool();
    case Type::Int:
      return as_int() != 0;
    case Type::Float:
      return as_float() != 0.0;
    case Type::String:
      return !str().empty();
    case Type::List:
      return !list().items.empty();
    case Type::Dict:
      return dict().is_namespace || !dict().entries.empty();
    case Type::Callable:
      return true;
  }
  return false;
}

std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string_view text(buf, result.ptr - buf);
  std::string sign;
  if (text.front() == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e))
    if (c != '.') digits += c;
  int exponent = std::stoi(std::string(text.substr(e + 1)));
  int point = exponent + 1;  // digits before the decimal point
  int n = int(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
    if (point >= n) return sign + digits + std::string(point - n, '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  std::string mantissa = digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "");
  return fmt::format("{}{}e{}{:02d}", sign, mantissa, exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string Value::to_str() const {
  switch (type()) {
    case Type::Undefined:
      return "";
    case Type::None:
      return "None";
    case Type::Bool:
      return as_bool() ? "True" : "False";
    case Type::Int:
      return std::to_string(as_int());
    case Type::Float:
      return python_float_repr(as_float());
    case Type::String:
      return str();
    default:
      return repr();
  }
}

// Containers being printed: a namespace can hold itself (ns.self = ns), and
// Python prints such a cycle as {...} / [...] instead of recursing forever.
static thread_local std::vector<const void*> repr_in_progress;

namespace {
class ReprGuard {
 public:
  explicit ReprGuard(const void* object)
      : cycle_(std::find(repr_in_progress.begin(), repr_in_progress.end(), object) != repr_in_progress.end()) {
    if (!cycle_) repr_in_progress.push_back(object);
  }
  ~ReprGuard() {
    if (!cycle_) repr_in_progress.pop_back();
  }
  ReprGuard(const ReprGuard&) = delete;
  ReprGuard& operator=(const ReprGuard&) = delete;
  bool cycle() const { return cycle_; }

 private:
  bool cycle_;
};
}  // namespace

std::string Value::repr() const {
  switch (type()) {
    case Type::Undefined:
      return "Undefined";
    case Type::String:
      return py_repr(str());
    case Type::List: {
      const auto& l = list();
      ReprGuard guard(&l);
      if (guard.cycle()) return l.tuple ? "(...)" : "[...]";
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ")" : "]";
      return out;
    }
    case Type::Dict: {
      const auto& d = dict();
      ReprGuard guard(&d);
      if (guard.cycle()) return d.is_namespace ? "<Namespace {...}>" : "{...}";
      std::string out = d.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < d.entries.size(); ++i) {
        if (i) out += ", ";
        out += d.entries[i].first.repr() + ": " + d.entries[i].second.repr();
      }
      out += d.is_namespace ? "}>" : "}";
      return out;
    }
    case Type::Callable:
      return fmt::format("<function {}>", callable().name);
    default:
      return to_str();
  }
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::Undefined:
      return "Undefined";
    case Type::None:
      return "NoneType";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
    case Type::String:
      return "str";
    case Type::List:
      return list().tuple ? "tuple" : "list";
    case Type::Dict:
      return dict().is_namespace ? "Namespace" : "dict";
    case Type::Callable:
      return "function";
  }
  return "object";
}

void Value::require_defined() const {
  if (is_undefined()) render_fail(undefined_hint());
}

std::vector<Value> Value::iterate() const {
  switch (type()) {
    case Type::Undefined:
      return {};
    case Type::List:
      return list().items;
    case Type::Dict: {
      if (dict().is_namespace) break;
      std::vector<Value> keys;
      keys.reserve(dict().entries.size());
      for (const auto& entry : dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Type::String: {
      std::vector<Value> chars;
      std::string one;
      for (char32_t c : utf8_decode(str())) {
        one.clear();
        utf8_append(one, c);
        chars.emplace_back(one);
      }
      return chars;
    }
    default:
      break;
  }
  render_fail(fmt::format("TypeError: '{}' object is not iterable", type_name()));
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None:
      return true;
    case Value::Type::String:
      return a.str() == b.str();
    case Value::Type::List: {
      const auto &x = a.list(), &y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!values_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Type::Dict: {
      const auto &x = a.dict(), &y = b.dict();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool values_less(const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return values_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  render_fail(
      fmt::format("TypeError: '<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

bool value_contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined:
      return false;
    case Value::Type::String:
      if (!item.is_string()) {
        item.require_defined();
        render_fail(fmt::format("TypeError: 'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::List:
      for (const auto& x : container.list().items)
        if (values_equal(x, item)) return true;
      return false;
    case Value::Type::Dict:
      if (!container.dict().is_namespace) return container.dict().find(item) != nullptr;
      break;
    default:
      break;
  }
  render_fail(fmt::format("TypeError: argument of type '{}' is not iterable", container.type_name()));
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python ints are unbounded; ours are 64-bit, so an overflow fails instead of wrapping.
[[noreturn]] static void overflow() { render_fail("OverflowError: integer result does not fit in 64 bits"); }

static Value int_arithmetic(char op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflowed = op == '+'   ? __builtin_add_overflow(x, y, &r)
                    : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                : __builtin_mul_overflow(x, y, &r);
  if (overflowed) overflow();
  return Value(r);
}

static Value repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  return Value::new_list(std::move(items), seq.list().tuple);
}

// printf-style `str % args`: Python follows C's printf for the numeric
// conversions, so snprintf formats them; %s and %r pad by code points.
static std::string percent_format(const std::string& format, const Value& args) {
  bool mapping = args.is_mapping();
  std::vector<Value> values = args.is_list() && args.list().tuple ? args.list().items : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i == format.size()) render_fail("ValueError: incomplete format");
    const Value* v = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) render_fail("ValueError: incomplete format key");
      if (!mapping) render_fail("TypeError: format requires a mapping");
      v = args.dict().find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!v) render_fail(fmt::format("KeyError: '{}'", format.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    std::string flags, width, precision;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
      flags += format[i++];
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') width += format[i++];
    if (i < format.size() && format[i] == '.') {
      precision = ".";
      while (++i < format.size() && format[i] >= '0' && format[i] <= '9') precision += format[i];
    }
    if (i == format.size()) render_fail("ValueError: incomplete format");
    char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!v) {
      if (mapping || next >= values.size()) render_fail("TypeError: not enough arguments for format string");
      v = &values[next++];
    }
    std::string body;
    if (conv == 's' || conv == 'r') {
      body = conv == 's' ? v->to_str() : v->repr();
      if (precision.size() > 1) body = utf8_encode(utf8_decode(body).substr(0, std::stoul(precision.substr(1))));
      size_t n = utf8_length(body), w = width.empty() ? 0 : std::stoul(width);
      if (n < w)
        body = flags.find('-') != std::string::npos ? body + std::string(w - n, ' ') : std::string(w - n, ' ') + body;
    } else if (std::string_view("diouxXeEfFgG").find(conv) != std::string_view::npos) {
      if (!v->is_number())
        render_fail(fmt::format("TypeError: %{} format: a real number is required, not {}", conv, v->type_name()));
      std::string spec = "%" + flags + width + precision;
      char buf[512];
      if (std::string_view("diouxX").find(conv) != std::string_view::npos) {
        int64_t x = v->is_float() ? int64_t(v->as_float()) : v->as_int();
        std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), static_cast<long long>(x));
      } else {
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v->as_float());
      }
      body = buf;
    } else {
      render_fail(fmt::format("ValueError: unsupported format character '{}'", conv));
    }
    out += body;
  }
  if (!mapping && next < values.size()) render_fail("TypeError: not all arguments converted during string formatting");
  return out;
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_str() + b.to_str());
  a.require_defined();
  b.require_defined();
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) return floats ? Value(a.as_float() + b.as_float()) : int_arithmetic('+', a.as_int(), b.as_int());
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::new_list(std::move(items), a.list().tuple);
    }
  } else if (op == "-") {
    if (numbers) return floats ? Value(a.as_float() - b.as_float()) : int_arithmetic('-', a.as_int(), b.as_int());
  } else if (op == "*") {
    if (numbers) return floats ? Value(a.as_float() * b.as_float()) : int_arithmetic('*', a.as_int(), b.as_int());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  } else if (op == "/") {
    if (numbers) {
      if (b.as_float() == 0.0) render_fail("ZeroDivisionError: division by zero");
      return Value(a.as_float() / b.as_float());
    }
  } else if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") return Value(percent_format(a.str(), b));
    if (numbers) {
      if (b.as_float() == 0.0) render_fail("ZeroDivisionError: integer division or modulo by zero");
      if (floats) {
        double q = std::floor(a.as_float() / b.as_float());
        return op == "//" ? Value(q) : Value(a.as_float() - q * b.as_float());
      }
      int64_t q = floor_div(a.as_int(), b.as_int());
      return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
    }
  } else if (op == "**") {
    if (numbers) {
      if (!floats && b.as_int() >= 0) {
        int64_t result = 1;
        for (int64_t i = 0; i < b.as_int(); ++i)
          if (__builtin_mul_overflow(result, a.as_int(), &result)) overflow();
        return Value(result);
      }
      return Value(std::pow(a.as_float(), b.as_float()));
    }
  }
  render_fail(
      fmt::format("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

}  // namespace nt::chat
