#include "gguf/gguf_writer.h"

#include "core/align.h"
#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace nt {
namespace {

class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void put_value(const GgufValue& v) {
    auto as_u = [&] { return std::get<uint64_t>(v.data); };
    auto as_i = [&] { return std::get<int64_t>(v.data); };
    switch (v.type) {
      case GgufValueType::U8: put<uint8_t>(uint8_t(as_u())); break;
      case GgufValueType::I8: put<int8_t>(int8_t(as_i())); break;
      case GgufValueType::U16: put<uint16_t>(uint16_t(as_u())); break;
      case GgufValueType::I16: put<int16_t>(int16_t(as_i())); break;
      case GgufValueType::U32: put<uint32_t>(uint32_t(as_u())); break;
      case GgufValueType::I32: put<int32_t>(int32_t(as_i())); break;
      case GgufValueType::U64: put<uint64_t>(as_u()); break;
      case GgufValueType::I64: put<int64_t>(as_i()); break;
      case GgufValueType::F32: put<float>(float(std::get<double>(v.data))); break;
      case GgufValueType::F64: put<double>(std::get<double>(v.data)); break;
      case GgufValueType::BOOL: put<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
      case GgufValueType::STRING: put_string(std::get<std::string>(v.data)); break;
      case GgufValueType::ARRAY: {
        const auto& items = std::get<std::vector<GgufValue>>(v.data);
        put<uint32_t>(uint32_t(v.element_type));
        put<uint64_t>(items.size());
        for (const auto& item : items) put_value(item);
        break;
      }
    }
  }

 private:
  std::vector<uint8_t>& out_;
};

// Lays tensors out back to back, each aligned; returns the data section size.
uint64_t assign_offsets(GgufHeader& h) {
  uint64_t offset = 0;
  for (auto& t : h.tensors) {
    t.offset = align_up(offset, h.alignment);
    offset = t.offset + t.n_bytes;
  }
  return offset;
}

std::vector<uint8_t> encode_header(const GgufHeader& h) {
  std::vector<uint8_t> bytes;
  Encoder e(bytes);
  e.put<uint32_t>(kGgufMagic);
  e.put<uint32_t>(h.version);
  e.put<uint64_t>(h.tensors.size());
  e.put<uint64_t>(h.metadata.size());
  for (const auto& kv : h.metadata) {
    e.put_string(kv.key);
    e.put<uint32_t>(uint32_t(kv.value.type));
    e.put_value(kv.value);
  }
  for (const auto& t : h.tensors) {
    e.put_string(t.name);
    e.put<uint32_t>(uint32_t(t.shape.size()));
    for (auto d : t.shape) e.put<uint64_t>(uint64_t(d));
    e.put<uint32_t>(uint32_t(t.type));
    e.put<uint64_t>(t.offset);
  }
  return bytes;
}

}  // namespace

GgufWriter::GgufWriter(std::string path, uint32_t version) : path_(std::move(path)) {
  header_.version = version;
  if (path_.empty()) return;
  out_.emplace(path_, "the output");
  std::setvbuf(out_->stream(), nullptr, _IOFBF, 1 << 22);
}

void GgufWriter::add_metadata(std::string key, GgufValue value) {
  if (header_written_) fail("{}: metadata '{}' added after tensor data started", path_, key);
  if (header_.find(key)) fail("{}: duplicate metadata key '{}'", path_, key);
  if (key == "general.alignment") {
    const auto a = value.as_uint("general.alignment");
    if (value.type != GgufValueType::U32 || a == 0 || (a & (a - 1))) fail("{}: general.alignment must be a u32 power of two", path_);
    header_.alignment = uint32_t(a);
  }
  header_.metadata.push_back({std::move(key), std::move(value)});
}

void GgufWriter::add_tensor(std::string name, TensorType type, std::vector<int64_t> shape) {
  if (header_written_) fail("{}: tensor '{}' declared after tensor data started", path_, name);
  if (header_.find_tensor(name)) fail("{}: duplicate tensor name '{}'", path_, name);
  if (shape.empty() || shape.size() > 4) fail("{}: tensor '{}' must have 1 to 4 dimensions", path_, name);
  GgufTensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.shape = std::move(shape);
  t.n_bytes = row_bytes(type, t.shape[0]) * uint64_t(t.n_rows());
  header_.tensors.push_back(std::move(t));
}

uint64_t GgufWriter::total_bytes() const {
  GgufHeader laid_out = header_;
  const uint64_t data_bytes = assign_offsets(laid_out);
  const uint64_t data_end = align_up(encode_header(laid_out).size(), header_.alignment) + data_bytes;
  return trailing_padding_ ? align_up(data_end, header_.alignment) : data_end;
}

void GgufWriter::write_header() {
  assign_offsets(header_);
  const auto bytes = encode_header(header_);
  put(bytes.data(), bytes.size());
  pad_to(align_up(written_, header_.alignment));
  header_.data_offset = written_;
  header_written_ = true;
}

void GgufWriter::write_tensor_data(std::span<const uint8_t> bytes) {
  if (!header_written_) write_header();
  while (!bytes.empty()) {
    if (current_tensor_ >= header_.tensors.size()) fail("{}: more tensor data written than declared", path_);
    const auto& t = header_.tensors[current_tensor_];
    if (current_filled_ == 0) pad_to(header_.data_offset + t.offset);
    const uint64_t n = std::min<uint64_t>(bytes.size(), t.n_bytes - current_filled_);
    put(bytes.data(), size_t(n));
    bytes = bytes.subspan(size_t(n));
    current_filled_ += n;
    if (current_filled_ == t.n_bytes) {
      ++current_tensor_;
      current_filled_ = 0;
    }
  }
}

void GgufWriter::finish() {
  if (!header_written_) write_header();
  // Zero-byte tensors need no data but still count as written.
  while (current_tensor_ < header_.tensors.size() && header_.tensors[current_tensor_].n_bytes == 0) ++current_tensor_;
  if (current_tensor_ != header_.tensors.size()) {
    fail("{}: tensor '{}' was declared but its data was not written", path_, header_.tensors[current_tensor_].name);
  }
  if (trailing_padding_) pad_to(align_up(written_, header_.alignment));
  if (out_) out_->commit();
}

void GgufWriter::put(const void* data, size_t n) {
  if (n && out_ && std::fwrite(data, 1, n, out_->stream()) != n) {
    fail("error writing '{}': {}", path_, std::strerror(errno));
  }
  written_ += n;
}

void GgufWriter::pad_to(uint64_t boundary) {
  static constexpr uint8_t zeros[64] = {};
  while (written_ < boundary) put(zeros, size_t(std::min<uint64_t>(sizeof(zeros), boundary - written_)));
}

void write_gguf_copy(const GgufFile& source, const std::string& path) {
  const auto& h = source.header();
  GgufWriter w(path, h.version);
  uint64_t data_end = 0;
  for (const auto& t : h.tensors) data_end = std::max(data_end, h.data_offset + t.offset + t.n_bytes);
  w.set_trailing_padding(source.file_size() > data_end);
  for (const auto& kv : h.metadata) w.add_metadata(kv.key, kv.value);
  for (const auto& t : h.tensors) w.add_tensor(t.name, t.type, t.shape);
  for (const auto& t : h.tensors) w.write_tensor_data(source.bytes(t));
  w.finish();
}

}  // namespace nt
