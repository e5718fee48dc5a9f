// Drives the reference codecs on raw files for the Python oracle tests:
//   quant_tool dequant TYPE in.bin out.f32 N
//   quant_tool quant   TYPE in.f32 out.bin N [importance.f32]
// N is the element count; files hold bare blocks / little-endian float32.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/quant.h"
#include "quant/tensor_type.h"

namespace {

std::vector<char> read_file(const std::string& path, size_t expected) {
  std::ifstream in(path, std::ios::binary);
  if (!in) nt::fail("cannot open {}", path);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() != expected) nt::fail("{} holds {} bytes, expected {}", path, data.size(), expected);
  return data;
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), std::streamsize(size));
  if (!out) nt::fail("cannot write {}", path);
}

int run(int argc, char** argv) {
  if (argc < 6 || argc > 7) {
    std::fprintf(stderr, "usage: %s dequant|quant TYPE IN OUT N [IMPORTANCE]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const auto type = nt::tensor_type_from_name(argv[2]);
  if (!type) nt::fail("unknown tensor type '{}'", argv[2]);
  const int64_t n = std::strtoll(argv[5], nullptr, 10);
  const size_t packed = nt::row_bytes(*type, n);
  const size_t floats = size_t(n) * sizeof(float);

  if (mode == "dequant" && argc == 6) {
    const auto in = read_file(argv[3], packed);
    std::vector<float> out(static_cast<size_t>(n));
    nt::dequantize_row(*type, in.data(), out.data(), n);
    write_file(argv[4], out.data(), floats);
  } else if (mode == "quant") {
    const auto in = read_file(argv[3], floats);
    std::vector<char> importance;
    if (argc == 7) importance = read_file(argv[6], floats);
    std::vector<char> out(packed);
    nt::quantize_row(*type, reinterpret_cast<const float*>(in.data()), out.data(), n,
                     importance.empty() ? nullptr : reinterpret_cast<const float*>(importance.data()));
    write_file(argv[4], out.data(), packed);
  } else {
    nt::fail("unknown mode '{}' (want dequant or quant)", mode);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const nt::Error& e) {
    std::fprintf(stderr, "quant_tool: %s\n", e.what());
    return 1;
  }
}
