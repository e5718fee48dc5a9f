// A parsed GGUF file: metadata, tensor directory and the mapped data.
// Parsing is bounds-checked throughout; bad files raise nt::Error naming the
// file, the field or tensor, and the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_value.h"
#include "quant/tensor_type.h"

namespace nt {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the contiguous (row) dimension
  TensorType type = TensorType::F32;
  uint64_t offset = 0;   // relative to the start of the data section
  uint64_t n_bytes = 0;  // from type and shape

  int64_t n_elements() const;
  int64_t row_length() const { return shape.empty() ? 1 : shape[0]; }
  int64_t n_rows() const { return row_length() == 0 ? 0 : n_elements() / row_length(); }
};

// Metadata and tensor directory only: enough to plan, inspect, or write a copy.
struct GgufHeader {
  uint32_t version = 3;
  uint32_t alignment = kGgufDefaultAlignment;
  std::vector<GgufKV> metadata;
  std::vector<GgufTensorInfo> tensors;
  uint64_t data_offset = 0;  // absolute file offset of the data section

  const GgufValue* find(std::string_view key) const;
  const GgufValue& get(std::string_view key) const;  // throws naming the key
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor(std::string_view name) const;  // throws naming the tensor

  // Typed lookups with defaults for optional keys.
  int64_t get_int(std::string_view key, std::optional<int64_t> fallback = std::nullopt) const;
  double get_float(std::string_view key, std::optional<double> fallback = std::nullopt) const;
  std::string get_string(std::string_view key, std::optional<std::string> fallback = std::nullopt) const;
  bool get_bool(std::string_view key, std::optional<bool> fallback = std::nullopt) const;
};

// Parses a header from memory. `size` is the whole file size; `source` names it in errors.
GgufHeader parse_gguf_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view source);

// A read-only mapping of a GGUF file.
class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return header_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* data(const GgufTensorInfo& t) const { return base_ + header_.data_offset + t.offset; }
  std::span<const uint8_t> bytes(const GgufTensorInfo& t) const { return {data(t), size_t(t.n_bytes)}; }

 private:
  GgufFile() = default;
  std::string path_;
  GgufHeader header_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace nt
