// CUDA kernel and model benchmarks: achieved bandwidth of the decode mat-vec
// per weight format against a device-to-device copy measured in the same run,
// warps-per-row x unroll sweeps for one column and four, column scaling, the mat-vec/GEMM crossover, the
// GEMM path's f16 decode, decode attention, and tokens/s of an 8B-shaped Q4_K_M model written on the fly.
// Usage: cuda_bench [all|matvec|sweep|columns|gemm|dequantize|attention|attention-seqs|model|decode|profile|trace|sync|chain] [dir for the model file]
// (decode = sweep + model); cuda_bench trace-batch MODEL.gguf [SEQUENCES, 64] [stepwise]: a batched decode step's
// time, then one step for ncu (stepwise: every row computed as a one-token step, as --batch-invariant does)
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#ifdef NT_BLOCK_TRACE
#include "backend/cuda/kernels/block_trace.cuh"
#endif
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/dequantize.h"
#include "backend/cuda/kernels/gemm.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/quantized_gemm.h"
#include "backend/cuda/kernels/top_logits.h"
#include "backend/cuda/runner/cuda_runner.h"
#include "backend/cuda/weights/device_matrix.h"
#include "core/half.h"
#include "event_timing.h"
#include "gguf/gguf_writer.h"
#include "model/tensor_names.h"
#include "quant/tensor_type.h"

namespace nt {
namespace cuda {
void matvec_variant(int columns, int rows_per_warp, int split, int unroll, const MatvecParams& p, cudaStream_t stream,
                    bool q4k_pair = false);  // cuda_matvec_variants.cu
void bench_step_sync(int multiprocessors);  // cuda_sync_bench.cu
struct ChainStep {
  DeviceMatrix w, w_up;
  float* y = nullptr;
  int kind = 0;
};
void bench_chain(const std::vector<ChainStep>& steps, const Activations& x, double weight_bytes, double copy_gbs,
                 int multiprocessors);  // cuda_chain_bench.cu
}
namespace {

// Median milliseconds of `reps` runs of f after `warmup` runs, timed with events.
double time_ms(const std::function<void(int)>& f, int warmup = 3, int reps = 20) {
  for (int i = 0; i < warmup; ++i) f(i);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(bench::event_ms(nullptr, [&] { f(i); }));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// `n_rows` rows of valid blocks: random codes, small random fp16 scales.
std::vector<uint8_t> random_rows(TensorType type, int64_t n_rows, int64_t cols, std::mt19937& rng) {
  const size_t rb = row_bytes(type, cols);
  std::vector<uint8_t> bytes(rb * size_t(n_rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = uint8_t(byte(rng));
  const auto& info = tensor_type_info(type);
  std::vector<int> halves;
  switch (type) {
    case TensorType::F32: {
      std::uniform_real_distribution<float> v(-1, 1);
      auto* f = reinterpret_cast<float*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / 4; ++i) f[i] = v(rng);
      return bytes;
    }
    case TensorType::F16: case TensorType::BF16: {
      std::uniform_real_distribution<float> v(-1, 1);
      auto* h = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / 2; ++i) h[i] = type == TensorType::F16 ? fp32_to_fp16(v(rng)) : fp32_to_bf16(v(rng));
      return bytes;
    }
    case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: halves = {0}; break;
    case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K: halves = {0, 2}; break;
    case TensorType::Q2_K: halves = {80, 82}; break;
    case TensorType::Q3_K: halves = {108}; break;
    case TensorType::Q6_K: halves = {208}; break;
    default: fail("no benchmark data for {}", tensor_type_name(type));
  }
  std::uniform_real_distribution<float> scale(0.0005f, 0.002f);
  for (size_t b = 0; b < bytes.size() / size_t(info.block_bytes); ++b) {
    for (int o : halves) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(bytes.data() + b * size_t(info.block_bytes) + size_t(o), &h, 2);
    }
  }
  return bytes;
}

struct Matrices {
  DeviceBuffer memory;
  std::vector<DeviceMatrix> copies;  // several, so repeated runs stream from HBM, not L2
  uint64_t file_bytes = 0;
};

Matrices make_matrices(TensorType type, int64_t rows, int64_t cols, uint64_t min_total, std::mt19937& rng) {
  Matrices m;
  const uint64_t one = device_matrix_bytes(type, rows, cols);
  const int n = int(std::max<uint64_t>(2, (min_total + one - 1) / one));
  m.memory = DeviceBuffer(one * uint64_t(n), "benchmark weights");
  const int64_t pattern_rows = 64;
  const auto pattern = random_rows(type, pattern_rows, cols, rng);
  DeviceBuffer staging(std::max<uint64_t>(pattern.size(), 1 << 20), "staging");
  for (int c = 0; c < n; ++c) {
    DeviceMatrix d = place_device_matrix(type, rows, cols, m.memory.as<uint8_t>() + one * uint64_t(c));
    for (int64_t r = 0; r < rows; r += pattern_rows) {
      upload_matrix_rows(d, r, std::min(pattern_rows, rows - r), pattern.data(), staging.get(), staging.size());
    }
    m.copies.push_back(d);
  }
  m.file_bytes = row_bytes(type, cols) * uint64_t(rows);
  return m;
}

double copy_bandwidth() {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes, "copy source"), b(bytes, "copy destination");
  NT_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const double ms = time_ms([&](int) { NT_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

struct Activation {
  DeviceBuffer f32, q8, scales, f16;
};

Activation make_activation(int64_t columns, int64_t cols) {
  Activation a;
  std::vector<float> x(size_t(columns * cols));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> v(-1, 1);
  for (auto& e : x) e = v(rng);
  a.f32 = DeviceBuffer(x.size() * 4, "x");
  NT_CUDA_CHECK(cudaMemcpy(a.f32.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  a.q8 = DeviceBuffer(x.size(), "x q8");
  a.scales = DeviceBuffer(x.size() / 32 * 8, "x scales");
  a.f16 = DeviceBuffer(x.size() * 2, "x f16");
  quantize_activations(a.f32.as<float>(), columns, cols, a.q8.as<int8_t>(), a.scales.as<float2>(), nullptr);
  convert_f32_to_f16(a.f32.as<float>(), int64_t(x.size()), a.f16.as<uint16_t>(), nullptr);
  return a;
}

double matvec_ms(const Matrices& m, const Activation& a, DeviceBuffer& y, int columns) {
  return time_ms([&](int i) {
    MatvecParams p;
    p.w = m.copies[size_t(i) % m.copies.size()];
    p.x = {a.f32.as<float>(), a.q8.as<int8_t>(), a.scales.as<float2>()};
    p.y = y.as<float>();
    p.y_stride = p.w.rows;
    matvec(p, columns, nullptr);
  });
}

void print_matvec_row(TensorType t, int64_t rows, int64_t cols, double ms, uint64_t bytes, double copy_gbs) {
  const double gbs = double(bytes) / (ms * 1e-3) / 1e9;
  fmt::print("{:<6} {:>6}x{:<6} {:>10.1f} {:>9.0f} {:>7.1f}%\n", tensor_type_name(t), rows, cols, ms * 1e3, gbs, 100 * gbs / copy_gbs);
}

void bench_matvec(double copy_gbs, std::mt19937& rng) {
  fmt::print("\n== decode mat-vec, 1 column (GB/s = file bytes of the weights / time; copy ceiling {:.0f} GB/s)\n", copy_gbs);
  fmt::print("{:<6} {:>13} {:>10} {:>9} {:>8}\n", "type", "rows x cols", "time us", "GB/s", "% copy");
  const std::vector<TensorType> all = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
                                       TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                       TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  const std::vector<TensorType> main_types = {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q4_0, TensorType::F16};
  struct Shape {
    int64_t rows, cols;
    bool all_types;
  };
  // 8B decode shapes (wq/wo, wk/wv, gate/up, down, output), then 70B-sized ones.
  for (const Shape s : {Shape{4096, 4096, false}, Shape{1024, 4096, false}, Shape{14336, 4096, false},
                        Shape{4096, 14336, false}, Shape{128256, 4096, false}, Shape{8192, 8192, true},
                        Shape{28672, 8192, true}, Shape{8192, 28672, false}}) {
    const Activation a = make_activation(8, s.cols);
    DeviceBuffer y(size_t(8 * s.rows) * 4, "y");
    for (TensorType t : s.all_types ? all : main_types) {
      const Matrices m = make_matrices(t, s.rows, s.cols, 1ull << 30, rng);
      print_matvec_row(t, s.rows, s.cols, matvec_ms(m, a, y, 1), m.file_bytes, copy_gbs);
    }
  }
  fmt::print("\n== mat-vec columns (8192x8192): time us per call, and weight GB/s\n");
  fmt::print("{:<6} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "type", "1", "2", "4", "8", "GB/s@8");
  const Activation a = make_activation(8, 8192);
  DeviceBuffer y(size_t(8 * 8192) * 4, "y");
  for (TensorType t : main_types) {
    const Matrices m = make_matrices(t, 8192, 8192, 1ull << 30, rng);
    double ms8 = 0;
    std::string line = fmt::format("{:<6}", tensor_type_name(t));
    for (int c : {1, 2, 4, 8}) {
      const double ms = matvec_ms(m, a, y, c);
      line += fmt::format(" {:>8.1f}", ms * 1e3);
      ms8 = ms;
    }
    fmt::print("{} {:>8.0f}\n", line, double(m.file_bytes) / (ms8 * 1e-3) / 1e9);
  }
}

// The mat-vec of a decode step over rows-per-warp x warps-per-row x unroll
// variants ("2r1w/u1"; "P": Q4_K in 32-byte units, one column), GB/s of file
// bytes (gated: both matrices); "auto" is what matvec() picks for the shape.
// One column is a single sequence's step; four, a 4-sequence batch's, whose
// lanes do four columns' arithmetic on each unit of loads in flight.
void bench_matvec_sweep(double copy_gbs, std::mt19937& rng, int columns) {
  fmt::print("\n== {}-column mat-vec variants: GB/s for rows per warp, warps per row, unroll (copy ceiling {:.0f} GB/s)\n",
             columns, copy_gbs);
  struct Variant {
    int rows, split, unroll;
    bool pair = false;
  };
  std::vector<Variant> variants = {{1, 1, 1}, {1, 1, 2}, {1, 1, 4}, {1, 2, 1}, {1, 2, 2}, {1, 4, 1}, {1, 4, 2},
                                   {2, 1, 1}, {2, 2, 1}, {2, 4, 1}};
  if (columns == 1) {
    for (const Variant v : {Variant{1, 1, 1, true}, Variant{1, 2, 1, true}, Variant{1, 4, 1, true}, Variant{2, 1, 1, true},
                            Variant{2, 2, 1, true}}) {
      variants.push_back(v);
    }
  }
  std::string head = fmt::format("{:<8} {:>13}", "type", "rows x cols");
  for (const Variant v : variants) {
    head += fmt::format(" {:>7}", fmt::format("{}{}r{}w/u{}", v.pair ? "P" : "", v.rows, v.split, v.unroll));
  }
  fmt::print("{} {:>6} {:>6}\n", head, "auto", "%copy");
  struct Shape {
    TensorType type;
    int64_t rows, cols;
    bool gated;
  };
  // The 8B's and 70B's Q/O, K/V, gate/up, down and output shapes.
  for (const Shape s : {Shape{TensorType::Q4_K, 4096, 4096, false}, Shape{TensorType::Q4_K, 1024, 4096, false},
                        Shape{TensorType::Q4_K, 14336, 4096, false}, Shape{TensorType::Q4_K, 14336, 4096, true},
                        Shape{TensorType::Q4_K, 4096, 14336, false}, Shape{TensorType::Q4_K, 28672, 8192, true},
                        Shape{TensorType::Q4_K, 8192, 8192, false}, Shape{TensorType::Q4_K, 1024, 8192, false},
                        Shape{TensorType::Q4_K, 8192, 28672, false},
                        Shape{TensorType::Q6_K, 1024, 4096, false}, Shape{TensorType::Q6_K, 4096, 14336, false},
                        Shape{TensorType::Q6_K, 8192, 28672, false}, Shape{TensorType::Q6_K, 128256, 4096, false},
                        Shape{TensorType::Q8_0, 4096, 4096, false}, Shape{TensorType::Q8_0, 14336, 4096, true},
                        Shape{TensorType::Q8_0, 4096, 14336, false}, Shape{TensorType::F16, 4096, 4096, false},
                        Shape{TensorType::F16, 4096, 14336, false}}) {
    const Matrices m = make_matrices(s.type, s.rows, s.cols, 1ull << 30, rng);
    const Activation a = make_activation(columns, s.cols);
    DeviceBuffer y(size_t(columns * s.rows) * 4, "y");
    const double bytes = double(m.file_bytes) * (s.gated ? 2 : 1);
    auto run = [&](const Variant* v) {
      return time_ms([&](int i) {
        MatvecParams p;
        p.w = m.copies[size_t(i) % m.copies.size()];
        if (s.gated) p.w_up = m.copies[size_t(i + 1) % m.copies.size()];
        p.x = {a.f32.as<float>(), a.q8.as<int8_t>(), a.scales.as<float2>()};
        p.y = y.as<float>();
        p.y_stride = s.rows;
        if (v) {
          cuda::matvec_variant(columns, v->rows, v->split, v->unroll, p, nullptr, v->pair);
        } else {
          matvec(p, columns, nullptr);
        }
      });
    };
    std::string line = fmt::format("{:<8} {:>6}x{:<6}", fmt::format("{}{}", tensor_type_name(s.type), s.gated ? "+g" : ""),
                                   s.rows, s.cols);
    for (const Variant& v : variants) {
      const bool skip = (s.gated && v.rows == 2) || (v.pair && s.type != TensorType::Q4_K);
      line += skip ? fmt::format(" {:>7}", "-") : fmt::format(" {:>7.0f}", bytes / (run(&v) * 1e-3) / 1e9);
    }
    const double gbs = bytes / (run(nullptr) * 1e-3) / 1e9;
    fmt::print("{} {:>6.0f} {:>5.0f}%\n", line, gbs, 100 * gbs / copy_gbs);
  }
}

// Two 8B decode mat-vecs, launched a few times each: a target for ncu.
void bench_profile_target(std::mt19937& rng) {
  for (auto [type, rows, cols] : {std::tuple{TensorType::Q4_K, int64_t(4096), int64_t(4096)},
                                  std::tuple{TensorType::Q6_K, int64_t(4096), int64_t(14336)}}) {
    const Matrices m = make_matrices(type, rows, cols, 256ull << 20, rng);
    const Activation a = make_activation(1, cols);
    DeviceBuffer y(size_t(rows) * 4, "y");
    fmt::print("{} {}x{}: {:.1f} us\n", tensor_type_name(type), rows, cols, matvec_ms(m, a, y, 1) * 1e3);
  }
}

void bench_gemm(std::mt19937& rng) {
  fmt::print("\n== prefill of T tokens through one 8192x8192 matrix: chunked mat-vec (8 columns) vs dequantize + cuBLAS GEMM, us\n");
  fmt::print("{:<6} {:>6} {:>12} {:>12} {:>10}\n", "type", "T", "matvec", "gemm", "TFLOP/s");
  const int64_t n = 8192;
  Gemm gemm(256ull << 20);
  for (TensorType t : {TensorType::Q4_K, TensorType::Q8_0, TensorType::F16}) {
    const Matrices m = make_matrices(t, n, n, 1ull << 30, rng);
    for (int64_t tokens : {16, 32, 64, 128, 512}) {
      const Activation a = make_activation(tokens, n);
      DeviceBuffer y(size_t(tokens * n) * 4, "y");
      const double mv = time_ms([&](int i) {
        for (int64_t c = 0; c < tokens; c += 8) {
          MatvecParams p;
          p.w = m.copies[size_t(i) % m.copies.size()];
          p.x = {a.f32.as<float>() + c * n, a.q8.as<int8_t>() + c * n, a.scales.as<float2>() + c * n / 32};
          p.y = y.as<float>() + c * n;
          p.y_stride = n;
          matvec(p, 8, nullptr);
        }
      });
      const double gm = time_ms([&](int i) {
        gemm.run(m.copies[size_t(i) % m.copies.size()], a.f16.as<uint16_t>(), tokens, y.as<float>(), n, false, nullptr);
      });
      fmt::print("{:<6} {:>6} {:>12.1f} {:>12.1f} {:>10.1f}\n", tensor_type_name(t), tokens, mv * 1e3, gm * 1e3,
                 2.0 * double(n) * double(n) * double(tokens) / (gm * 1e-3) / 1e12);
    }
  }
}

// The int8 tensor-core GEMM of 8-64 tokens through the 8B's and 70B's
// matrices: GB/s of the weights' file bytes (read once per call) against the
// copy ceiling, TOPS (2 x rows x cols x T), the one-token mat-vec of the same
// matrix (the floor), and for K-quants the same GEMM on super-block
// activations (SuperBlockActivations).
void bench_int8_gemm(double copy_gbs, int multiprocessors, std::mt19937& rng) {
  fmt::print("\n== int8 GEMM of T tokens (GB/s = weight file bytes / time; copy ceiling {:.0f} GB/s)\n", copy_gbs);
  fmt::print("{:<6} {:>13} {:>4} {:>10} {:>8} {:>7} {:>6} {:>13} {:>10} {:>6} {:>12}\n", "type", "matrix", "T", "us", "GB/s", "ceil%",
             "TOPS", "matvec T=1 us", "super us", "TOPS", "32-tiles us");
  DeviceBuffer scratch(64ull << 20, "split-K partials");
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {8192, 8192}, {28672, 8192}, {8192, 28672}};
  for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) {
    for (const auto& [rows, cols] : shapes) {
      const Matrices m = make_matrices(t, rows, cols, 1ull << 30, rng);
      DeviceBuffer y(size_t(64 * rows) * 4, "y");
      const double one = matvec_ms(m, make_activation(1, cols), y, 1);
      for (int64_t tokens : {8, 16, 32, 64}) {
        const Activation a = make_activation(tokens, cols);
        const size_t n = size_t(tokens * cols);
        DeviceBuffer sq(n, "super q8"), ss(n / 256 * 4, "super scales"), sums(n / 16 * 2, "super sums");
        quantize_super_blocks(a.f32.as<float>(), tokens, cols, sq.as<int8_t>(), ss.as<float>(), sums.as<uint16_t>(), nullptr);
        auto gemm_ms = [&](bool super, int widest_tile = 64) {
          return time_ms([&](int i) {
            QuantizedGemmParams p;
            p.w = m.copies[size_t(i) % m.copies.size()];
            p.x = {a.f32.as<float>(), a.q8.as<int8_t>(), a.scales.as<float2>()};
            if (super) p.xs = {sq.as<int8_t>(), ss.as<float>(), sums.as<uint16_t>()};
            p.n_tokens = tokens;
            p.y = y.as<float>();
            p.y_stride = rows;
            p.scratch = scratch.as<float>();
            p.scratch_bytes = scratch.size();
            p.multiprocessors = multiprocessors;
            p.widest_tile = widest_tile;
            quantized_gemm(p, nullptr);
          });
        };
        const double ms = gemm_ms(false), gbs = double(m.file_bytes) / (ms * 1e-3) / 1e9;
        const double ops = 2.0 * double(rows) * double(cols) * double(tokens);
        const bool k_quant = t != TensorType::Q8_0;
        const double super_ms = k_quant ? gemm_ms(true) : 0.0;
        // 64 tokens as two 32-token tiles (QuantizedGemmParams::widest_tile), the runner's input form.
        const double narrow_ms = tokens == 64 ? gemm_ms(k_quant, 32) : 0.0;
        fmt::print("{:<6} {:>6}x{:<6} {:>4} {:>10.1f} {:>8.0f} {:>6.1f}% {:>6.0f} {:>13.1f} {:>10} {:>6} {:>12}\n", tensor_type_name(t),
                   rows, cols, tokens, ms * 1e3, gbs, 100 * gbs / copy_gbs, ops / (ms * 1e-3) / 1e12, one * 1e3,
                   k_quant ? fmt::format("{:.1f}", super_ms * 1e3) : "-",
                   k_quant ? fmt::format("{:.0f}", ops / (super_ms * 1e-3) / 1e12) : "-",
                   tokens == 64 ? fmt::format("{:.1f}", narrow_ms * 1e3) : "-");
      }
    }
  }
}

// The GEMM path's decode of a weight row block (up to its 256 MiB f16 scratch)
// to f16: GB/s of bytes read in the plane layout plus f16 bytes written.
void bench_dequantize(double copy_gbs, std::mt19937& rng) {
  fmt::print("\n== dequantize_rows_f16 of a 256 MiB GEMM row block (GB/s = plane bytes read + f16 written; copy ceiling {:.0f} GB/s)\n",
             copy_gbs);
  fmt::print("{:<6} {:>13} {:>6} {:>10} {:>9} {:>8}\n", "type", "rows x cols", "rows", "time us", "GB/s", "% copy");
  const uint64_t scratch_bytes = 256ull << 20;
  DeviceBuffer out(scratch_bytes, "f16 rows");
  const std::vector<TensorType> all = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
                                       TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                                       TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  const std::vector<TensorType> main_types = {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q4_0, TensorType::F16};
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{8192, 8192}, std::pair<int64_t, int64_t>{28672, 8192}}) {
    const int64_t n_rows = std::min<int64_t>(rows, int64_t(scratch_bytes / uint64_t(cols * 2)));
    for (TensorType t : rows == 8192 ? all : main_types) {
      const Matrices m = make_matrices(t, rows, cols, 1ull << 30, rng);
      const double ms = time_ms([&](int i) {
        dequantize_rows_f16(m.copies[size_t(i) % m.copies.size()], 0, n_rows, out.as<uint16_t>(), nullptr);
      });
      const uint64_t bytes = device_matrix_bytes(t, n_rows, cols) + uint64_t(n_rows * cols) * 2;
      const double gbs = double(bytes) / (ms * 1e-3) / 1e9;
      fmt::print("{:<6} {:>6}x{:<6} {:>6} {:>10.1f} {:>9.0f} {:>7.1f}%\n", tensor_type_name(t), rows, cols, n_rows, ms * 1e3, gbs,
                 100 * gbs / copy_gbs);
    }
  }
  // The 70B prefill shapes: what the decode costs inside Gemm::run (F16 skips it).
  const int64_t tokens = 512;
  fmt::print("\n== prefill GEMM of {} tokens (Gemm::run, 256 MiB scratch): us; decode = dequantize_rows_f16 of all rows alone\n", tokens);
  fmt::print("{:<6} {:>13} {:>10} {:>10}\n", "type", "rows x cols", "gemm", "decode");
  Gemm gemm(scratch_bytes);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{8192, 8192}, std::pair<int64_t, int64_t>{28672, 8192},
                                   std::pair<int64_t, int64_t>{8192, 28672}}) {
    const Activation a = make_activation(tokens, cols);
    DeviceBuffer y(size_t(tokens * rows) * 4, "y");
    const int64_t block_rows = int64_t(scratch_bytes / uint64_t(cols * 2));
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16}) {
      const Matrices m = make_matrices(t, rows, cols, 1ull << 30, rng);
      const double gemm_ms = time_ms([&](int i) {
        gemm.run(m.copies[size_t(i) % m.copies.size()], a.f16.as<uint16_t>(), tokens, y.as<float>(), rows, false, nullptr);
      });
      const double decode_ms = time_ms([&](int i) {
        for (int64_t r = 0; r < rows; r += block_rows) {
          dequantize_rows_f16(m.copies[size_t(i) % m.copies.size()], r, std::min(block_rows, rows - r), out.as<uint16_t>(), nullptr);
        }
      });
      fmt::print("{:<6} {:>6}x{:<6} {:>10.1f} {:>10.1f}\n", tensor_type_name(t), rows, cols, gemm_ms * 1e3, decode_ms * 1e3);
    }
  }
}

// Microseconds per call of f(stream) with `calls` calls captured into one CUDA
// graph and replayed, as the engine's decode runs: no host launch cost.
double graph_us(const std::function<void(cudaStream_t)>& f, int calls = 20) {
  cudaStream_t stream;
  NT_CUDA_CHECK(cudaStreamCreate(&stream));  // blocking: orders with time_ms's events on the default stream
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  NT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < calls; ++i) f(stream);
  NT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  NT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = time_ms([&](int) { NT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  NT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  NT_CUDA_CHECK(cudaGraphDestroy(graph));
  NT_CUDA_CHECK(cudaStreamDestroy(stream));
  return ms * 1e3 / calls;
}

// One layer's attention inputs: f16 caches of `context` keys (random small
// values), queries, outputs, partials for up to max_splits splits.
struct AttentionSetup {
  DeviceBuffer k, v, q, out, pos, partials;
  AttentionParams p;
  AttentionSetup(int64_t tokens, int64_t context, int heads, int kv_heads, int hd, int max_splits, std::mt19937& rng) {
    const size_t cache = size_t(kv_heads) * size_t(context) * size_t(hd);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<uint16_t> halves(cache);
    for (auto& h : halves) h = fp32_to_fp16(dist(rng));
    k = DeviceBuffer(cache * 2, "k");
    v = DeviceBuffer(cache * 2, "v");
    NT_CUDA_CHECK(cudaMemcpy(k.get(), halves.data(), cache * 2, cudaMemcpyHostToDevice));
    NT_CUDA_CHECK(cudaMemcpy(v.get(), halves.data(), cache * 2, cudaMemcpyHostToDevice));
    std::vector<float> qh(size_t(tokens * heads * hd));
    for (auto& x : qh) x = dist(rng);
    q = DeviceBuffer(qh.size() * 4, "q");
    NT_CUDA_CHECK(cudaMemcpy(q.get(), qh.data(), qh.size() * 4, cudaMemcpyHostToDevice));
    out = DeviceBuffer(qh.size() * 4, "out");
    const std::vector<int32_t> p0 = {int32_t(context - tokens)};
    pos = DeviceBuffer(4, "pos");
    NT_CUDA_CHECK(cudaMemcpy(pos.get(), p0.data(), 4, cudaMemcpyHostToDevice));
    partials = DeviceBuffer(std::max<size_t>(1, attention_partials_floats(tokens, heads, hd, max_splits)) * 4, "partials");
    p.q = q.as<float>();
    p.q_stride = int64_t(heads) * hd;
    p.k_cache = k.as<uint16_t>();
    p.v_cache = v.as<uint16_t>();
    p.context = context;
    p.out = out.as<float>();
    p.out_stride = int64_t(heads) * hd;
    p.pos = pos.as<int32_t>();
    p.n_tokens = tokens;
    p.n_heads = heads;
    p.n_kv_heads = kv_heads;
    p.head_dim = hd;
    p.partials = partials.as<float>();
  }
};

void bench_attention(double copy_gbs, int sms, std::mt19937& rng) {
  fmt::print("\n== decode attention, one layer (8B: 32 heads / 8 KV heads / head_dim 128; 70B: 64/8/128; SmolLM2: 9/3/64)\n");
  fmt::print("   single: one launch timed with events (includes ~5 us of launch); graph: per call of 20 in a CUDA graph\n");
  fmt::print("{:<8} {:>8} {:>7} {:>10} {:>10} {:>9} {:>8}\n", "model", "context", "splits", "single us", "graph us", "GB/s", "% copy");
  const std::vector<int> split_counts = {1, 2, 4, 8, 16, 24, 33, 48, 66, 132};
  std::string sweep = fmt::format("\n   8B graph us per call by forced split count\n{:>8}", "context");
  for (int s : split_counts) sweep += fmt::format(" {:>6}", s);
  struct Case {
    const char* model;
    int heads, kv_heads, hd;
    int64_t context;
  };
  for (const Case c : {Case{"8B", 32, 8, 128, 512}, Case{"8B", 32, 8, 128, 4096}, Case{"8B", 32, 8, 128, 32768},
                       Case{"8B", 32, 8, 128, 131072}, Case{"70B", 64, 8, 128, 4096}, Case{"70B", 64, 8, 128, 32768},
                       Case{"SmolLM2", 9, 3, 64, 2048}, Case{"SmolLM2", 9, 3, 64, 8192}}) {
    AttentionSetup a(1, c.context, c.heads, c.kv_heads, c.hd, split_counts.back(), rng);
    a.p.n_splits = attention_splits(1, c.heads, c.kv_heads, c.hd, c.context, sms);
    const double single = time_ms([&](int) { attention(a.p, nullptr); }) * 1e3;
    const double graph = graph_us([&](cudaStream_t s) { attention(a.p, s); });
    const double gbs = 2.0 * double(c.kv_heads) * double(c.context) * c.hd * 2 / (graph * 1e-6) / 1e9;
    fmt::print("{:<8} {:>8} {:>7} {:>10.1f} {:>10.1f} {:>9.0f} {:>7.1f}%\n", c.model, c.context, a.p.n_splits, single, graph, gbs,
               100 * gbs / copy_gbs);
    if (c.heads != 32) continue;
    sweep += fmt::format("\n{:>8}", c.context);
    for (int s : split_counts) {
      a.p.n_splits = s;
      sweep += fmt::format(" {:>6.1f}", graph_us([&](cudaStream_t st) { attention(a.p, st); }));
    }
  }
  fmt::print("{}\n", sweep);
}

// One decode step of `seqs` sequences of `keys` visible keys each in one
// launch, their pages scattered over a pool of one layer's pages (as the
// engine's block table leaves them after sequences come and go). Bytes moved:
// every sequence's K and V rows once.
void bench_attention_sequences(double copy_gbs, std::mt19937& rng) {
  fmt::print("\n== multi-sequence decode attention, one layer, one launch (8B: 32/8/128, 70B: 64/8/128), graph us per call:\n"
             "the tensor-core kernel (any keys), and the short-context one (each sequence as its step alone; at most {} keys)\n",
             kShortDecodeMaxKeys);
  fmt::print("{:<6} {:>6} {:>6} {:>10} {:>9} {:>8} {:>10} {:>9}\n", "model", "seqs", "keys", "mma us", "GB/s", "% copy",
             "short us", "GB/s");
  struct Case {
    const char* model;
    int heads;
    int64_t seqs, keys;
  };
  const int kv_heads = 8, hd = 128;
  for (const Case c : {Case{"8B", 32, 4, 129}, Case{"8B", 32, 16, 129}, Case{"8B", 32, 64, 129}, Case{"8B", 32, 64, 192},
                       Case{"8B", 32, 64, 512}, Case{"8B", 32, 16, 2048}, Case{"70B", 64, 64, 129}}) {
    const int64_t pages_per_seq = (c.keys + kKvTile - 1) / kKvTile, pages = c.seqs * pages_per_seq;
    AttentionSetup a(c.seqs, pages * kKvTile, c.heads, kv_heads, hd, 1, rng);  // a pool of `pages` pages, one query per sequence
    std::vector<int32_t> table(static_cast<size_t>(pages)), rows(static_cast<size_t>(c.seqs));
    std::vector<int32_t> positions(static_cast<size_t>(c.seqs), int32_t(c.keys - 1));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    DeviceBuffer table_dev(table.size() * 4, "block table"), rows_dev(rows.size() * 4, "seq rows"), pos_dev(positions.size() * 4, "positions");
    NT_CUDA_CHECK(cudaMemcpy(table_dev.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    NT_CUDA_CHECK(cudaMemcpy(rows_dev.get(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    NT_CUDA_CHECK(cudaMemcpy(pos_dev.get(), positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
    a.p.n_tokens = 1;
    a.p.n_seqs = c.seqs;
    a.p.pos = pos_dev.as<int32_t>();
    a.p.paging = {table_dev.as<int32_t>(), kv_page_elems(1, kv_heads, hd)};
    a.p.seq_rows = rows_dev.as<int32_t>();
    a.p.table_width = pages_per_seq;
    const double bytes = double(c.seqs) * 2.0 * kv_heads * double(c.keys) * hd * 2;
    a.p.max_keys = 0;  // unknown: the tensor-core kernel
    const double mma_us = graph_us([&](cudaStream_t s) { attention(a.p, s); });
    std::string line = fmt::format("{:<6} {:>6} {:>6} {:>10.1f} {:>9.0f} {:>7.1f}%", c.model, c.seqs, c.keys, mma_us,
                                   bytes / (mma_us * 1e-6) / 1e9, 100 * bytes / (mma_us * 1e-6) / 1e9 / copy_gbs);
    a.p.max_keys = c.keys;
    if (attention_decodes_short(a.p)) {
      const double short_us = graph_us([&](cudaStream_t s) { attention(a.p, s); });
      line += fmt::format(" {:>10.1f} {:>9.0f}", short_us, bytes / (short_us * 1e-6) / 1e9);
    }
    fmt::print("{}\n", line);
  }
}

// Causal prefill of T tokens from position 0: 4 * T * T / 2 * head_dim * heads FLOPs.
void bench_prefill_attention(int sms, std::mt19937& rng) {
  fmt::print("\n== prefill attention from position 0 (% of 790 TFLOP/s dense f16; causal FLOPs 2 * T^2 * head_dim * heads)\n");
  fmt::print("{:<16} {:>6} {:>7} {:>10} {:>9} {:>7}\n", "heads/kv/dim", "T", "splits", "time us", "TFLOP/s", "% peak");
  struct Shape {
    int heads, kv_heads, hd;
  };
  for (const Shape s : {Shape{32, 8, 128}, Shape{64, 8, 128}, Shape{9, 3, 64}, Shape{32, 32, 64}}) {
    for (int64_t tokens : {512, 4096}) {
      const int splits = attention_splits(tokens, s.heads, s.kv_heads, s.hd, tokens, sms);
      AttentionSetup a(tokens, tokens, s.heads, s.kv_heads, s.hd, splits, rng);
      a.p.n_splits = splits;
      const double us = time_ms([&](int) { attention(a.p, nullptr); }) * 1e3;
      const double tflops = 2.0 * double(tokens) * double(tokens) * s.hd * s.heads / (us * 1e-6) / 1e12;
      fmt::print("{:<16} {:>6} {:>7} {:>10.1f} {:>9.1f} {:>6.1f}%\n", fmt::format("{}/{}/{}", s.heads, s.kv_heads, s.hd), tokens,
                 a.p.n_splits, us, tflops, 100 * tflops / 790);
    }
  }
  // Short prefills leave multiprocessors idle behind the longest causal tiles: do splits pay for their merge?
  AttentionSetup a(512, 512, 32, 8, 128, 8, rng);
  fmt::print("   32/8/128, 512 tokens, us by forced split count:");
  for (int splits : {1, 2, 4, 8}) {
    a.p.n_splits = splits;
    fmt::print(" {}: {:.1f}", splits, time_ms([&](int) { attention(a.p, nullptr); }) * 1e3);
  }
  fmt::print("\n");
}

// Llama-3-8B shapes with Q4_K_M-like formats (Q6_K for attn_v, ffn_down and output).
std::string write_8b_model(const std::string& path, std::mt19937& rng) {
  const int64_t dim = 4096, ffn = 14336, layers = 32, heads = 32, kv = 8, vocab = 128256;
  GgufWriter w(path);
  w.add_metadata("general.architecture", GgufValue::of_string("llama"));
  w.add_metadata("llama.block_count", GgufValue::of_u32(layers));
  w.add_metadata("llama.embedding_length", GgufValue::of_u32(dim));
  w.add_metadata("llama.feed_forward_length", GgufValue::of_u32(ffn));
  w.add_metadata("llama.attention.head_count", GgufValue::of_u32(heads));
  w.add_metadata("llama.attention.head_count_kv", GgufValue::of_u32(kv));
  w.add_metadata("llama.context_length", GgufValue::of_u32(8192));
  w.add_metadata("llama.rope.freq_base", GgufValue::of_f32(500000.0f));
  struct T {
    std::string name;
    TensorType type;
    int64_t rows, cols;
  };
  std::vector<T> ts = {{"token_embd.weight", TensorType::Q4_K, vocab, dim},
                       {"output_norm.weight", TensorType::F32, 1, dim},
                       {"output.weight", TensorType::Q6_K, vocab, dim}};
  for (int64_t l = 0; l < layers; ++l) {
    auto n = [&](const char* p) { return layer_tensor_name(l, p); };
    ts.push_back({n("attn_norm"), TensorType::F32, 1, dim});
    ts.push_back({n("attn_q"), TensorType::Q4_K, dim, dim});
    ts.push_back({n("attn_k"), TensorType::Q4_K, kv * 128, dim});
    ts.push_back({n("attn_v"), TensorType::Q6_K, kv * 128, dim});
    ts.push_back({n("attn_output"), TensorType::Q4_K, dim, dim});
    ts.push_back({n("ffn_norm"), TensorType::F32, 1, dim});
    ts.push_back({n("ffn_gate"), TensorType::Q4_K, ffn, dim});
    ts.push_back({n("ffn_up"), TensorType::Q4_K, ffn, dim});
    ts.push_back({n("ffn_down"), TensorType::Q6_K, dim, ffn});
  }
  for (const T& t : ts) w.add_tensor(t.name, t.type, t.rows == 1 ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.cols, t.rows});
  for (const T& t : ts) {
    if (t.type == TensorType::F32) {
      std::vector<float> ones(size_t(t.cols), 1.0f);
      w.write_tensor_data({reinterpret_cast<const uint8_t*>(ones.data()), ones.size() * 4});
      continue;
    }
    const auto pattern = random_rows(t.type, 64, t.cols, rng);
    for (int64_t r = 0; r < t.rows; r += 64) w.write_tensor_data({pattern.data(), pattern.size()});
  }
  w.finish();
  return path;
}

void bench_model(const std::string& dir, std::mt19937& rng) {
  const std::string path = dir + "/nt_bench_8b_q4_k_m.gguf";
  auto t0 = std::chrono::steady_clock::now();
  write_8b_model(path, rng);
  auto t1 = std::chrono::steady_clock::now();
  const auto file = GgufFile::open(path);
  auto runner = make_cuda_runner(*file, 4096);
  auto t2 = std::chrono::steady_clock::now();
  fmt::print("\n== 8B-shaped Q4_K_M model (random weights): written in {:.1f} s, loaded in {:.1f} s\n   {}\n",
             std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
             runner->description());
  const int64_t vocab = runner->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> prompt(512);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % size_t(vocab));
  for (int64_t n : {512, 64, 16}) {
    runner->forward(std::span(prompt).first(size_t(n)), 0, logits.data(), false);  // warm-up
    const auto s = std::chrono::steady_clock::now();
    const int reps = 3;
    for (int r = 0; r < reps; ++r) runner->forward(std::span(prompt).first(size_t(n)), 0, logits.data(), false);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / reps;
    fmt::print("   prefill {:>4} tokens: {:8.2f} ms, {:8.0f} tokens/s\n", n, sec * 1e3, double(n) / sec);
  }
  for (int64_t context_pos : {512, 3900}) {
    int32_t token = 1;
    runner->forward(std::span(&token, 1), context_pos, logits.data(), false);  // graph capture
    const int steps = 100;
    const auto s = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) runner->forward(std::span(&token, 1), context_pos + 1 + i % 50, logits.data(), false);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / steps;
    fmt::print("   decode at position ~{}: {:6.3f} ms/token, {:7.1f} tokens/s, {:6.0f} GB/s of weights\n", context_pos,
               sec * 1e3, 1.0 / sec, double(runner->weight_bytes_per_token()) / sec / 1e9);
  }
  std::filesystem::remove(path);
}

#ifdef NT_BLOCK_TRACE
// Records decode step `pos` block by block (block_trace.cuh) into
// NT_TRACE_OUT (default /tmp/block_trace.bin), for bench/block_trace_summary.py.
void record_block_trace(ModelRunner& runner, int64_t pos) {
  const size_t capacity = size_t(trace::kMaxSms) * trace::kRecordsPerSm;
  DeviceBuffer records(capacity * sizeof(trace::Record), "block trace"), counters(trace::kMaxSms * 4, "block trace counters");
  NT_CUDA_CHECK(cudaMemset(records.get(), 0, capacity * sizeof(trace::Record)));
  NT_CUDA_CHECK(cudaMemset(counters.get(), 0, trace::kMaxSms * 4));
  std::vector<float> logits(static_cast<size_t>(runner.config().vocab_size));
  int32_t token = 1;
  trace::arm(records.as<trace::Record>(), counters.as<uint32_t>());
  runner.forward(std::span(&token, 1), pos, logits.data(), false);
  NT_CUDA_CHECK(cudaDeviceSynchronize());
  trace::arm(nullptr, nullptr);
  std::vector<trace::Record> host(capacity);
  NT_CUDA_CHECK(cudaMemcpy(host.data(), records.get(), capacity * sizeof(trace::Record), cudaMemcpyDeviceToHost));
  const char* env = std::getenv("NT_TRACE_OUT");
  const std::string out = env && *env ? env : "/tmp/block_trace.bin";
  std::FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) fail("cannot write {}", out);
  size_t n = 0;
  for (const trace::Record& r : host) {
    if (r.t[0] && std::fwrite(&r, sizeof(r), 1, f) == 1) ++n;
  }
  std::fclose(f);
  fmt::print("recorded decode step at position {} block by block: {} blocks -> {}\n", pos, n, out);
}
#endif

// One decode step of the 8B-shaped model between cudaProfilerStart/Stop, for
// `ncu --profile-from-start off --graph-profiling node`: the graph's kernels
// one by one, each timed alone. A build with NT_CUDA_BLOCK_TRACE also records
// the next step block by block, as the graph runs it.
void bench_decode_trace(const std::string& dir, std::mt19937& rng) {
  const std::string path = dir + "/nt_bench_8b_q4_k_m.gguf";
  write_8b_model(path, rng);
  const auto file = GgufFile::open(path);
  auto runner = make_cuda_runner(*file, 4096);
  std::vector<float> logits(static_cast<size_t>(runner->config().vocab_size));
  int32_t token = 1;
  for (int64_t pos : {512, 513}) runner->forward(std::span(&token, 1), pos, logits.data(), false);  // capture, replay
  NT_CUDA_CHECK(cudaProfilerStart());
  runner->forward(std::span(&token, 1), 514, logits.data(), false);
  NT_CUDA_CHECK(cudaProfilerStop());
  fmt::print("profiled one decode step at position 514\n");
#ifdef NT_BLOCK_TRACE
  record_block_trace(*runner, 515);
#endif
  std::filesystem::remove(path);
}

// One batched decode step of `sequences` sequences of a given model file,
// each after a `prompt`-token prefill, between cudaProfilerStart/Stop (as
// bench_decode_trace): where a batched step's time goes, kernel by kernel.
void bench_batch_trace(const std::string& path, int sequences, int prompt, bool stepwise) {
  const auto file = GgufFile::open(path);
  CudaRunnerOptions o;
  o.max_sequences = sequences + 1;
  constexpr int kTimedSteps = 32;
  auto runner = make_cuda_runner(*file, prompt + kTimedSteps + 8, o);
  std::vector<SeqId> seqs;
  Batch batch;
  BatchOutputs out;
  const std::vector<int32_t> tokens(size_t(prompt), 1);
  for (int i = 0; i < sequences; ++i) {
    seqs.push_back(runner->seq_alloc());
    batch.clear();
    batch.add_run(tokens, 0, seqs.back(), Output::Argmax);
    runner->forward(batch, out);
  }
  const auto step = [&](int64_t pos) {
    batch.clear();
    for (const SeqId s : seqs) batch.add(1, pos, s, Output::Argmax, stepwise);
    runner->forward(batch, out);
  };
  step(prompt);  // capture
  step(prompt + 1);  // replay
  // Steps as a caller sees them (host work and the argmax read back included).
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kTimedSteps; ++i) step(prompt + 2 + i);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kTimedSteps;
  fmt::print("decode step of {} sequences{}: {:.3f} ms\n", sequences, stepwise ? " (stepwise)" : "", ms);
  NT_CUDA_CHECK(cudaProfilerStart());
  step(prompt + 2 + kTimedSteps);
  NT_CUDA_CHECK(cudaProfilerStop());
  fmt::print("profiled one decode step of {} sequences at position {}\n", sequences, prompt + 2 + kTimedSteps);
}

// The 8B decode step's 32 layers of mat-vecs, each waiting for the one before:
// a graph of launches against one persistent kernel (cuda_chain_bench.cu).
void bench_decode_chain(double copy_gbs, int multiprocessors, std::mt19937& rng) {
  fmt::print("\n== 8B decode mat-vec chain (32 layers: Q/K/V, wo, gate+up, down), fixed activations\n");
  std::vector<Matrices> held;
  std::vector<DeviceBuffer> outputs;
  std::vector<cuda::ChainStep> steps;
  double bytes = 0;
  auto add = [&](TensorType type, int64_t rows, int64_t cols, bool gated) {
    cuda::ChainStep s;
    held.push_back(make_matrices(type, rows, cols, 0, rng));
    s.w = held.back().copies[0];
    bytes += double(held.back().file_bytes);
    if (gated) {
      held.push_back(make_matrices(type, rows, cols, 0, rng));
      s.w_up = held.back().copies[0];
      bytes += double(held.back().file_bytes);
    }
    outputs.emplace_back(size_t(rows) * 4, "chain output");
    s.y = outputs.back().as<float>();
    s.kind = type == TensorType::Q6_K ? 2 : gated ? 1 : 0;
    steps.push_back(s);
  };
  for (int layer = 0; layer < 32; ++layer) {
    add(TensorType::Q4_K, 6144, 4096, false);
    add(TensorType::Q4_K, 4096, 4096, false);
    add(TensorType::Q4_K, 14336, 4096, true);
    add(TensorType::Q6_K, 4096, 14336, false);
  }
  const Activation a = make_activation(1, 14336);
  fmt::print("{:.2f} GB of weights, copy ceiling {:.0f} GB/s\n", bytes / 1e9, copy_gbs);
  cuda::bench_chain(steps, {a.f32.as<float>(), a.q8.as<int8_t>(), a.scales.as<float2>()}, bytes, copy_gbs, multiprocessors);
}

// A sampler's selection of the top k of a 128K-vocabulary row on the GPU
// (top_logits), against the argmax greedy decoding runs: what sampling adds to
// a decode step on the device before k candidates cross the bus.
void bench_top_logits(std::mt19937& rng) {
  fmt::print("\n== top-k selection of a 128256-logit row (N(0, 3) logits), us per call of 20 in a CUDA graph\n");
  const int64_t n = 128256;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& x : row) x = normal(rng);
  DeviceBuffer x(size_t(n) * 4, "logits"), out(sizeof(TopLogit) * kMaxTopLogits + 4, "top");
  NT_CUDA_CHECK(cudaMemcpy(x.get(), row.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
  DeviceBuffer scratch(top_logits_scratch_bytes(n), "top scratch"), argmax_scratch(argmax_scratch_bytes(1, n), "argmax scratch");
  auto* top = out.as<TopLogit>();
  auto* poisoned = reinterpret_cast<int32_t*>(top + kMaxTopLogits);
  fmt::print("{:<10} {:>8}\n", "k", "us");
  DeviceBuffer k_dev(4, "k");
  for (const int32_t k : {1, 40, 104, int32_t(kMaxTopLogits)}) {
    NT_CUDA_CHECK(cudaMemcpy(k_dev.get(), &k, 4, cudaMemcpyHostToDevice));
    const double us = graph_us([&](cudaStream_t s) { top_logits(x.as<float>(), n, k_dev.as<int32_t>(), top, poisoned, scratch.get(), s); });
    fmt::print("{:<10} {:>8.1f}\n", k, us);
  }
  fmt::print("{:<10} {:>8.1f}\n", "argmax", graph_us([&](cudaStream_t s) { argmax_rows(x.as<float>(), 1, n, poisoned, argmax_scratch.get(), s); }));
}

}  // namespace
}  // namespace nt

int main(int argc, char** argv) {
  using namespace nt;
  try {
    const CudaDeviceInfo d = require_cuda_device(0);
    fmt::print("{}: sm_{}{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB\n", d.name, d.sm_major, d.sm_minor, d.multiprocessors,
               double(d.total_memory) / double(1ull << 30), double(d.l2_bytes) / double(1 << 20));
    std::mt19937 rng(1234);
    const double copy_gbs = copy_bandwidth();
    fmt::print("device-to-device copy: {:.0f} GB/s (read + write)\n", copy_gbs);
    const std::string what = argc > 1 ? argv[1] : "all";
    if (what == "all" || what == "matvec") bench_matvec(copy_gbs, rng);
    if (what == "all" || what == "sweep" || what == "decode") bench_matvec_sweep(copy_gbs, rng, 1);
    if (what == "all" || what == "columns") bench_matvec_sweep(copy_gbs, rng, 4);
    if (what == "all" || what == "gemm") bench_gemm(rng);
    if (what == "all" || what == "int8") bench_int8_gemm(copy_gbs, d.multiprocessors, rng);
    if (what == "all" || what == "dequantize") bench_dequantize(copy_gbs, rng);
    if (what == "all" || what == "attention") bench_attention(copy_gbs, d.multiprocessors, rng);
    if (what == "all" || what == "attention") bench_prefill_attention(d.multiprocessors, rng);
    if (what == "all" || what == "attention" || what == "attention-seqs") bench_attention_sequences(copy_gbs, rng);
    if (what == "all" || what == "model" || what == "decode") bench_model(argc > 2 ? argv[2] : "/tmp", rng);
    if (what == "profile") bench_profile_target(rng);
    if (what == "trace") bench_decode_trace(argc > 2 ? argv[2] : "/tmp", rng);
    if (what == "trace-batch" && argc > 2) {
      bench_batch_trace(argv[2], argc > 3 ? std::atoi(argv[3]) : 64, 128, argc > 4 && std::string(argv[4]) == "stepwise");
    }
    if (what == "sync") cuda::bench_step_sync(d.multiprocessors);
    if (what == "chain") bench_decode_chain(copy_gbs, d.multiprocessors, rng);
    if (what == "all" || what == "top") bench_top_logits(rng);
  } catch (const Error& e) {
    fmt::print(stderr, "cuda_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
