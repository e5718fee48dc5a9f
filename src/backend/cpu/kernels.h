// Table of the per-ISA CPU kernels. Each ISA fills one table in its own
// translation unit (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp)
// and the rest of the backend calls through the table picked at startup.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "quant/blocks.h"
#include "quant/tensor_type.h"

namespace nt::cpu {

// The activation format a weight type's dot product consumes.
enum class ActFormat {
  F32,   // F32, F16, BF16 weights
  Q8_0,  // Q4_0, Q5_0, Q8_0, MXFP4: BlockQ8_0
  Q8_1,  // Q4_1, Q5_1: BlockQ8_1 (its sum feeds the weights' min term)
  Q8_K,  // K-quants: BlockQ8_K
};

// Throws nt::Error for types that are not weight formats.
ActFormat act_format(TensorType weight_type);
// Bytes of one activation row of n elements in `format`.
size_t act_row_bytes(ActFormat format, int64_t n);

// The legacy formats' several-token dots (Q4_0 to Q8_0) take each activation
// row split: its n codes back to back, then every block's scales as f32 (d,
// and s for Q8_1), so that two blocks' codes are one load and their scales
// another. The values are the blocks' own (fp16 to f32 is exact).
bool takes_split_rows(TensorType weight_type);
size_t split_row_bytes(ActFormat format, int64_t n);
// Splits a row of n elements of Q8_0 or Q8_1 blocks into out.
void split_row(ActFormat format, const void* blocks, int64_t n, uint8_t* out);

// dot(weight row, activation row) over n elements; `act` is in act_format(weight type).
using VecDotFn = float (*)(const void* weight_row, const void* act, int64_t n);
// The same for n_tokens activation rows (token t's at act + t * act_stride
// bytes; split rows where takes_split_rows) into out[t * out_stride],
// decoding the weight row once: each result bit for bit VecDotFn's.
// n_tokens <= Kernels::vec_dot_tokens_max.
using VecDotTokensFn = void (*)(const void* weight_row, const void* act, size_t act_stride, int n_tokens, int64_t n,
                                float* out, size_t out_stride);

// --- Prefill GEMM operands -------------------------------------------------
// Every quantized weight type is unpacked, a panel of kGemmRows rows at a
// time, into one integer form: per 32-element chunk 32 small integers q
// (uint8, or int8 when `signed_q`), a scale per 16-element half-chunk and an
// offset c per 16-element group, so that w = scale * q + c.
// Activations are int8 with a float scale per 32 elements and, per 16-group,
// gsum = scale * sum(q), stored token-interleaved in groups of
// kGemmTokenGroup tokens so that one 32-byte load holds 4 consecutive
// elements of 8 tokens. Then
//   dot(w, x) = sum_halves scale_w * scale_x * idot(q_w, q_x) + sum_groups c * gsum.
constexpr int kGemmRows = 4;
constexpr int kGemmTokenGroup = 8;

struct GemmPanel {
  uint8_t* q;          // [n/32][kGemmRows][32]
  float* scale;        // [n/32][kGemmRows][2]
  float* offset;       // [kGemmRows][n/16]
  bool signed_q;       // q holds int8 (Q8_0 without vpdpbusd)
  bool uniform_scale;  // both halves of every chunk share a scale
};

// One token group of an activation matrix (tokens past the end are zero).
struct GemmActs {
  const int8_t* q;     // [n/4][kGemmTokenGroup][4]
  const float* scale;  // [n/32][kGemmTokenGroup]
  const float* gsum;   // [n/16][kGemmTokenGroup]
};

// Y[t * y_stride + r] = dot(panel row r, token t) for r < rows and t < tokens,
// where token t is lane t % 8 of groups[t / 8].
using GemmTileFn = void (*)(const GemmPanel& panel, const GemmActs* groups, int64_t n, int rows, int tokens,
                            float* y, int64_t y_stride);

// GGUF type ids the per-type tables hold: up to MXFP4's.
constexpr size_t kTypeIds = size_t(TensorType::MXFP4) + 1;

struct Kernels {
  Isa isa;

  // Activation quantizers; n is a whole number of blocks.
  void (*quantize_q8_0)(const float* x, BlockQ8_0* y, int64_t n);
  void (*quantize_q8_1)(const float* x, BlockQ8_1* y, int64_t n);
  void (*quantize_q8_k)(const float* x, BlockQ8_K* y, int64_t n);

  // Indexed by the GGUF type id; null for non-weight types.
  std::array<VecDotFn, kTypeIds> vec_dot;
  // Where set, several tokens' vec_dot at once (the fused decode rows of a batch).
  std::array<VecDotTokensFn, kTypeIds> vec_dot_tokens;
  int vec_dot_tokens_max;

  // Prefill GEMM: quantize one activation row (n a multiple of 32) into
  // q[n], scale[n/32], gsum[n/16] (the caller interleaves them), then
  // multiply tiles.
  void (*gemm_quantize)(const float* x, int64_t n, int8_t* q, float* scale, float* gsum);
  GemmTileFn gemm_tile;
  bool gemm_unsigned_q8;  // prefers Q8_0 weights biased to uint8 (vpdpbusd)
  // Same contract as gemm_unpack_panel (below), vectorised.
  void (*gemm_unpack)(TensorType type, const uint8_t* first_row, size_t row_stride, int rows, int64_t n,
                      bool unsigned_q8, GemmPanel& panel);

  // Float helpers for the ops and attention.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f32)(float alpha, const float* x, float* y, int64_t n);   // y += alpha * x
  // F16 rows against several vectors at once (the query heads sharing a KV
  // head): out[h * out_stride + j] = a[j] . (b + h * b_stride) for the rows
  // a[0..keys); and for the rows x[0..keys) in order, y + h * y_stride +=
  // alpha[h * alpha_stride + j] * x[j]. A number does not depend on how many rows
  // or vectors share the call (nor, for the sums, on how the rows are split
  // into calls).
  void (*dot_f16_heads)(const uint16_t* const* a, int keys, const float* b, int64_t b_stride, int heads, int64_t n,
                        float* out, int64_t out_stride);
  void (*axpy_f16_heads)(const float* alpha, int64_t alpha_stride, const uint16_t* const* x, int keys, float* y,
                         int64_t y_stride, int heads, int64_t n);
  float (*exp_sum)(float* x, int64_t n, float shift);  // x = exp(x - shift); returns the sum
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);  // fp32_to_fp16's bits (the KV cache's stores)
  void (*silu_mul)(const float* g, const float* u, float* y, int64_t n);  // y = silu(g) * u
};

// How far ahead of the block it computes a dot product or unpacks a GEMM
// panel the kernels prefetch the weights (kernels_x86.inc says why): 2048
// bytes into every cache level, or Tuning::cpu_prefetch_bytes (0: no
// prefetch) and cpu_prefetch_nta (the non-temporal hint, for weights read
// once a pass) for measuring other machines (core/tuning.h).
struct Prefetch {
  int bytes;
  bool non_temporal;
};
Prefetch prefetch_setting();

// The table for `isa` (which must be supported) and for active_isa().
const Kernels& kernels_for(Isa isa);
const Kernels& kernels();

// Per-ISA tables, each defined in its own translation unit.
const Kernels& scalar_kernels();
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();

// Unpacks rows [row0, row0 + rows) (rows <= kGemmRows; missing rows become
// zero) of a quantized weight matrix into `panel`: the scalar reference of
// Kernels::gemm_unpack.
void gemm_unpack_panel(TensorType type, const uint8_t* first_row, size_t row_stride, int rows,
                       int64_t n, bool unsigned_q8, GemmPanel& panel);

}  // namespace nt::cpu
