// Mat-vec tuning sweeps for cuda_bench: the production kernel, for one column
// (decode) or four (a batch of four sequences), with other warps-per-row
// splits, rows per warp and unroll depths (units of loads in flight per
// thread) for the formats of Q4_K_M / Q8_0 / F16 models.
#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt::cuda {
namespace {

template <class F, int kColumns, bool kGated, int kSplit, int kUnroll, bool kTwoRows = false>
void launch(const MatvecParams& p, cudaStream_t stream) {
  constexpr int rows_per_block = kMatvecWarps / kSplit * (kTwoRows ? 2 : 1);
  const unsigned blocks = unsigned((p.w.rows + rows_per_block - 1) / rows_per_block);
  matvec_kernel<F, kColumns, kGated, kSplit, kUnroll, kTwoRows><<<blocks, kMatvecWarps * 32, 0, stream>>>(p);
  NT_CUDA_CHECK_LAUNCH();
}

template <class F, int kColumns, bool kGated, int kSplit>
void launch_unroll(int unroll, const MatvecParams& p, cudaStream_t stream) {
  switch (unroll) {
    case 1: launch<F, kColumns, kGated, kSplit, 1>(p, stream); break;
    case 2: launch<F, kColumns, kGated, kSplit, 2>(p, stream); break;
    case 4: launch<F, kColumns, kGated, kSplit, 4>(p, stream); break;
    default: fail("no variant with unroll {}", unroll);
  }
}

template <class F, int kColumns, bool kGated>
void launch_split(int split, int unroll, const MatvecParams& p, cudaStream_t stream) {
  switch (split) {
    case 1: launch_unroll<F, kColumns, kGated, 1>(unroll, p, stream); break;
    case 2: launch_unroll<F, kColumns, kGated, 2>(unroll, p, stream); break;
    case 4: launch_unroll<F, kColumns, kGated, 4>(unroll, p, stream); break;
    default: fail("no variant with {} warps per row", split);
  }
}

// Two rows per warp (not gated), unroll 1.
template <class F, int kColumns>
void launch_two_rows(int split, const MatvecParams& p, cudaStream_t stream) {
  switch (split) {
    case 1: launch<F, kColumns, false, 1, 1, true>(p, stream); break;
    case 2: launch<F, kColumns, false, 2, 1, true>(p, stream); break;
    case 4: launch<F, kColumns, false, 4, 1, true>(p, stream); break;
    default: fail("no variant with {} warps per row", split);
  }
}

template <class F, int kColumns>
void launch_format(int rows_per_warp, int split, int unroll, const MatvecParams& p, cudaStream_t stream) {
  if (rows_per_warp == 2) {
    if (p.w_up.rows || unroll != 1) fail("two rows per warp only ungated with unroll 1");
    launch_two_rows<F, kColumns>(split, p, stream);
  } else if (p.w_up.rows) {
    launch_split<F, kColumns, true>(split, unroll, p, stream);
  } else {
    launch_split<F, kColumns, false>(split, unroll, p, stream);
  }
}

template <class F>
void launch_columns(int columns, int rows_per_warp, int split, int unroll, const MatvecParams& p, cudaStream_t stream) {
  switch (columns) {
    case 1: launch_format<F, 1>(rows_per_warp, split, unroll, p, stream); break;
    case 4: launch_format<F, 4>(rows_per_warp, split, unroll, p, stream); break;
    default: fail("variants take 1 or 4 columns, not {}", columns);
  }
}

}  // namespace

// One column (the decode case) or four; gated when p.w_up is set. q4k_pair:
// Q4_K through the 32-byte units of FormatQ4_KPair (one column).
void matvec_variant(int columns, int rows_per_warp, int split, int unroll, const MatvecParams& p, cudaStream_t stream,
                    bool q4k_pair) {
  if (q4k_pair && (p.w.type != TensorType::Q4_K || columns != 1)) fail("32-byte units are a one-column Q4_K variant");
  switch (p.w.type) {
    case TensorType::Q4_K:
      if (q4k_pair) {
        launch_format<FormatQ4_KPair, 1>(rows_per_warp, split, unroll, p, stream);
      } else {
        launch_columns<FormatQ4_K>(columns, rows_per_warp, split, unroll, p, stream);
      }
      break;
    case TensorType::Q6_K: launch_columns<FormatQ6_K>(columns, rows_per_warp, split, unroll, p, stream); break;
    case TensorType::Q8_0: launch_columns<FormatQ8_0>(columns, rows_per_warp, split, unroll, p, stream); break;
    case TensorType::F16: launch_columns<FormatF16>(columns, rows_per_warp, split, unroll, p, stream); break;
    default: fail("no variants for {}", tensor_type_name(p.w.type));
  }
}

}  // namespace nt::cuda
