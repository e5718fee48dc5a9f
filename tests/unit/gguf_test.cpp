// GGUF reader/writer: value round trips, byte-exact copies, and clean errors
// (never a crash) on truncated, bit-flipped and hand-corrupted files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace nt {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("nt_gguf_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A small file exercising every metadata type, including 64-bit extremes.
std::string write_sample(const std::string& name, uint32_t alignment = 32) {
  const auto path = temp_path(name);
  GgufWriter w(path);
  w.add_metadata("general.architecture", GgufValue::of_string("llama"));
  w.add_metadata("general.alignment", GgufValue::of_u32(alignment));
  w.add_metadata("t.u8", {GgufValueType::U8, uint64_t(255)});
  w.add_metadata("t.i8", {GgufValueType::I8, int64_t(-128)});
  w.add_metadata("t.u16", {GgufValueType::U16, uint64_t(65535)});
  w.add_metadata("t.i16", {GgufValueType::I16, int64_t(-32768)});
  w.add_metadata("t.u32", GgufValue::of_u32(4294967295u));
  w.add_metadata("t.i32", GgufValue::of_i32(-2147483647 - 1));
  w.add_metadata("t.u64", GgufValue::of_u64(18446744073709551615ull));
  w.add_metadata("t.i64", {GgufValueType::I64, int64_t(-9223372036854775807ll - 1)});
  w.add_metadata("t.f32", GgufValue::of_f32(1.5f));
  w.add_metadata("t.f64", {GgufValueType::F64, 2.718281828459045});
  w.add_metadata("t.bool", GgufValue::of_bool(true));
  w.add_metadata("t.strings", GgufValue::of_array(GgufValueType::STRING, {GgufValue::of_string("a"), GgufValue::of_string("")}));
  w.add_metadata("t.nested", GgufValue::of_array(GgufValueType::ARRAY,
                                                  {GgufValue::of_array(GgufValueType::I32, {GgufValue::of_i32(7)})}));
  w.add_metadata("t.empty", GgufValue::of_array(GgufValueType::F32, {}));
  w.add_tensor("a", TensorType::F32, {3, 2});
  w.add_tensor("b", TensorType::Q8_0, {64});
  w.add_tensor("c", TensorType::F16, {5});
  std::mt19937 rng(1);
  for (const auto& t : std::vector<GgufTensorInfo>(w.tensors())) {
    std::vector<uint8_t> bytes(t.n_bytes);
    for (auto& b : bytes) b = uint8_t(rng());
    // Write in uneven chunks: the writer must not care how data is split.
    for (size_t at = 0; at < bytes.size(); at += 7) {
      w.write_tensor_data({bytes.data() + at, std::min<size_t>(7, bytes.size() - at)});
    }
  }
  w.finish();
  return path;
}

TEST(Gguf, ValuesRoundTripWithoutNarrowing) {
  const auto path = write_sample("values");
  auto f = GgufFile::open(path);
  const auto& h = f->header();
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.get("t.u64").as_uint("u64"), 18446744073709551615ull);
  EXPECT_EQ(std::get<int64_t>(h.get("t.i64").data), INT64_MIN);
  EXPECT_EQ(h.get_int("t.u32"), 4294967295ll);
  EXPECT_EQ(h.get_int("t.i32"), INT32_MIN);
  EXPECT_EQ(h.get_int("t.i8"), -128);
  EXPECT_EQ(h.get_int("t.u16"), 65535);
  EXPECT_EQ(h.get_float("t.f32"), 1.5);
  EXPECT_EQ(h.get_float("t.f64"), 2.718281828459045);
  EXPECT_TRUE(h.get_bool("t.bool"));
  EXPECT_EQ(h.get("t.strings").as_array("s")[1].as_string("s"), "");
  EXPECT_EQ(h.get("t.nested").as_array("n")[0].as_array("n")[0].as_int("n"), 7);
  EXPECT_EQ(h.get("t.empty").element_type, GgufValueType::F32);
  EXPECT_THROW(h.get("t.u64").as_int("t.u64"), Error);  // too large for int64: no silent wrap
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensor("b").n_bytes, 68u);
  EXPECT_EQ(h.tensor("c").offset % 32, 0u);
  std::filesystem::remove(path);
}

TEST(Gguf, CopyIsByteExact) {
  for (uint32_t alignment : {32u, 64u, 4096u}) {
    const auto path = write_sample("copy_src", alignment);
    const auto copy = temp_path("copy_dst");
    write_gguf_copy(*GgufFile::open(path), copy);
    EXPECT_EQ(read_all(path), read_all(copy)) << "alignment " << alignment;
    std::filesystem::remove(path);
    std::filesystem::remove(copy);
  }
}

TEST(Gguf, TotalBytesPredictsFileSize) {
  const auto path = temp_path("size");
  GgufWriter w(path);
  w.add_metadata("k", GgufValue::of_string("v"));
  w.add_tensor("x", TensorType::Q4_K, {256, 3});
  const uint64_t predicted = w.total_bytes();
  std::vector<uint8_t> zeros(w.tensors()[0].n_bytes);
  w.write_tensor_data(zeros);
  w.finish();
  EXPECT_EQ(predicted, std::filesystem::file_size(path));
  std::filesystem::remove(path);
}

// Parsing arbitrary bytes must either succeed or throw nt::Error.
void expect_clean(const std::vector<uint8_t>& bytes) {
  try {
    parse_gguf_header(bytes, bytes.size(), "fuzz");
  } catch (const Error&) {
  }
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  const auto path = write_sample("trunc");
  const auto bytes = read_all(path);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(n));
    try {
      parse_gguf_header(cut, cut.size(), "cut");
      // Only a cut inside the last tensor's trailing padding may still parse.
      EXPECT_GE(n, bytes.size() - 32) << "truncated at " << n << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut"), std::string::npos);
    }
  }
  std::filesystem::remove(path);
}

TEST(Gguf, RandomBitFlipsFailCleanly) {
  const auto path = write_sample("flip");
  const auto bytes = read_all(path);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int trial = 0; trial < 20000; ++trial) {
    auto mutated = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) mutated[rng() % mutated.size()] ^= uint8_t(1u << (rng() % 8));
    expect_clean(mutated);
  }
  std::filesystem::remove(path);
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_gguf_header(bytes, bytes.size(), "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Minimal file: header, one u32 kv, one F32 tensor of 8 elements.
std::vector<uint8_t> minimal_file(uint32_t version = 3, uint32_t type = 0, uint64_t offset = 0, uint64_t dim = 8) {
  std::vector<uint8_t> b;
  auto put = [&](auto v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(v));
  };
  auto put_str = [&](const std::string& s) {
    put(uint64_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  };
  put(kGgufMagic);
  put(version);
  put(uint64_t(1));
  put(uint64_t(1));
  put_str("k");
  put(uint32_t(4));
  put(uint32_t(9));
  put_str("w");
  put(uint32_t(1));
  put(dim);
  put(type);
  put(offset);
  while (b.size() % 32) b.push_back(0);
  b.resize(b.size() + 32, 0);
  return b;
}

TEST(Gguf, ErrorsNameTheProblem) {
  EXPECT_EQ(error_of(minimal_file()), "");
  auto bad_magic = minimal_file();
  bad_magic[0] = 'X';
  EXPECT_NE(error_of(bad_magic).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of(minimal_file(1)).find("unsupported GGUF version 1"), std::string::npos);
  EXPECT_NE(error_of(minimal_file(3, 16)).find("tensor 'w'"), std::string::npos);  // IQ2_XXS: unsupported
  EXPECT_NE(error_of(minimal_file(3, 99)).find("unknown or unsupported tensor type id 99"), std::string::npos);
  EXPECT_NE(error_of(minimal_file(3, 0, 4)).find("not a multiple of the alignment"), std::string::npos);
  EXPECT_NE(error_of(minimal_file(3, 0, 0, 1000)).find("tensor 'w' spans"), std::string::npos);
  EXPECT_NE(error_of(minimal_file(3, 8, 0, 8)).find("not a multiple of the Q8_0 block size"), std::string::npos);
  auto huge_string = minimal_file();
  poke<uint64_t>(huge_string, 24, 1ull << 60);  // length of the first key
  EXPECT_NE(error_of(huge_string).find("only"), std::string::npos);
}

TEST(Gguf, OpenReportsMissingAndEmptyFiles) {
  EXPECT_THROW(GgufFile::open("/nonexistent/model.gguf"), Error);
  const auto path = temp_path("empty");
  write_all(path, {});
  try {
    GgufFile::open(path);
    FAIL() << "empty file opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nt
