// The mat-vec kernel template and its launcher, instantiated per format
// group in matvec_*.cu so that the instantiations compile in parallel.
#pragma once

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec.h"
#include "backend/cuda/weight_formats.cuh"

namespace nt::cuda {

constexpr int kMatvecWarps = 4;

template <class F>
__device__ __forceinline__ float dot_column(const typename F::Regs& r, const MatvecParams& p, int column, int unit) {
  const int64_t cols = p.w.cols;
  if constexpr (F::kQ8) {
    return F::dot(r, p.x.q8 + column * cols, p.x.q8_scales + column * (cols / 32), unit);
  } else {
    return F::dot(r, p.x.f32 + column * cols, unit);
  }
}

// PRECOND: cols % F::kUnitElems == 0 (and a whole number of blocks);
// activations 16-byte aligned with row stride cols; kGated: w_up has w's type and shape.
// One warp per output row; each lane walks units lane, lane+32, ... and keeps
// kUnroll units of loads in flight. The first weights are loaded before
// waiting for the previous kernel (launch.cuh). Bytes moved: the weights once
// (twice for kGated), activations from L1/L2, columns * rows * 4 written.
template <class F, int kColumns, bool kGated>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_kernel(const MatvecParams p) {
  allow_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kMatvecWarps + (threadIdx.x >> 5);
  if (row >= p.w.rows) return;
  const int units = int(p.w.cols / F::kUnitElems);
  constexpr int kUnroll = kGated ? (F::kUnroll + 1) / 2 : F::kUnroll;  // gated units load twice the bytes
  float acc[kColumns], acc_up[kColumns];
#pragma unroll
  for (int c = 0; c < kColumns; ++c) acc[c] = acc_up[c] = 0.0f;

  typename F::Regs r[kUnroll], r_up[kGated ? kUnroll : 1];
  auto load_units = [&](int base) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = base + 32 * k;
      if (u < units) {
        r[k] = F::load(p.w, row, u);
        if constexpr (kGated) r_up[k] = F::load(p.w_up, row, u);
      }
    }
  };
  load_units(lane);  // weights are never written: prefetch before the wait
  wait_for_inputs();
  for (int base = lane; base < units; base += 32 * kUnroll) {
    if (base != lane) load_units(base);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = base + 32 * k;
      if (u < units) {
#pragma unroll
        for (int c = 0; c < kColumns; ++c) {
          acc[c] += dot_column<F>(r[k], p, c, u);
          if constexpr (kGated) acc_up[c] += dot_column<F>(r_up[k], p, c, u);
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
    acc[c] = warp_sum(acc[c]);
    if constexpr (kGated) acc_up[c] = warp_sum(acc_up[c]);
  }
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      float v = kGated ? silu(acc[c]) * acc_up[c] : acc[c];
      if (p.residual) v += p.residual[c * p.y_stride + row];
      p.y[c * p.y_stride + row] = v;
    }
  }
}

template <class F, int kColumns>
void launch_matvec_columns(const MatvecParams& p, cudaStream_t stream) {
  const unsigned blocks = unsigned((p.w.rows + kMatvecWarps - 1) / kMatvecWarps);
  if (p.w_up.rows) {
    launch_kernel(matvec_kernel<F, kColumns, true>, dim3(blocks), dim3(kMatvecWarps * 32), 0, stream, p);
  } else {
    launch_kernel(matvec_kernel<F, kColumns, false>, dim3(blocks), dim3(kMatvecWarps * 32), 0, stream, p);
  }
  NT_CUDA_CHECK_LAUNCH();
}

template <class F>
void launch_matvec(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (columns) {
    case 1: launch_matvec_columns<F, 1>(p, stream); break;
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

}  // namespace nt::cuda
