#include "gguf/gguf_file.h"

#include "core/align.h"
#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

namespace nt {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;

// Bounds-checked little-endian reader over the header bytes. Every failure
// names the source, the byte offset and what was being read.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, std::string_view source) : bytes_(bytes), source_(source) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(what);
    if (len > remaining()) {
      fail("{}: {} at byte {} has length {} but only {} bytes remain (truncated or corrupt)", source_, what, at,
           len, remaining());
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), size_t(len));
    pos_ += len;
    return s;
  }

  [[noreturn]] void error_at(uint64_t at, std::string_view what, std::string_view problem) const {
    fail("{}: {} at byte {}: {}", source_, what, at, problem);
  }

 private:
  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail("{}: truncated at byte {} while reading {} (file has {} bytes)", source_, pos_, what, bytes_.size());
    }
  }

  std::span<const uint8_t> bytes_;
  std::string_view source_;
  uint64_t pos_ = 0;
};

// Smallest encoded size of one value of a type: bounds array counts before allocating.
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

GgufValueType read_value_type(Cursor& c, std::string_view what) {
  const uint64_t at = c.pos();
  const auto raw = c.read<uint32_t>(what);
  if (raw > uint32_t(GgufValueType::F64)) c.error_at(at, what, fmt::format("unknown value type {}", raw));
  return GgufValueType(raw);
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::U8: v.data = uint64_t(c.read<uint8_t>(what)); break;
    case GgufValueType::I8: v.data = int64_t(c.read<int8_t>(what)); break;
    case GgufValueType::U16: v.data = uint64_t(c.read<uint16_t>(what)); break;
    case GgufValueType::I16: v.data = int64_t(c.read<int16_t>(what)); break;
    case GgufValueType::U32: v.data = uint64_t(c.read<uint32_t>(what)); break;
    case GgufValueType::I32: v.data = int64_t(c.read<int32_t>(what)); break;
    case GgufValueType::U64: v.data = c.read<uint64_t>(what); break;
    case GgufValueType::I64: v.data = c.read<int64_t>(what); break;
    case GgufValueType::F32: v.data = double(c.read<float>(what)); break;
    case GgufValueType::F64: v.data = c.read<double>(what); break;
    case GgufValueType::BOOL: {
      const uint64_t at = c.pos();
      const auto b = c.read<uint8_t>(what);
      if (b > 1) c.error_at(at, what, fmt::format("bool has value {}", b));
      v.data = b == 1;
      break;
    }
    case GgufValueType::STRING: v.data = c.read_string(what); break;
    case GgufValueType::ARRAY: {
      const uint64_t at = c.pos();
      if (depth >= kMaxArrayDepth) c.error_at(at, what, "arrays nested too deeply");
      v.element_type = read_value_type(c, what + " element type");
      const auto count = c.read<uint64_t>(what + " length");
      if (count > c.remaining() / min_encoded_size(v.element_type)) {
        c.error_at(at, what, fmt::format("array of {} elements cannot fit in the {} bytes left", count, c.remaining()));
      }
      std::vector<GgufValue> items;
      items.reserve(size_t(count));
      for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(c, v.element_type, what, depth + 1));
      v.data = std::move(items);
      break;
    }
  }
  return v;
}

void read_metadata(Cursor& c, GgufHeader& h, uint64_t n_kv, std::string_view source) {
  std::unordered_set<std::string> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    GgufKV kv;
    kv.key = c.read_string(fmt::format("key of metadata entry {}", i));
    const std::string what = fmt::format("metadata '{}'", kv.key);
    const auto type = read_value_type(c, what + " type");
    kv.value = read_value(c, type, what, 0);
    if (!seen.insert(kv.key).second) fail("{}: duplicate metadata key '{}' at byte {}", source, kv.key, at);
    h.metadata.push_back(std::move(kv));
  }
  if (const auto* a = h.find("general.alignment")) {
    if (a->type != GgufValueType::U32) fail("{}: metadata 'general.alignment' must be u32, found {}", source, gguf_value_type_name(a->type));
    const auto align = a->as_uint("general.alignment");
    if (align == 0 || (align & (align - 1)) != 0) fail("{}: metadata 'general.alignment' = {} is not a power of two", source, align);
    h.alignment = uint32_t(align);
  }
}

GgufTensorInfo read_tensor_info(Cursor& c, uint64_t index, std::string_view source) {
  GgufTensorInfo t;
  const uint64_t at = c.pos();
  t.name = c.read_string(fmt::format("name of tensor {}", index));
  const std::string what = fmt::format("tensor '{}'", t.name);
  const auto n_dims = c.read<uint32_t>(what + " dimension count");
  if (n_dims == 0 || n_dims > kMaxDims) c.error_at(at, what, fmt::format("has {} dimensions (1 to {} allowed)", n_dims, kMaxDims));
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto dim = c.read<uint64_t>(what + " shape");
    if (dim > uint64_t(INT64_MAX) || (dim != 0 && uint64_t(n_elements) > uint64_t(INT64_MAX) / dim)) {
      c.error_at(at, what, "shape overflows 64-bit element count");
    }
    n_elements *= int64_t(dim);
    t.shape.push_back(int64_t(dim));
  }
  const uint64_t type_at = c.pos();
  const auto type_id = c.read<uint32_t>(what + " type");
  const auto info = tensor_type_info(type_id);
  if (!info) c.error_at(type_at, what, fmt::format("unknown or unsupported tensor type id {}", type_id));
  t.type = info->type;
  if (t.shape[0] % info->block_elems != 0) {
    c.error_at(at, what, fmt::format("row width {} is not a multiple of the {} block size {}", t.shape[0], info->name, info->block_elems));
  }
  t.offset = c.read<uint64_t>(what + " data offset");
  const uint64_t blocks = uint64_t(n_elements / info->block_elems);
  if (blocks != 0 && uint64_t(info->block_bytes) > UINT64_MAX / blocks) c.error_at(at, what, "byte size overflows");
  t.n_bytes = blocks * uint64_t(info->block_bytes);
  (void)source;
  return t;
}

// Tensors must be aligned, inside the data section, and disjoint.
void check_tensor_layout(const GgufHeader& h, uint64_t file_size, std::string_view source) {
  const uint64_t data_size = file_size - h.data_offset;
  std::vector<const GgufTensorInfo*> by_offset;
  std::unordered_set<std::string_view> names;
  for (const auto& t : h.tensors) {
    if (!names.insert(t.name).second) fail("{}: duplicate tensor name '{}'", source, t.name);
    if (t.offset % h.alignment != 0) {
      fail("{}: tensor '{}' data offset {} is not a multiple of the alignment {}", source, t.name, t.offset, h.alignment);
    }
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      fail("{}: tensor '{}' spans bytes {}..{} of the data section, which has only {} bytes (file truncated?)", source,
           t.name, t.offset, t.offset + t.n_bytes, data_size);
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
      fail("{}: tensors '{}' (bytes {}..{}) and '{}' (from byte {}) overlap", source, prev->name, prev->offset,
           prev->offset + prev->n_bytes, by_offset[i]->name, by_offset[i]->offset);
    }
  }
}

}  // namespace

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  for (const auto& kv : metadata) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufValue& GgufHeader::get(std::string_view key) const {
  if (const auto* v = find(key)) return *v;
  fail("missing metadata key '{}'", key);
}

const GgufTensorInfo* GgufHeader::find_tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const GgufTensorInfo& GgufHeader::tensor(std::string_view name) const {
  if (const auto* t = find_tensor(name)) return *t;
  fail("missing tensor '{}'", name);
}

int64_t GgufHeader::get_int(std::string_view key, std::optional<int64_t> fallback) const {
  if (const auto* v = find(key)) return v->as_int(fmt::format("metadata '{}'", key));
  if (fallback) return *fallback;
  fail("missing metadata key '{}'", key);
}

double GgufHeader::get_float(std::string_view key, std::optional<double> fallback) const {
  if (const auto* v = find(key)) return v->as_float(fmt::format("metadata '{}'", key));
  if (fallback) return *fallback;
  fail("missing metadata key '{}'", key);
}

std::string GgufHeader::get_string(std::string_view key, std::optional<std::string> fallback) const {
  if (const auto* v = find(key)) return v->as_string(fmt::format("metadata '{}'", key));
  if (fallback) return *fallback;
  fail("missing metadata key '{}'", key);
}

bool GgufHeader::get_bool(std::string_view key, std::optional<bool> fallback) const {
  if (const auto* v = find(key)) return v->as_bool(fmt::format("metadata '{}'", key));
  if (fallback) return *fallback;
  fail("missing metadata key '{}'", key);
}

GgufHeader parse_gguf_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view source) {
  Cursor c(bytes, source);
  GgufHeader h;
  const auto magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) fail("{}: not a GGUF file (bad magic 0x{:08x} at byte 0)", source, magic);
  h.version = c.read<uint32_t>("version");
  if (h.version != 2 && h.version != 3) {
    fail("{}: unsupported GGUF version {} at byte 4 (versions 2 and 3 are supported)", source, h.version);
  }
  const auto n_tensors = c.read<uint64_t>("tensor count");
  const auto n_kv = c.read<uint64_t>("metadata count");
  // Each entry takes at least a few bytes: reject absurd counts before allocating.
  if (n_kv > c.remaining() / 12) fail("{}: metadata count {} at byte 16 cannot fit in the file", source, n_kv);
  if (n_tensors > c.remaining() / 24) fail("{}: tensor count {} at byte 8 cannot fit in the file", source, n_tensors);

  read_metadata(c, h, n_kv, source);
  h.tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) h.tensors.push_back(read_tensor_info(c, i, source));

  h.data_offset = align_up(c.pos(), h.alignment);
  if (h.data_offset > file_size) {
    if (!h.tensors.empty()) fail("{}: truncated: data section would start at byte {} beyond the end ({} bytes)", source, h.data_offset, file_size);
    h.data_offset = file_size;
  }
  check_tensor_layout(h, file_size, source);
  return h;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open model file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path);
  }
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->path_ = path;
  file->size_ = uint64_t(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    fail("{}: empty file, not a GGUF model", path);
  }
  void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail("cannot map '{}': {}", path, std::strerror(errno));
  file->base_ = static_cast<const uint8_t*>(map);
  file->header_ = parse_gguf_header({file->base_, size_t(file->size_)}, file->size_, path);
  return file;
}

GgufFile::~GgufFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

}  // namespace nt
