#include "backend/cuda/kernels/matvec.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt {
namespace {

// PRECOND: n_blocks = columns * cols / 32. One warp per 32-element block;
// bytes moved: 4 read + 1 written per element, 8 per block.
__global__ void quantize_q8_kernel(const float* x, int8_t* q8, float2* scales, int64_t n_blocks) {
  NT_TRACE_BLOCK(kQuantize);
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t block = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (block >= n_blocks) return;
  cuda::quantize_q8_warp(x[block * 32 + (threadIdx.x & 31)], q8 + block * 32, scales + block);
}

}  // namespace

namespace cuda {

// Long rows are split over warps (split-K) while each thread keeps >= 4 units:
// more loads in flight per row without a reduction that outweighs the work.
// From the H200 sweep (cuda_NOTES.md): Q6_K 4096 x 14336 +9%, 8192 x 28672
// +37% with 2-4 warps; Q4_K rows of 128-256 units gain little or lose.
int default_warps_per_row(int64_t units_per_row) {
  constexpr int64_t kMinUnitsPerThread = 4;
  int split = 1;
  while (split < 4 && units_per_row >= 2 * split * 32 * kMinUnitsPerThread) split *= 2;
  return split;
}

// Two rows per warp share the activation loads and decoding (+3-10% on the
// H200 for Q6_K 4096 x 14336 and Q4_K 8192 x 8192, cuda_NOTES.md) but halve
// the warps: pair rows only while >= 4096 warps remain.
int default_rows_per_warp(int64_t rows, int warps_per_row) {
  constexpr int64_t kMinWarps = 4096;
  return rows / 2 * warps_per_row >= kMinWarps ? 2 : 1;
}

void check_matvec_operands(const MatvecParams& p) {
  if (p.w_up.rows && (p.w_up.type != p.w.type || p.w_up.rows != p.w.rows || p.w_up.cols != p.w.cols)) {
    fail("gated matvec needs matrices of one type and shape: {} {}x{} vs {} {}x{}", tensor_type_name(p.w.type), p.w.rows,
         p.w.cols, tensor_type_name(p.w_up.type), p.w_up.rows, p.w_up.cols);
  }
  if (matvec_wants_q8(p.w.type) ? !p.x.q8 || !p.x.q8_scales : !p.x.f32) {
    fail("matvec over {} weights was not given {} activations", tensor_type_name(p.w.type),
         matvec_wants_q8(p.w.type) ? "q8" : "f32");
  }
}

StreamedBytes streamed_weights(std::initializer_list<const DeviceMatrix*> matrices) {
  uintptr_t first = UINTPTR_MAX, end = 0;
  for (const DeviceMatrix* m : matrices) {
    if (!m->rows) continue;
    const auto base = reinterpret_cast<uintptr_t>(m->plane[0]);
    first = std::min(first, base);
    end = std::max(end, base + uintptr_t(device_matrix_bytes(m->type, m->rows, m->cols)));
  }
  return end > first ? StreamedBytes{reinterpret_cast<const void*>(first), size_t(end - first)} : StreamedBytes{};
}

}  // namespace cuda

bool matvec_wants_q8(TensorType type) {
  return type != TensorType::F32 && type != TensorType::F16 && type != TensorType::BF16;
}

namespace {

// The params' own rules; `stepwise`: columns that each fold their norms as one does.
void check_params(const MatvecParams& p, int64_t columns, bool stepwise) {
  cuda::check_matvec_operands(p);
  // Stepwise columns keep a forced split (the one-column launch's), not a row
  // pairing; other launches of several columns run one warp a row, or pair
  // rows over two warps.
  if (stepwise && p.rows_per_warp != 0 && columns != 1) fail("matvec chooses rows per warp only for one column, got {}", columns);
  const bool paired = p.warps_per_row == 2 && p.rows_per_warp == 2;
  const bool one_warp = p.warps_per_row <= 1 && p.rows_per_warp <= 1;
  if (!stepwise && columns != 1 && !one_warp && !(paired && columns <= kMatvecPairedMaxColumns)) {
    fail("matvec over {} columns runs one warp a row, or (2 to {} columns, not gated) two rows over two warps; got {} "
         "warps per row and {} rows per warp",
         columns, kMatvecPairedMaxColumns, p.warps_per_row, p.rows_per_warp);
  }
  if (p.rows_per_warp < 0 || p.rows_per_warp > 2 || (p.rows_per_warp == 2 && p.w_up.rows)) {
    fail("matvec takes 1 or 2 rows per warp, and 1 when gated; got {}", p.rows_per_warp);
  }
  const bool folds_norm = p.norm_in.group_sumsq || p.norm_out.q8;
  if (folds_norm && ((!stepwise && columns != 1) || !matvec_wants_q8(p.w.type))) {
    fail("a folded RMSNorm needs one column (or stepwise ones) of q8 activations, got {} columns of {}", columns,
         tensor_type_name(p.w.type));
  }
  if (p.norm_out.q8 && (!p.norm_out.weight || !p.norm_out.q8_scales || !p.norm_out.group_sumsq || p.w_up.rows ||
                        p.w.rows % 32 != 0)) {
    fail("a norm output needs its weight, q8 scales and sums, an ungated matrix and rows in 32s, got {} rows", p.w.rows);
  }
}

}  // namespace

void matvec(const MatvecParams& p, int columns, cudaStream_t stream) {
  check_params(p, columns, false);
  if (p.w.rows == 0) return;
  if (cuda::launch_matvec_float(p, columns, stream) || cuda::launch_matvec_legacy(p, columns, stream) ||
      cuda::launch_matvec_kquant(p, columns, stream)) {
    return;
  }
  weight_layout(p.w.type);  // throws naming the unsupported type
}

void matvec_stepwise(const MatvecParams& p, int64_t columns, cudaStream_t stream) {
  if (columns < 0) fail("matvec over {} columns", columns);
  check_params(p, columns, true);
  if (p.w.rows == 0) return;
  for (int64_t first = 0; first < columns; first += kMatvecMaxColumns) {
    const int n = int(std::min<int64_t>(kMatvecMaxColumns, columns - first));
    const MatvecParams q = cuda::column_params(p, first);
    if (n == 1) {
      matvec(q, 1, stream);  // the one-column launch itself
    } else if (!cuda::launch_matvec_stepwise(q, n, stream)) {
      weight_layout(p.w.type);  // throws naming the unsupported type
    }
  }
}

bool matvec_stepwise_columns_apart(const MatvecParams& p, int64_t columns) {
  if (columns < 2 || columns > kMatvecMaxColumns) fail("stepwise columns apart: 2 to {} columns, got {}", kMatvecMaxColumns, columns);
  return cuda::stepwise_columns_apart(p, int(columns));
}

void quantize_activations(const float* x, int64_t columns, int64_t cols, int8_t* q8, float2* q8_scales,
                          cudaStream_t stream) {
  if (cols % 32 != 0) fail("q8 activations need a multiple of 32 elements per row, got {}", cols);
  const int64_t n_blocks = columns * cols / 32;
  if (n_blocks == 0) return;
  const int threads = 256;
  cuda::launch_kernel(quantize_q8_kernel, dim3(cuda::blocks_for(n_blocks * 32, threads)), dim3(threads), 0, stream, x,
                      q8, q8_scales, n_blocks);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt
