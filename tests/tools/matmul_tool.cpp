// Test driver: multiplies activations by one weight matrix of a GGUF file with
// the CPU backend's matmul, so that Python tests can hold a single product
// (with its activation rounding) to the float64 reference. Usage:
//   matmul_tool MODEL.gguf TENSOR IN.f32 OUT.f32 N_TOKENS [--threads N]
// IN holds N_TOKENS x cols float32, OUT receives N_TOKENS x rows float32.
// The token count picks the path as in the forward pass (decode dots or prefill GEMM).
#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "gguf/gguf_file.h"

namespace {

std::vector<float> read_floats(const std::string& path, size_t count) {
  std::vector<float> values(count);
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) nt::fail("cannot open {}", path);
  const size_t got = std::fread(values.data(), sizeof(float), count, in);
  const bool extra = std::fgetc(in) != EOF;
  std::fclose(in);
  if (got != count || extra) nt::fail("{}: expected exactly {} float32 values", path, count);
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 6) {
      fmt::print(stderr, "usage: matmul_tool MODEL.gguf TENSOR IN.f32 OUT.f32 N_TOKENS [--threads N]\n");
      return 2;
    }
    int threads = 0;
    for (int i = 6; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
      else nt::fail("unknown argument '{}'", arg);
    }
    const auto file = nt::GgufFile::open(argv[1]);
    const nt::GgufTensorInfo& info = file->header().tensor(argv[2]);
    if (info.shape.size() != 2) nt::fail("tensor {} is not a matrix", info.name);
    const int64_t cols = info.shape[0], rows = info.shape[1];
    const int n_tokens = std::stoi(argv[5]);
    const auto x = read_floats(argv[3], size_t(n_tokens) * size_t(cols));
    std::vector<float> y(size_t(n_tokens) * size_t(rows));
    nt::cpu::ThreadPool pool(threads);
    nt::cpu::matmul(nt::cpu::WeightView::dense(file->data(info), info.type, rows, cols, info.name), x.data(), y.data(),
                    n_tokens, pool);
    std::FILE* out = std::fopen(argv[4], "wb");
    if (!out || std::fwrite(y.data(), sizeof(float), y.size(), out) != y.size()) nt::fail("cannot write {}", argv[4]);
    std::fclose(out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
