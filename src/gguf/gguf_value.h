// GGUF metadata values: every scalar type, strings and (nested) arrays,
// held without narrowing so 64-bit integers survive a round trip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace nt {

enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType type);

struct GgufArray;

struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  // Integers of every width are held in the variant member of their signedness;
  // `type` keeps the exact on-disk width.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> data;
  GgufValueType element_type = GgufValueType::U8;  // for arrays (also when empty)

  static GgufValue of_u32(uint32_t v) { return {GgufValueType::U32, uint64_t(v)}; }
  static GgufValue of_u64(uint64_t v) { return {GgufValueType::U64, v}; }
  static GgufValue of_i32(int32_t v) { return {GgufValueType::I32, int64_t(v)}; }
  static GgufValue of_f32(float v) { return {GgufValueType::F32, double(v)}; }
  static GgufValue of_bool(bool v) { return {GgufValueType::BOOL, v}; }
  static GgufValue of_string(std::string v) { return {GgufValueType::STRING, std::move(v)}; }
  static GgufValue of_array(GgufValueType element_type, std::vector<GgufValue> items) {
    GgufValue v{GgufValueType::ARRAY, std::move(items)};
    v.element_type = element_type;
    return v;
  }

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::F32 || type == GgufValueType::F64; }
  // Numeric access with range checks; throw nt::Error naming `what` on mismatch.
  int64_t as_int(std::string_view what) const;
  uint64_t as_uint(std::string_view what) const;
  double as_float(std::string_view what) const;  // accepts integers too
  bool as_bool(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const std::vector<GgufValue>& as_array(std::string_view what) const;

  // Human-readable, with long arrays abbreviated to their first `max_items`.
  std::string to_display(size_t max_items = 8) const;
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

}  // namespace nt
