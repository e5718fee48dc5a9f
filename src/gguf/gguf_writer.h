// Streams a GGUF file to disk in constant memory: declare metadata and the
// tensor directory, then feed each tensor's bytes in order, in any chunking.
// The file appears at its path only once finish() succeeds (core/output_file.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "gguf/gguf_file.h"

namespace nt {

class GgufWriter {
 public:
  // An empty path writes nothing and only counts the bytes (a dry run).
  explicit GgufWriter(std::string path, uint32_t version = 3);
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Declaration phase. "general.alignment" in the metadata sets the alignment.
  void add_metadata(std::string key, GgufValue value);
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> shape);
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  // Pad the file after the last tensor to the alignment, as llama.cpp and gguf-py
  // do (default). Off only to reproduce files written without it.
  void set_trailing_padding(bool pad) { trailing_padding_ = pad; }

  // Data phase: tensors are filled in declaration order. The first call writes the header.
  void write_tensor_data(std::span<const uint8_t> bytes);
  // Checks every tensor was filled, then flushes and moves the file into place. Throws on I/O errors.
  void finish();

  uint64_t bytes_written() const { return written_; }
  uint64_t total_bytes() const;  // the final file size, known once the directory is complete

 private:
  void write_header();
  void put(const void* data, size_t n);
  void pad_to(uint64_t boundary);

  std::string path_;
  std::optional<OutputFile> out_;
  GgufHeader header_;
  bool header_written_ = false;
  bool trailing_padding_ = true;
  size_t current_tensor_ = 0;
  uint64_t current_filled_ = 0;
  uint64_t written_ = 0;
};

// Writes `header` and the tensor bytes of `source` into `path` (a byte-exact copy when
// the source was written with the same layout rules).
void write_gguf_copy(const GgufFile& source, const std::string& path);

}  // namespace nt
