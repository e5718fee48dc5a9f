#include "backend/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "core/align.h"
#include "core/error.h"
#include "core/tuning.h"
#include "quant/quant.h"

namespace nt::cpu {

namespace {

// Token counts from which the blocked GEMM beats the fused dots, which decode
// a row once for vec_dot_tokens_max tokens: its weight unpacking pays off
// only when shared by more. The 2-core Zen 4 machine, prompt tok/s through
// the dots against the GEMM: SmolLM2 Q4_1 pp4 532 / 498, pp5 492 / 625 (the
// legacy formats keep 4); llama3-1b Q4_K_M pp8 105 / 76, pp15 134 / 110,
// pp16 126 / 127.
// Tuning::cpu_gemm_min_tokens sets one threshold for every format, for A/B
// runs on other machines (the numbers round differently on each side of it).
int gemm_min_tokens(TensorType type) {
  if (const int forced = tuning().cpu_gemm_min_tokens) return forced;
  return tensor_type_info(type).block_elems == kQK_K ? 16 : 4;
}
// Weight bytes of the rows that share each token group's activations in the
// fused dots (matmul_dots).
constexpr size_t kDotBlockBytes = 32 * 1024;
// Tokens whose quantized activations stay in L2 while a panel sweeps them
// (a multiple of kGemmTokenGroup).
constexpr int kGemmTokenBlock = 128;

template <typename T>
T* scratch(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// Whether matmul takes n tokens through the GEMM.
bool takes_gemm(const WeightView& w, int64_t n_tokens) {
  return n_tokens >= gemm_min_tokens(w.type) && act_format(w.type) != ActFormat::F32;
}

void check(const WeightView& w) {
  const TensorTypeInfo& info = tensor_type_info(w.type);
  if (!info.weight_format) fail("matmul {}: unsupported weight type {}", w.name, info.name);
  if (w.cols <= 0 || w.rows <= 0 || w.cols % info.block_elems != 0) {
    fail("matmul {}: {} x {} does not fit {} blocks of {}", w.name, w.rows, w.cols, info.name, info.block_elems);
  }
  if (act_format(w.type) != ActFormat::F32 && w.cols % 32 != 0) {
    fail("matmul {}: cols {} is not a multiple of 32", w.name, w.cols);
  }
}

void quantize_act(const Kernels& k, ActFormat format, const float* x, void* out, int64_t n) {
  switch (format) {
    case ActFormat::F32: std::copy(x, x + n, static_cast<float*>(out)); break;
    case ActFormat::Q8_0: k.quantize_q8_0(x, static_cast<BlockQ8_0*>(out), n); break;
    case ActFormat::Q8_1: k.quantize_q8_1(x, static_cast<BlockQ8_1*>(out), n); break;
    case ActFormat::Q8_K: k.quantize_q8_k(x, static_cast<BlockQ8_K*>(out), n); break;
  }
}

// One fused dot product per (row, token): each row is read once and used for
// every token while it is in L1, and decoded once per vec_dot_tokens_max
// tokens where the kernels have the several-token form (the same numbers).
void matmul_dots(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool, const Kernels& k) {
  const ActFormat format = act_format(w.type);
  const VecDotFn dot = k.vec_dot[size_t(w.type)];
  const VecDotTokensFn dots = k.vec_dot_tokens[size_t(w.type)];
  const bool split = dots && takes_split_rows(w.type);
  const size_t act_bytes = split ? split_row_bytes(format, w.cols) : act_row_bytes(format, w.cols);
  const void* act = x;
  if (format != ActFormat::F32) {
    static thread_local std::vector<uint8_t> buffer, blocks;
    uint8_t* q = scratch(buffer, act_bytes * n_tokens);
    uint8_t* row = split ? scratch(blocks, act_row_bytes(format, w.cols)) : nullptr;
    for (int t = 0; t < n_tokens; ++t) {
      if (split) {
        quantize_act(k, format, x + t * w.cols, row, w.cols);
        split_row(format, row, w.cols, q + t * act_bytes);
      } else {
        quantize_act(k, format, x + t * w.cols, q + t * act_bytes, w.cols);
      }
    }
    act = q;
  }
  const auto* acts = static_cast<const uint8_t*>(act);
  // A block of rows (kDotBlockBytes of weights, which stay in L2) takes each
  // group of tokens in turn, so that the group's activations stay in L1
  // while the block's rows pass: row by row, every row would read all the
  // tokens' activations from L2 (64 tokens of a 2048-wide row: 147 KB for
  // its 1.2 KB of Q4_K). The same calls, so the same numbers.
  const int64_t block_rows = std::max<int64_t>(1, int64_t(kDotBlockBytes / w.row_stride));
  pool.parallel_for(
      w.rows,
      [&](int64_t r0, int64_t r1) {
        if (!dots) {
          for (int64_t r = r0; r < r1; ++r) {
            for (int t = 0; t < n_tokens; ++t) y[t * w.rows + r] = dot(w.row(r), acts + t * act_bytes, w.cols);
          }
          return;
        }
        for (int64_t b0 = r0; b0 < r1; b0 += block_rows) {
          const int64_t b1 = std::min(r1, b0 + block_rows);
          for (int t = 0; t < n_tokens; t += k.vec_dot_tokens_max) {
            const int tokens = std::min(k.vec_dot_tokens_max, n_tokens - t);
            for (int64_t r = b0; r < b1; ++r) {
              dots(w.row(r), acts + t * act_bytes, act_bytes, tokens, w.cols, y + t * w.rows + r, size_t(w.rows));
            }
          }
        }
      },
      16);
}

// Quantizes tokens [t0, t0 + 8) (zeros past n_tokens) into one interleaved group.
void quantize_token_group(const Kernels& k, const float* x, int64_t n, int t0, int n_tokens, int8_t* q, float* scale,
                          float* gsum) {
  constexpr int G = kGemmTokenGroup;
  static thread_local std::vector<int8_t> row_q;
  static thread_local std::vector<float> row_scale, row_gsum;
  int8_t* rq = scratch(row_q, n);
  float* rs = scratch(row_scale, n / 32);
  float* rg = scratch(row_gsum, n / 16);
  for (int lane = 0; lane < G; ++lane) {
    if (t0 + lane < n_tokens) {
      k.gemm_quantize(x + (t0 + lane) * n, n, rq, rs, rg);
    } else {
      std::fill(rq, rq + n, int8_t(0));
      std::fill(rs, rs + n / 32, 0.0f);
      std::fill(rg, rg + n / 16, 0.0f);
    }
    for (int64_t i = 0; i < n / 4; ++i) std::copy(rq + 4 * i, rq + 4 * i + 4, q + (i * G + lane) * 4);
    for (int64_t c = 0; c < n / 32; ++c) scale[c * G + lane] = rs[c];
    for (int64_t g = 0; g < n / 16; ++g) gsum[g * G + lane] = rg[g];
  }
}

void matmul_gemm(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool, const Kernels& k) {
  constexpr int G = kGemmTokenGroup;
  const int64_t n = w.cols, chunks = n / 32, groups = n / 16;
  const int n_groups = ceil_div(n_tokens, G);
  static thread_local std::vector<int8_t> act_q;
  static thread_local std::vector<float> act_scale, act_gsum;
  static thread_local std::vector<GemmActs> act_groups;
  int8_t* q = scratch(act_q, size_t(n_groups) * G * n);
  float* scale = scratch(act_scale, size_t(n_groups) * G * chunks);
  float* gsum = scratch(act_gsum, size_t(n_groups) * G * groups);
  // Workers see their own thread_locals: hand them plain pointers.
  GemmActs* acts = scratch(act_groups, n_groups);
  for (int g = 0; g < n_groups; ++g) acts[g] = {q + g * G * n, scale + g * G * chunks, gsum + g * G * groups};
  pool.parallel_for(n_groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      quantize_token_group(k, x, n, int(g * G), n_tokens, q + g * G * n, scale + g * G * chunks, gsum + g * G * groups);
    }
  });

  const int64_t panels = ceil_div(w.rows, kGemmRows);
  pool.parallel_for(panels, [&](int64_t p0, int64_t p1) {
    static thread_local std::vector<uint8_t> panel_q;
    static thread_local std::vector<float> panel_scale, panel_offset;
    GemmPanel panel{scratch(panel_q, size_t(chunks) * kGemmRows * 32), scratch(panel_scale, size_t(chunks) * kGemmRows * 2),
                    scratch(panel_offset, size_t(kGemmRows) * groups), false, true};
    for (int tb = 0; tb < n_tokens; tb += kGemmTokenBlock) {
      const int tokens = std::min(kGemmTokenBlock, n_tokens - tb);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t r0 = p * kGemmRows;
        const int rows = int(std::min<int64_t>(kGemmRows, w.rows - r0));
        k.gemm_unpack(w.type, w.row(r0), w.row_stride, rows, n, k.gemm_unsigned_q8, panel);
        k.gemm_tile(panel, acts + tb / G, n, rows, tokens, y + tb * w.rows + r0, w.rows);
      }
    }
  });
}

}  // namespace

WeightView WeightView::dense(const void* data, TensorType type, int64_t rows, int64_t cols, std::string_view name) {
  return WeightView{data, type, rows, cols, row_bytes(type, cols), name};
}

void matmul(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool) {
  matmul(w, x, y, n_tokens, pool, kernels());
}

void matmul(const WeightView& w, const float* x, float* y, int n_tokens, ThreadPool& pool, const Kernels& k) {
  check(w);
  if (n_tokens <= 0) return;
  if (takes_gemm(w, n_tokens)) {
    matmul_gemm(w, x, y, n_tokens, pool, k);
  } else {
    matmul_dots(w, x, y, n_tokens, pool, k);
  }
}

void matmul_groups(const WeightView& w, const float* x, float* y, std::span<const TokenGroup> groups, ThreadPool& pool) {
  check(w);
  const Kernels& k = kernels();
  for (size_t g = 0; g < groups.size();) {
    const bool gemm = takes_gemm(w, groups[g].alone);
    const int64_t first = groups[g].first;
    int64_t end = first;
    for (; g < groups.size() && groups[g].first == end && takes_gemm(w, groups[g].alone) == gemm; ++g) end += groups[g].count;
    if (end == first) continue;  // an empty group
    const float* xs = x + first * w.cols;
    float* ys = y + first * w.rows;
    if (gemm) {
      matmul_gemm(w, xs, ys, int(end - first), pool, k);
    } else {
      matmul_dots(w, xs, ys, int(end - first), pool, k);
    }
  }
}

void embedding_row(const WeightView& w, int64_t row, float* out) {
  if (row < 0 || row >= w.rows) fail("embedding {}: row {} out of range [0, {})", w.name, row, w.rows);
  dequantize_row(w.type, w.row(row), out, w.cols);
}

}  // namespace nt::cpu
