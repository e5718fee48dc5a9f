// Throughput of the CPU matmul kernels on SmolLM2-135M shapes, with the
// machine's memory bandwidth for context.
// Usage: cpu_kernels_bench [threads]   (NT_CPU_ISA picks the kernel set)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "core/half.h"

using namespace nt;
using namespace nt::cpu;

namespace {

// Wall time, or with NT_BENCH_CPU_TIME=1 this thread's CPU time: on a shared
// machine, single-threaded runs then measure the kernel, not the neighbours.
double now() {
  static const bool cpu_time = std::getenv("NT_BENCH_CPU_TIME") != nullptr;
  if (cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of fn().
template <typename Fn>
double best_time(int reps, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

// Random bytes with every fp16 scale field set to a small finite value.
std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::vector<uint8_t> data(row_bytes(type, cols) * rows);
  const TensorTypeInfo& info = tensor_type_info(type);
  if (info.block_elems == 1) {
    for (size_t i = 0; i + 1 < data.size(); i += 2) {
      const uint16_t h = fp32_to_fp16(float(int(rng() % 200) - 100) / 1000.0f);
      std::memcpy(&data[i], &h, 2);
    }
    if (type == TensorType::F32) {
      for (size_t i = 0; i < data.size(); i += 4) {
        const float f = float(int(rng() % 200) - 100) / 1000.0f;
        std::memcpy(&data[i], &f, 4);
      }
    }
    return data;
  }
  for (auto& b : data) b = uint8_t(rng());
  // Overwrite every 16-bit word of each block that could be a scale with a
  // small half: the byte layout of the quants does not matter for timing.
  const uint16_t small = fp32_to_fp16(0.01f);
  for (size_t b = 0; b < data.size(); b += info.block_bytes) {
    std::memcpy(&data[b], &small, 2);
    std::memcpy(&data[b + 2], &small, 2);
    std::memcpy(&data[b + info.block_bytes - 2], &small, 2);
  }
  return data;
}

double read_bandwidth(ThreadPool& pool) {
  const size_t n = size_t(512) << 20;
  std::vector<uint64_t> buf(n / 8, 1);
  std::vector<uint64_t> sums(pool.size());
  const double t = best_time(5, [&] {
    pool.run([&](int i, int nt) {
      const size_t b = buf.size() * i / nt, e = buf.size() * (i + 1) / nt;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t j = b; j + 4 <= e; j += 4) s0 += buf[j], s1 += buf[j + 1], s2 += buf[j + 2], s3 += buf[j + 3];
      sums[i] = s0 + s1 + s2 + s3;
    });
  });
  return n / t / 1e9;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};

}  // namespace

int main(int argc, char** argv) {
  ThreadPool pool(argc > 1 ? std::atoi(argv[1]) : 0);
  std::mt19937_64 rng(42);
  std::printf("kernels: %s, threads: %d\n", std::string(isa_name(kernels().isa)).c_str(), pool.size());
  std::printf("memory read bandwidth: %.1f GB/s\n", read_bandwidth(pool));
  {
    const size_t n = size_t(256) << 20;
    std::vector<char> a(n, 1), b(n, 2);
    const double t = best_time(3, [&] { std::memcpy(b.data(), a.data(), n); });
    std::printf("memcpy (1 thread): %.1f GB/s read+write\n", 2 * n / t / 1e9);
  }

  // One core's kernel rate: a matrix that stays in L2 (128 rows of the 70B's
  // 8192 columns, 0.4-0.9 MB), so the arithmetic is timed, not the memory.
  {
    ThreadPool one(1);
    std::printf("\nmatvec on one core, weights in L2 (128x8192), GB/s of weights:\n%-8s %10s %10s\n", "type", "1 token",
                "8 tokens");
    for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
      const int64_t rows = 128, cols = 8192;
      const auto w = random_weights(type, rows, cols, rng);
      std::printf("%-8s", std::string(tensor_type_name(type)).c_str());
      for (int tokens : {1, 8}) {
        std::vector<float> x(cols * tokens, 0.5f), y(rows * tokens);
        const int reps = 200;
        const double t = best_time(5, [&] {
          for (int r = 0; r < reps; ++r) matmul(WeightView::dense(w.data(), type, rows, cols), x.data(), y.data(), tokens, one);
        });
        std::printf(" %10.1f", double(w.size()) * reps / t / 1e9);
      }
      std::printf("\n");
    }

    // The prefill GEMM's two steps on the same matrix: unpacking a panel
    // (once per panel and 128 tokens) and the integer tile (per token).
    const int tokens = 16;
    std::printf("\nGEMM on one core, weights in L2 (128x8192), %d tokens: GOP/s of the whole matmul, and the\n"
                "time of its steps per pass (unpack, tile) in us\n%-8s %10s %10s %10s\n",
                tokens, "type", "GOP/s", "unpack", "tile");
    for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
      const int64_t rows = 128, cols = 8192;
      const auto w = random_weights(type, rows, cols, rng);
      const Kernels& k = kernels();
      std::vector<float> x(cols * tokens), y(rows * tokens);
      for (auto& v : x) v = float(int(rng() % 200) - 100) / 50.0f;
      const WeightView view = WeightView::dense(w.data(), type, rows, cols);
      const int reps = 50;
      const double t_all = best_time(5, [&] {
        for (int r = 0; r < reps; ++r) matmul(view, x.data(), y.data(), tokens, one);
      }) / reps;
      // Operands as matmul builds them: zero activations time the same.
      std::vector<int8_t> aq(size_t(tokens) * cols);
      std::vector<float> as(size_t(tokens) * cols / 32, 1.0f), ag(size_t(tokens) * cols / 16, 0.0f);
      std::vector<GemmActs> acts;
      for (int g = 0; g < tokens / kGemmTokenGroup; ++g) {
        acts.push_back({aq.data() + g * kGemmTokenGroup * cols, as.data() + g * kGemmTokenGroup * cols / 32,
                        ag.data() + g * kGemmTokenGroup * cols / 16});
      }
      std::vector<uint8_t> pq(cols * kGemmRows);
      std::vector<float> ps(cols / 32 * kGemmRows * 2), po(cols / 16 * kGemmRows);
      GemmPanel panel{pq.data(), ps.data(), po.data(), false, true};
      const double t_unpack = best_time(5, [&] {
        for (int r = 0; r < reps; ++r) {
          for (int64_t r0 = 0; r0 < rows; r0 += kGemmRows) {
            k.gemm_unpack(type, view.row(r0), view.row_stride, kGemmRows, cols, k.gemm_unsigned_q8, panel);
          }
        }
      }) / reps;
      const double t_tile = best_time(5, [&] {
        for (int r = 0; r < reps; ++r) {
          for (int64_t r0 = 0; r0 < rows; r0 += kGemmRows) {
            k.gemm_tile(panel, acts.data(), cols, kGemmRows, tokens, y.data() + r0, rows);
          }
        }
      }) / reps;
      std::printf("%-8s %10.1f %10.1f %10.1f\n", std::string(tensor_type_name(type)).c_str(),
                  2.0 * rows * cols * tokens / t_all / 1e9, t_unpack * 1e6, t_tile * 1e6);
    }
  }

  // Matvec: enough copies of each matrix to overflow the caches, cycled.
  const Shape shapes[] = {{"ffn_down 576x1536", 576, 1536}, {"ffn_up 1536x576", 1536, 576}, {"output 49152x576", 49152, 576}};
  const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
                              TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K,
                              TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  std::printf("\nmatvec (1 token), GB/s of weights streamed from memory:\n%-8s", "type");
  for (const Shape& s : shapes) std::printf(" %20s", s.name);
  std::printf("\n");
  for (TensorType type : types) {
    std::printf("%-8s", std::string(tensor_type_name(type)).c_str());
    for (const Shape& s : shapes) {
      if (s.cols % tensor_type_info(type).block_elems != 0) {
        std::printf(" %20s", "-");
        continue;
      }
      const size_t bytes = row_bytes(type, s.cols) * s.rows;
      const int copies = int(std::max<size_t>(1, (size_t(96) << 20) / bytes));
      std::vector<std::vector<uint8_t>> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(random_weights(type, s.rows, s.cols, rng));
      std::vector<float> x(s.cols, 0.5f), y(s.rows);
      const double t = best_time(5, [&] {
        for (auto& w : ws) matmul(WeightView::dense(w.data(), type, s.rows, s.cols), x.data(), y.data(), 1, pool);
      });
      std::printf(" %20.1f", bytes * copies / t / 1e9);
    }
    std::printf("\n");
  }

  std::printf("\nprefill GEMM, 128 tokens, GFLOP/s (2 * rows * cols * tokens):\n%-8s", "type");
  for (const Shape& s : shapes) std::printf(" %20s", s.name);
  std::printf("\n");
  for (TensorType type : types) {
    if (tensor_type_info(type).block_elems == 1) continue;
    std::printf("%-8s", std::string(tensor_type_name(type)).c_str());
    for (const Shape& s : shapes) {
      if (s.cols % tensor_type_info(type).block_elems != 0 || s.rows > 8192) {
        std::printf(" %20s", "-");
        continue;
      }
      const int tokens = 128;
      const auto w = random_weights(type, s.rows, s.cols, rng);
      std::vector<float> x(s.cols * tokens), y(s.rows * tokens);
      for (auto& v : x) v = float(int(rng() % 200) - 100) / 50.0f;
      const double t = best_time(5, [&] {
        matmul(WeightView::dense(w.data(), type, s.rows, s.cols), x.data(), y.data(), tokens, pool);
      });
      std::printf(" %20.1f", 2.0 * s.rows * s.cols * tokens / t / 1e9);
    }
    std::printf("\n");
  }

  // A whole SmolLM2-135M step's matmuls: 30 layers of distinct weights plus
  // the Q8_0 output head, so the bytes come from memory as in real decode.
  for (TensorType type : {TensorType::Q4_1, TensorType::Q8_0}) {
    const Shape layer[] = {{"q", 576, 576}, {"k", 192, 576}, {"v", 192, 576}, {"o", 576, 576},
                           {"gate", 1536, 576}, {"up", 1536, 576}, {"down", 576, 1536}};
    std::vector<std::vector<uint8_t>> ws;
    std::vector<Shape> order;
    for (int l = 0; l < 30; ++l) {
      for (const Shape& s : layer) {
        ws.push_back(random_weights(type, s.rows, s.cols, rng));
        order.push_back(s);
      }
    }
    const auto head = random_weights(TensorType::Q8_0, 49152, 576, rng);
    size_t bytes = head.size();
    for (auto& w : ws) bytes += w.size();
    for (int tokens : {1, 128}) {
      std::vector<float> x(1536 * tokens, 0.25f), y(49152 * tokens);
      const double t = best_time(tokens == 1 ? 20 : 3, [&] {
        for (size_t i = 0; i < ws.size(); ++i) {
          matmul(WeightView::dense(ws[i].data(), type, order[i].rows, order[i].cols), x.data(), y.data(), tokens, pool);
        }
        // Prefill only needs the logits of its last token.
        matmul(WeightView::dense(head.data(), TensorType::Q8_0, 49152, 576), x.data(), y.data(), 1, pool);
      });
      if (tokens == 1) {
        std::printf("\nSmolLM2-135M %s decode matmuls: %.2f ms/token = %.0f tok/s upper bound (%.1f MB, %.1f GB/s)\n",
                    std::string(tensor_type_name(type)).c_str(), t * 1e3, 1 / t, bytes / 1e6, bytes / t / 1e9);
      } else {
        std::printf("SmolLM2-135M %s pp128 matmuls: %.1f ms = %.0f tok/s upper bound\n",
                    std::string(tensor_type_name(type)).c_str(), t * 1e3, tokens / t);
      }
    }
  }
  return 0;
}
