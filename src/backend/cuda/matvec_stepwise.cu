// Stepwise mat-vec (matvec_stepwise in matvec.h): the columns of a stepwise
// run, each computed as a one-column decode launch computes it, so that a
// speculative verification pass reads every weight once and still gives
// each token the numbers of a one-token step. The launch takes the decode
// path's layout choice (the norm-output blocks, else its row split) and its
// format structs (the gated Q4_K decode's 64-element units).
#include "backend/cuda/matvec_kernel.cuh"

namespace nt::cuda {
namespace {

// PRECOND: 1 <= columns <= kMaxColumns; as matvec_kernel. Bytes moved:
// the weights once (twice gated) for every column, columns * rows * 4 written.
// A column's operations do not depend on kMaxColumns, only the registers the
// launch holds: a few columns take the narrower kernel.
template <class F, bool kGated, int kSplit, int kMaxColumns>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_stepwise_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, kMaxColumns, kGated, kSplit, kDefaultUnroll<F, kGated>, false, kMatvecWarps, false, true>(p, blockIdx.x,
                                                                                                         columns);
}

// As matvec_norm_out_kernel, warp c also quantizing column c's norm output.
template <class F, int kMaxColumns>
__global__ void __launch_bounds__(kNormOutWarps * 32) matvec_stepwise_norm_out_kernel(const MatvecParams p, int columns) {
  NT_TRACE_BLOCK(kMatvec);
  allow_dependents();
  matvec_block<F, kMaxColumns, false, kNormOutSplit, kDefaultUnroll<F, true>, true, kNormOutWarps, true, true>(
      p, blockIdx.x, columns);
}

// Launches of up to this many columns take the narrower kernels.
constexpr int kNarrowColumns = 4;

template <class F, bool kGated, int kSplit, int kMaxColumns>
void launch_split(const MatvecParams& p, int columns, cudaStream_t stream) {
  constexpr int rows_per_block = kMatvecWarps / kSplit;
  launch_kernel_with(matvec_stepwise_kernel<F, kGated, kSplit, kMaxColumns>, 1, streamed_weights({&p.w, &p.w_up}),
                     dim3(unsigned((p.w.rows + rows_per_block - 1) / rows_per_block)), dim3(kMatvecWarps * 32), 0, stream,
                     p, columns);
  NT_CUDA_CHECK_LAUNCH();
}

// The choices launch_matvec_decode makes for one column of these params.
template <class F, bool kGated, int kMaxColumns>
void launch_stepwise(const MatvecParams& p, int columns, cudaStream_t stream) {
  if constexpr (!kGated && F::kQ8) {
    if (p.norm_out.q8) {  // matvec_stepwise checked the rows are whole groups
      launch_kernel_with(matvec_stepwise_norm_out_kernel<F, kMaxColumns>, 1, streamed_weights({&p.w}),
                         dim3(unsigned(p.w.rows / 32)), dim3(kNormOutWarps * 32), 0, stream, p, columns);
      NT_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const int split = p.warps_per_row ? p.warps_per_row : default_warps_per_row(p.w.cols / F::kUnitElems);
  switch (split) {
    case 1: launch_split<F, kGated, 1, kMaxColumns>(p, columns, stream); break;
    case 2: launch_split<F, kGated, 2, kMaxColumns>(p, columns, stream); break;
    case 4: launch_split<F, kGated, 4, kMaxColumns>(p, columns, stream); break;
    default: fail("matvec splits a row over 1, 2 or 4 warps, not {}", split);
  }
}

template <class F, bool kGated>
void launch_columns(const MatvecParams& p, int columns, cudaStream_t stream) {
  if (columns <= kNarrowColumns) {
    launch_stepwise<F, kGated, kNarrowColumns>(p, columns, stream);
  } else {
    launch_stepwise<F, kGated, kMatvecMaxColumns>(p, columns, stream);
  }
}

template <class F>
void launch_format(const MatvecParams& p, int columns, cudaStream_t stream) {
  if (p.w_up.rows) {
    launch_columns<F, true>(p, columns, stream);
  } else {
    launch_columns<F, false>(p, columns, stream);
  }
}

}  // namespace

bool launch_matvec_stepwise(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (p.w.type) {
    case TensorType::F32: launch_format<FormatF32>(p, columns, stream); return true;
    case TensorType::F16: launch_format<FormatF16>(p, columns, stream); return true;
    case TensorType::BF16: launch_format<FormatBF16>(p, columns, stream); return true;
    case TensorType::Q4_0: launch_format<FormatQ4_0>(p, columns, stream); return true;
    case TensorType::Q4_1: launch_format<FormatQ4_1>(p, columns, stream); return true;
    case TensorType::Q5_0: launch_format<FormatQ5_0>(p, columns, stream); return true;
    case TensorType::Q5_1: launch_format<FormatQ5_1>(p, columns, stream); return true;
    case TensorType::Q8_0: launch_format<FormatQ8_0>(p, columns, stream); return true;
    case TensorType::Q2_K: launch_format<FormatQ2_K>(p, columns, stream); return true;
    case TensorType::Q3_K: launch_format<FormatQ3_K>(p, columns, stream); return true;
    case TensorType::Q4_K:
      if (p.w_up.rows) {  // the gated decode mat-vec's units (launch_matvec_kquant)
        launch_columns<FormatQ4_KPair, true>(p, columns, stream);
      } else {
        launch_columns<FormatQ4_K, false>(p, columns, stream);
      }
      return true;
    case TensorType::Q5_K: launch_format<FormatQ5_K>(p, columns, stream); return true;
    case TensorType::Q6_K: launch_format<FormatQ6_K>(p, columns, stream); return true;
    default: return false;
  }
}

}  // namespace nt::cuda
