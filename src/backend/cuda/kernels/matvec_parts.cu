// One launch for Q, K and V when their formats differ (the K-quant mixes keep
// V, sometimes K, in a wider format): the three small mat-vecs fill the GPU
// together and skip two launch gaps per layer.
#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt {
namespace cuda {
namespace {

// Two rows per warp whenever every part's rows fill whole blocks of pairs:
// the 8B's Q/K/V (1536 blocks at 54 registers, two waves) then fits one wave
// of 768 blocks; +1-2% decode on the H200 (cuda_NOTES.md).
template <class FA, class FB, int kSplit>
void launch_parts_kernel(const MatvecPartsParams& p, int64_t rows, cudaStream_t stream) {
  constexpr int rows_per_pair_block = 2 * kMatvecWarps / kSplit;
  bool pairs = true;
  for (int i = 0; i < p.n_parts; ++i) pairs = pairs && p.part[i].w.rows % rows_per_pair_block == 0;
  const StreamedBytes weights = streamed_weights({&p.part[0].w, &p.part[1].w, &p.part[2].w});
  if (pairs) {
    launch_kernel_with(matvec_parts_kernel<FA, FB, kSplit, true>, 1, weights, dim3(unsigned(rows / rows_per_pair_block)),
                       dim3(kMatvecWarps * 32), 0, stream, p);
  } else {
    launch_kernel_with(matvec_parts_kernel<FA, FB, kSplit>, 1, weights, dim3(unsigned(rows / (kMatvecWarps / kSplit))),
                       dim3(kMatvecWarps * 32), 0, stream, p);
  }
  NT_CUDA_CHECK_LAUNCH();
}

template <class FA, class FB>
void launch_parts(const MatvecPartsParams& p, int64_t rows, int split, cudaStream_t stream) {
  switch (split) {
    case 1: launch_parts_kernel<FA, FB, 1>(p, rows, stream); break;
    case 2: launch_parts_kernel<FA, FB, 2>(p, rows, stream); break;
    default: launch_parts_kernel<FA, FB, 4>(p, rows, stream); break;
  }
}

using PartsLauncher = void (*)(const MatvecPartsParams&, int64_t, int, cudaStream_t);

// The fused kernel for a format pair it is instantiated for ({a, b} in
// either order, or a alone); null otherwise.
PartsLauncher pair_launcher(TensorType a, TensorType b) {
  auto is = [&](TensorType x, TensorType y) { return (a == x && b == y) || (a == y && b == x); };
  using T = TensorType;
  if (is(T::Q4_K, T::Q6_K) || is(T::Q4_K, T::Q4_K) || is(T::Q6_K, T::Q6_K)) return launch_parts<FormatQ4_K, FormatQ6_K>;
  if (is(T::Q5_K, T::Q6_K) || is(T::Q5_K, T::Q5_K)) return launch_parts<FormatQ5_K, FormatQ6_K>;
  if (is(T::Q4_K, T::Q5_K)) return launch_parts<FormatQ4_K, FormatQ5_K>;
  if (is(T::Q3_K, T::Q4_K) || is(T::Q3_K, T::Q3_K)) return launch_parts<FormatQ3_K, FormatQ4_K>;
  if (is(T::Q3_K, T::Q5_K)) return launch_parts<FormatQ3_K, FormatQ5_K>;
  return nullptr;
}

// How one column goes through the parts: the fused kernel with its row
// split, or (fused null) one mat-vec per part.
struct PartsLaunch {
  PartsLauncher fused = nullptr;
  int split = 0;
  int64_t rows = 0;  // over all parts
};

PartsLaunch plan_parts(const MatvecPartsParams& p) {
  if (p.n_parts < 1 || p.n_parts > kMaxMatvecParts) fail("matvec_parts takes 1 to {} parts, got {}", kMaxMatvecParts, p.n_parts);
  const DeviceMatrix& first = p.part[0].w;
  PartsLaunch launch;
  TensorType other = first.type;
  bool fusable = true;
  for (int i = 0; i < p.n_parts; ++i) {
    const DeviceMatrix& m = p.part[i].w;
    if (m.cols != first.cols) fail("matvec_parts over one input needs equal columns: {} vs {}", m.cols, first.cols);
    if (m.type != first.type) {
      fusable = fusable && (other == first.type || other == m.type);
      other = m.type;
    }
    launch.rows += m.rows;
  }
  if (!p.x.q8 || !p.x.q8_scales) fusable = false;  // matvec() names what is missing
  launch.split = default_warps_per_row(first.cols / 32);  // 32 elements a unit for Q4_K..Q6_K
  for (int i = 0; i < p.n_parts; ++i) fusable = fusable && p.part[i].w.rows % (kMatvecWarps / launch.split) == 0;
  if (fusable && launch.rows > 0) launch.fused = pair_launcher(first.type, other);
  return launch;
}

// Part i alone, over `columns` columns whose outputs lie y_stride apart.
MatvecParams part_params(const MatvecPartsParams& p, int i, int64_t y_stride) {
  MatvecParams one;
  one.w = p.part[i].w;
  one.x = p.x;
  one.norm_in = p.norm_in;
  one.y = p.y + p.part[i].y_offset;
  one.y_stride = y_stride;
  return one;
}

}  // namespace
}  // namespace cuda

void matvec_parts(const MatvecPartsParams& p, cudaStream_t stream) {
  const cuda::PartsLaunch launch = cuda::plan_parts(p);
  if (launch.fused) {
    launch.fused(p, launch.rows, launch.split, stream);
    return;
  }
  for (int i = 0; i < p.n_parts; ++i) matvec(cuda::part_params(p, i, p.part[i].w.rows), 1, stream);
}

namespace cuda {
namespace {

// Part i's stepwise launch: the fused kernel's row split, else the part's own.
MatvecParams stepwise_part(const MatvecPartsParams& p, const PartsLaunch& launch, int i, int64_t y_stride) {
  MatvecParams one = part_params(p, i, y_stride);
  one.warps_per_row = launch.fused ? launch.split : 0;
  return one;
}

}  // namespace
}  // namespace cuda

void matvec_parts_stepwise(const MatvecPartsParams& p, int64_t columns, int64_t y_stride, cudaStream_t stream) {
  if (columns == 1) return matvec_parts(p, stream);
  const cuda::PartsLaunch launch = cuda::plan_parts(p);
  for (int i = 0; i < p.n_parts; ++i) matvec_stepwise(cuda::stepwise_part(p, launch, i, y_stride), columns, stream);
}

bool matvec_parts_stepwise_columns_apart(const MatvecPartsParams& p, int64_t columns) {
  const cuda::PartsLaunch launch = cuda::plan_parts(p);
  for (int i = 0; i < p.n_parts; ++i) {
    if (!matvec_stepwise_columns_apart(cuda::stepwise_part(p, launch, i, 0), columns)) return false;
  }
  return true;
}

}  // namespace nt
