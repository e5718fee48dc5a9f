#include "quant/tensor_type.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace nt {
namespace {

constexpr std::array kTypes = {
    TensorTypeInfo{TensorType::F32, "F32", 1, 4, true},
    TensorTypeInfo{TensorType::F16, "F16", 1, 2, true},
    TensorTypeInfo{TensorType::Q4_0, "Q4_0", 32, 18, true},
    TensorTypeInfo{TensorType::Q4_1, "Q4_1", 32, 20, true},
    TensorTypeInfo{TensorType::Q5_0, "Q5_0", 32, 22, true},
    TensorTypeInfo{TensorType::Q5_1, "Q5_1", 32, 24, true},
    TensorTypeInfo{TensorType::Q8_0, "Q8_0", 32, 34, true},
    TensorTypeInfo{TensorType::Q8_1, "Q8_1", 32, 36, false},
    TensorTypeInfo{TensorType::Q2_K, "Q2_K", 256, 84, true},
    TensorTypeInfo{TensorType::Q3_K, "Q3_K", 256, 110, true},
    TensorTypeInfo{TensorType::Q4_K, "Q4_K", 256, 144, true},
    TensorTypeInfo{TensorType::Q5_K, "Q5_K", 256, 176, true},
    TensorTypeInfo{TensorType::Q6_K, "Q6_K", 256, 210, true},
    TensorTypeInfo{TensorType::Q8_K, "Q8_K", 256, 292, false},
    TensorTypeInfo{TensorType::I8, "I8", 1, 1, false},
    TensorTypeInfo{TensorType::I16, "I16", 1, 2, false},
    TensorTypeInfo{TensorType::I32, "I32", 1, 4, false},
    TensorTypeInfo{TensorType::I64, "I64", 1, 8, false},
    TensorTypeInfo{TensorType::F64, "F64", 1, 8, false},
    TensorTypeInfo{TensorType::BF16, "BF16", 1, 2, true},
    TensorTypeInfo{TensorType::MXFP4, "MXFP4", 32, 17, true},
};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
  for (const auto& info : kTypes) {
    if (uint32_t(info.type) == id) return info;
  }
  return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info;
  }
  fail("internal: tensor type id {} missing from the type table", uint32_t(type));
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  for (const auto& info : kTypes) {
    if (info.name == upper) return info.type;
  }
  return std::nullopt;
}

size_t row_bytes(TensorType type, int64_t n) {
  const auto& info = tensor_type_info(type);
  if (n < 0 || n % info.block_elems != 0) {
    fail("a row of {} elements is not a whole number of {} blocks ({} elements each)", n, info.name,
         info.block_elems);
  }
  return size_t(n / info.block_elems) * size_t(info.block_bytes);
}

}  // namespace nt
