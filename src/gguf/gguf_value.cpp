#include "gguf/gguf_value.h"

#include "core/error.h"

#include <limits>

namespace nt {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8: return "u8";
    case GgufValueType::I8: return "i8";
    case GgufValueType::U16: return "u16";
    case GgufValueType::I16: return "i16";
    case GgufValueType::U32: return "u32";
    case GgufValueType::I32: return "i32";
    case GgufValueType::F32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::U64: return "u64";
    case GgufValueType::I64: return "i64";
    case GgufValueType::F64: return "f64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(data) || std::holds_alternative<int64_t>(data);
}

int64_t GgufValue::as_int(std::string_view what) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) fail("{}: value {} does not fit in int64", what, *u);
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  fail("{}: expected an integer, found {}", what, gguf_value_type_name(type));
}

uint64_t GgufValue::as_uint(std::string_view what) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data)) {
    if (*i < 0) fail("{}: expected a non-negative integer, found {}", what, *i);
    return uint64_t(*i);
  }
  fail("{}: expected an integer, found {}", what, gguf_value_type_name(type));
}

double GgufValue::as_float(std::string_view what) const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return double(*i);
  fail("{}: expected a number, found {}", what, gguf_value_type_name(type));
}

bool GgufValue::as_bool(std::string_view what) const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  fail("{}: expected a bool, found {}", what, gguf_value_type_name(type));
}

const std::string& GgufValue::as_string(std::string_view what) const {
  if (const auto* s = std::get_if<std::string>(&data)) return *s;
  fail("{}: expected a string, found {}", what, gguf_value_type_name(type));
}

const std::vector<GgufValue>& GgufValue::as_array(std::string_view what) const {
  if (const auto* a = std::get_if<std::vector<GgufValue>>(&data)) return *a;
  fail("{}: expected an array, found {}", what, gguf_value_type_name(type));
}

std::string GgufValue::to_display(size_t max_items) const {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          std::string s = v.size() > 120 ? v.substr(0, 117) + "..." : v;
          for (auto& c : s) {
            if (c == '\n') c = ' ';
          }
          return fmt::format("\"{}\"", s);
        } else if constexpr (std::is_same_v<T, std::vector<GgufValue>>) {
          std::string out = fmt::format("[{} x {}]", v.size(), gguf_value_type_name(element_type));
          const size_t shown = std::min(max_items, v.size());
          out += " [";
          for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + v[i].to_display(max_items);
          if (shown < v.size()) out += ", ...";
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return type == GgufValueType::F32 ? fmt::format("{}", float(v)) : fmt::format("{}", v);
        } else {
          return fmt::format("{}", v);
        }
      },
      data);
}

}  // namespace nt
