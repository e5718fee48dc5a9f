// The mat-vec kernel template and its launcher, instantiated per format
// group in matvec_*.cu so that the instantiations compile in parallel.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/matvec.h"
#include "backend/cuda/kernels/weight_formats.cuh"

namespace nt::cuda {

constexpr int kMatvecWarps = 4;

// The params of columns [first, ...): every per-column pointer moved on
// (MatvecParams' column layout, matvec_stepwise's folded norms).
__host__ __device__ inline MatvecParams column_params(const MatvecParams& p, int64_t first) {
  MatvecParams q = p;
  const int64_t cols = p.w.cols, rows = p.w.rows;
  if (q.x.f32) q.x.f32 += first * cols;
  if (q.x.q8) q.x.q8 += first * cols;
  if (q.x.q8_scales) q.x.q8_scales += first * cols / 32;
  q.y += first * p.y_stride;
  if (q.residual) q.residual += first * p.y_stride;
  if (q.norm_in.group_sumsq) q.norm_in.group_sumsq += first * cols / 32;
  if (q.norm_out.q8) {
    q.norm_out.q8 += first * rows;
    q.norm_out.q8_scales += first * rows / 32;
    q.norm_out.group_sumsq += first * rows / 32;
  }
  return q;
}

template <class F>
__device__ __forceinline__ float dot_column(const typename F::Regs& r, const MatvecParams& p, int column, int unit) {
  const int64_t cols = p.w.cols;
  if constexpr (F::kQ8) {
    return F::dot(r, p.x.q8 + column * cols, p.x.q8_scales + column * (cols / 32), unit);
  } else {
    return F::dot(r, p.x.f32 + column * cols, unit);
  }
}

template <class F, bool kGated>
constexpr int kDefaultUnroll = kGated ? (F::kUnroll + 1) / 2 : F::kUnroll;  // gated units load twice the bytes

// PRECOND: cols % F::kUnitElems == 0 (and a whole number of blocks);
// activations 16-byte aligned with row stride cols; kGated: w_up has w's type and shape.
// kSplit (1, 2 or 4) warps share an output row: a block of kMatvecWarps warps
// covers kMatvecWarps / kSplit rows, and the row's threads walk units t,
// t + 32 kSplit, ... (t = thread index within the row), keeping kUnroll units
// of loads in flight; split rows sum their warps through shared memory. More
// warps per row put more loads in flight when a matrix has few rows. The first
// weights are loaded before waiting for the previous kernel (launch.cuh).
// Bytes moved: the weights once (twice for kGated), activations from L1/L2,
// columns * rows * 4 written. kTwoRows (not gated): each warp computes rows
// r and r + 1 like the gated pair, so both share the activation loads and
// their decoding; a warp then holds twice the weight loads in flight.
// This is the body of the mat-vec kernels for the rows of block `block`
// (counted within p.w); every thread of the block calls it.
// p.norm_in, when set, scales the products (NormIn). kNormOut: the block's
// kWarps warps hold 32 rows, one q8 group of the output, and also write
// p.norm_out for them (NormOut): one barrier, then warp 0 quantizes.
// kStepwise: the first `columns` (at most kColumns) of the activation columns,
// each computed with exactly the operations of a one-column launch of the same
// kSplit (a row's units in the same order, the same reductions, its own folded
// norms: column c's NormIn sums at group_sumsq + c * cols / 32, its NormOut at
// q8 + c * rows, q8_scales and group_sumsq + c * rows / 32; warp c quantizes it).
template <class F, int kColumns, bool kGated, int kSplit, int kUnroll, bool kTwoRows = false, int kWarps = kMatvecWarps,
          bool kNormOut = false, bool kStepwise = false>
__device__ __forceinline__ void matvec_block(const MatvecParams& p, int64_t block, int columns = kColumns) {
  static_assert(kSplit == 1 || kSplit == 2 || kSplit == 4, "a row is split over 1, 2 or 4 warps");
  static_assert(!(kGated && kTwoRows), "a gated warp already reads two matrices");
  static_assert(!kNormOut || ((kColumns == 1 || kStepwise) && !kGated && kWarps / kSplit * (kTwoRows ? 2 : 1) == 32 &&
                              kColumns <= kWarps),
                "a norm output needs one column (or stepwise columns, a warp each) and 32 rows a block");
  constexpr bool kSecond = kGated || kTwoRows;  // a second weight stream: w_up or the next row
  constexpr bool kNorms = kColumns == 1 || kStepwise;  // folded RMSNorms: one column, or columns each as one
  // Whether column c is computed (constant true unless stepwise).
  const auto used = [&](int c) { return !kStepwise || c < columns; };
  constexpr int kStride = 32 * kSplit;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = (block * (kWarps / kSplit) + warp / kSplit) * (kTwoRows ? 2 : 1);
  const bool active = row < p.w.rows;
  const int64_t next_row = kTwoRows && row + 1 < p.w.rows ? row + 1 : row;  // an odd last row reads its own twice
  if (kSplit == 1 && !kNormOut && !active) return;  // split rows keep every thread for the barrier
  [[maybe_unused]] float norm_weight = 0.0f;
  [[maybe_unused]] const int norm_column = kStepwise ? warp : 0;  // the column a norm-output warp quantizes
  if constexpr (kNormOut) {
    if (norm_column == warp && used(norm_column)) {
      norm_weight = p.norm_out.weight[block * 32 + lane];  // never written: load before the wait
    }
  }
  const int first = (warp % kSplit) * 32 + lane;
  const int units = active ? int(p.w.cols / F::kUnitElems) : 0;
  float acc[kColumns], acc_up[kColumns];
#pragma unroll
  for (int c = 0; c < kColumns; ++c) acc[c] = acc_up[c] = 0.0f;

  typename F::Regs r[kUnroll], r_up[kSecond ? kUnroll : 1];
  auto load_units = [&](int base) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = base + kStride * k;
      if (u < units) {
        r[k] = F::load(p.w, row, u);
        if constexpr (kGated) r_up[k] = F::load(p.w_up, row, u);
        if constexpr (kTwoRows) r_up[k] = F::load(p.w, next_row, u);
      }
    }
  };
  load_units(first);  // weights are never written: prefetch before the wait
  wait_for_inputs();
  [[maybe_unused]] float group_sumsq[kNorms ? kColumns : 1] = {};
  if (kNorms && p.norm_in.group_sumsq) {
    if constexpr (kStepwise) {
      const int64_t groups = p.w.cols / 32;
#pragma unroll
      for (int c = 0; c < kColumns; ++c) {
        if (used(c)) {
          for (int64_t g = lane; g < groups; g += 32) group_sumsq[c] += p.norm_in.group_sumsq[c * groups + g];
        }
      }
    } else {
      for (int64_t g = lane; g < p.w.cols / 32; g += 32) group_sumsq[0] += p.norm_in.group_sumsq[g];
    }
  }
  for (int base = first; base < units; base += kStride * kUnroll) {
    if (base != first) load_units(base);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = base + kStride * k;
      if (u < units) {
#pragma unroll
        for (int c = 0; c < kColumns; ++c) {
          if (used(c)) {
            acc[c] += dot_column<F>(r[k], p, c, u);
            if constexpr (kSecond) acc_up[c] += dot_column<F>(r_up[k], p, c, u);
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
    if (used(c)) {
      acc[c] = warp_sum(acc[c]);
      if constexpr (kSecond) acc_up[c] = warp_sum(acc_up[c]);
    }
  }
  if (kNorms && p.norm_in.group_sumsq) {
#pragma unroll
    for (int c = 0; c < (kNorms ? kColumns : 1); ++c) {
      if (used(c)) {
        const float inv = rsqrtf(warp_sum(group_sumsq[c]) / float(p.w.cols) + p.norm_in.eps);
        acc[c] *= inv;
        acc_up[c] *= inv;
      }
    }
  }
  [[maybe_unused]] bool writes = true;
  if constexpr (kSplit > 1) {
    __shared__ float partial[kWarps][2][kColumns];
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < kColumns; ++c) {
        partial[warp][0][c] = acc[c];
        partial[warp][1][c] = acc_up[c];
      }
    }
    __syncthreads();
    writes = active && warp % kSplit == 0;
    if (!kNormOut && !writes) return;
    if (writes) {
#pragma unroll
      for (int s = 1; s < kSplit; ++s) {
#pragma unroll
        for (int c = 0; c < kColumns; ++c) {
          acc[c] += partial[warp + s][0][c];
          acc_up[c] += partial[warp + s][1][c];
        }
      }
    }
  }
  [[maybe_unused]] __shared__ float block_rows[kNormOut ? kColumns : 1][kNormOut ? 32 : 1];
  if (lane == 0 && writes) {
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      if (!used(c)) continue;
      float v = kGated ? silu(acc[c]) * acc_up[c] : acc[c];
      if (p.residual) v += p.residual[c * p.y_stride + row];
      p.y[c * p.y_stride + row] = v;
      if constexpr (kNormOut) block_rows[c][row - block * 32] = v;
      if (kTwoRows && next_row != row) {
        float v2 = acc_up[c];
        if (p.residual) v2 += p.residual[c * p.y_stride + next_row];
        p.y[c * p.y_stride + next_row] = v2;
        if constexpr (kNormOut) block_rows[c][next_row - block * 32] = v2;
      }
    }
  }
  if constexpr (kNormOut) {
    __syncthreads();
    if (norm_column == warp && used(norm_column)) {
      const int c = norm_column;
      const int64_t groups = p.w.rows / 32;
      const float v = block_rows[c][lane];
      quantize_q8_warp(v * norm_weight, p.norm_out.q8 + c * p.w.rows + block * 32, p.norm_out.q8_scales + c * groups + block);
      const float sumsq = warp_sum(v * v);
      if (lane == 0) p.norm_out.group_sumsq[c * groups + block] = sumsq;
    }
  }
}

template <class F, int kColumns, bool kGated, int kSplit = 1, int kUnroll = kDefaultUnroll<F, kGated>, bool kTwoRows = false>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_kernel(const MatvecParams p) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, kColumns, kGated, kSplit, kUnroll, kTwoRows>(p, blockIdx.x);
}

// One column with the next RMSNorm's input (NormOut): 32 rows a block, each
// split over two warps that take two rows, so 32 warps. On the H200 this
// layout beat one warp a row and 16-warp blocks for the 8B's wo and down.
constexpr int kNormOutSplit = 2, kNormOutWarps = 32;

template <class F>
__global__ void __launch_bounds__(kNormOutWarps * 32) matvec_norm_out_kernel(const MatvecParams p) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, 1, false, kNormOutSplit, kDefaultUnroll<F, true>, true, kNormOutWarps, true>(p, blockIdx.x);
}

// Single-column mat-vec over up to kMaxMatvecParts matrices stacked by rows,
// each of format FA or FB (Q, K and V of a mixed K-quant model): one launch
// instead of one per matrix; kTwoRows: each warp computes two rows.
// PRECOND: each part's rows are a multiple of the rows per block, so no block
// straddles two parts.
template <class FA, class FB, int kSplit, bool kTwoRows = false>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_parts_kernel(const MatvecPartsParams pp) {
  NT_TRACE_BLOCK(kMatvecParts);
  allow_dependents();
  constexpr int rows_per_block = kMatvecWarps / kSplit * (kTwoRows ? 2 : 1);
  int64_t block = blockIdx.x;
  int i = 0;
  while (i + 1 < pp.n_parts && block * rows_per_block >= pp.part[i].w.rows) block -= pp.part[i++].w.rows / rows_per_block;
  MatvecParams p;
  p.w = pp.part[i].w;
  p.x = pp.x;
  p.y = pp.y + pp.part[i].y_offset;
  p.y_stride = 0;
  p.norm_in = pp.norm_in;
  if (p.w.type == FA::kType) {
    matvec_block<FA, 1, false, kSplit, kDefaultUnroll<FA, kTwoRows>, kTwoRows>(p, block);
  } else {
    matvec_block<FB, 1, false, kSplit, kDefaultUnroll<FB, kTwoRows>, kTwoRows>(p, block);
  }
}

// What every mat-vec launch needs of its params: a gated pair of one type
// and shape, and activations in the form the weights take (q8 or f32).
void check_matvec_operands(const MatvecParams& p);

// The weight bytes of a launch over these matrices (they lie side by side in
// the weight buffer), as one L2 streaming window.
StreamedBytes streamed_weights(std::initializer_list<const DeviceMatrix*> matrices);

// Warps per row for a single-column mat-vec whose rows hold this many units
// when the caller leaves MatvecParams::warps_per_row at 0.
int default_warps_per_row(int64_t units_per_row);

// Rows per warp (1 or 2) for a single-column, ungated mat-vec when the caller
// leaves MatvecParams::rows_per_warp at 0.
int default_rows_per_warp(int64_t rows, int warps_per_row);

template <class F, int kColumns, bool kGated, int kSplit, bool kTwoRows = false>
void launch_matvec_kernel(const MatvecParams& p, cudaStream_t stream) {
  constexpr int rows_per_block = kMatvecWarps / kSplit * (kTwoRows ? 2 : 1);
  const unsigned blocks = unsigned(ceil_div(p.w.rows, rows_per_block));
  constexpr int unroll = kDefaultUnroll<F, kGated || kTwoRows>;
  launch_kernel_with(matvec_kernel<F, kColumns, kGated, kSplit, unroll, kTwoRows>, 1, streamed_weights({&p.w, &p.w_up}),
                     dim3(blocks), dim3(kMatvecWarps * 32), 0, stream, p);
  NT_CUDA_CHECK_LAUNCH();
}

template <class F, int kColumns>
void launch_matvec_columns(const MatvecParams& p, cudaStream_t stream) {
  if (p.w_up.rows) {
    launch_matvec_kernel<F, kColumns, true, 1>(p, stream);
    return;
  }
  if constexpr (kColumns <= kMatvecPairedMaxColumns) {
    if (p.rows_per_warp == 2) {  // matvec() checked: two rows over two warps
      launch_matvec_kernel<F, kColumns, false, 2, true>(p, stream);
      return;
    }
  }
  launch_matvec_kernel<F, kColumns, false, 1>(p, stream);
}

template <class F, bool kGated, int kSplit>
void launch_matvec_decode_split(const MatvecParams& p, int rows_per_warp, cudaStream_t stream) {
  if (rows_per_warp == 2) {
    if constexpr (!kGated) launch_matvec_kernel<F, 1, false, kSplit, true>(p, stream);
  } else {
    launch_matvec_kernel<F, 1, kGated, kSplit>(p, stream);
  }
}

// Decode: one column, with the row split over 1, 2 or 4 warps and (not
// gated) one or two rows per warp.
template <class F, bool kGated>
void launch_matvec_decode(const MatvecParams& p, cudaStream_t stream) {
  if constexpr (!kGated && F::kQ8) {
    if (p.norm_out.q8) {  // matvec() checked the rows are whole groups
      launch_kernel_with(matvec_norm_out_kernel<F>, 1, streamed_weights({&p.w}), dim3(unsigned(p.w.rows / 32)),
                         dim3(kNormOutWarps * 32), 0, stream, p);
      NT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const int split = p.warps_per_row ? p.warps_per_row : default_warps_per_row(p.w.cols / F::kUnitElems);
  const int rows_per_warp = kGated ? 1 : p.rows_per_warp ? p.rows_per_warp : default_rows_per_warp(p.w.rows, split);
  switch (split) {
    case 1: launch_matvec_decode_split<F, kGated, 1>(p, rows_per_warp, stream); break;
    case 2: launch_matvec_decode_split<F, kGated, 2>(p, rows_per_warp, stream); break;
    case 4: launch_matvec_decode_split<F, kGated, 4>(p, rows_per_warp, stream); break;
    default: fail("matvec splits a row over 1, 2 or 4 warps, not {}", p.warps_per_row);
  }
}

template <class F>
void launch_matvec(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (columns) {
    case 1:
      if (p.w_up.rows) {
        launch_matvec_decode<F, true>(p, stream);
      } else {
        launch_matvec_decode<F, false>(p, stream);
      }
      break;
    case 2: launch_matvec_columns<F, 2>(p, stream); break;
    case 3: launch_matvec_columns<F, 3>(p, stream); break;
    case 4: launch_matvec_columns<F, 4>(p, stream); break;
    case 5: launch_matvec_columns<F, 5>(p, stream); break;
    case 6: launch_matvec_columns<F, 6>(p, stream); break;
    case 7: launch_matvec_columns<F, 7>(p, stream); break;
    case 8: launch_matvec_columns<F, 8>(p, stream); break;
    default: fail("matvec takes 1 to {} columns, got {}", kMatvecMaxColumns, columns);
  }
}

// Per-group entry points (matvec_float.cu, matvec_legacy.cu, matvec_kquant.cu);
// each returns false for types outside its group.
bool launch_matvec_float(const MatvecParams& p, int columns, cudaStream_t stream);
bool launch_matvec_legacy(const MatvecParams& p, int columns, cudaStream_t stream);
bool launch_matvec_kquant(const MatvecParams& p, int columns, cudaStream_t stream);
// Stepwise columns (matvec_stepwise.cu): 1 to kMatvecMaxColumns, any format;
// and whether such a launch gives each column blocks of its own.
bool launch_matvec_stepwise(const MatvecParams& p, int columns, cudaStream_t stream);
bool stepwise_columns_apart(const MatvecParams& p, int columns);

}  // namespace nt::cuda
