// Tensor element types, numbered as GGUF numbers them, with their block
// geometry. Everything that needs a byte size goes through this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace nt {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;   // as GGUF tools print it: "Q4_K", "F16"
  int64_t block_elems;     // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool weight_format;      // one of the formats inference supports for weights
};

// Info for a GGUF type id, or nullopt for ids this build does not know
// (including the IQ* formats, which are not supported).
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
const TensorTypeInfo& tensor_type_info(TensorType type);

inline std::string_view tensor_type_name(TensorType type) { return tensor_type_info(type).name; }

// Parses "q4_k", "Q4_K", "f16", ... ; nullopt when unknown.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Bytes of a row of n elements; throws nt::Error if n is not a whole number of blocks.
size_t row_bytes(TensorType type, int64_t n);

constexpr int64_t kQK = 32;    // elements per block of the legacy quants
constexpr int64_t kQK_K = 256;  // elements per super-block of the K-quants

}  // namespace nt
