// Expert mat-vecs (matvec.h, ExpertRows): the mat-vec block of one expert's
// matrix per pair, the expert found on the GPU, so that a decode step's
// experts take one launch for gate and up and one for down.
#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt {
namespace {

// Grid: (row blocks, pairs). The expert's slot is read from the previous
// kernels' outputs, so the launch waits for them in full (a plain launch),
// before its weight loads. Bytes moved: each pair's expert matrix once
// (twice gated), its activations from L1/L2, rows * 4 written a pair.
template <class F, bool kGated>
__global__ void __launch_bounds__(cuda::kMatvecWarps * 32) matvec_experts_kernel(const MatvecParams p, const ExpertRows ix) {
  const int64_t pair = blockIdx.y;
  const uint64_t shift = uint64_t(ix.slot_of[ix.chosen[pair]]) * ix.slot_bytes;
  MatvecParams q = p;
  for (int k = 0; k < 4; ++k) {
    if (q.w.plane[k]) q.w.plane[k] += shift;
    if (kGated && q.w_up.plane[k]) q.w_up.plane[k] += shift;
  }
  const int64_t column = ix.per_pair_input ? pair : pair / ix.k, cols = p.w.cols;
  if (q.x.f32) q.x.f32 += column * cols;
  if (q.x.q8) q.x.q8 += column * cols;
  if (q.x.q8_scales) q.x.q8_scales += column * cols / 32;
  q.y += pair * p.y_stride;
  cuda::matvec_block<F, 1, kGated, 1, cuda::kDefaultUnroll<F, kGated>>(q, blockIdx.x);
}

template <class F>
void launch(const MatvecParams& p, const ExpertRows& ix, int64_t pairs, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.w.rows, cuda::kMatvecWarps)), unsigned(pairs));
  if (p.w_up.rows) {
    matvec_experts_kernel<F, true><<<grid, cuda::kMatvecWarps * 32, 0, stream>>>(p, ix);
  } else {
    matvec_experts_kernel<F, false><<<grid, cuda::kMatvecWarps * 32, 0, stream>>>(p, ix);
  }
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void matvec_experts(const MatvecParams& p, const ExpertRows& ix, int64_t pairs, cudaStream_t stream) {
  cuda::check_matvec_operands(p);
  if (pairs == 0) return;
  using namespace cuda;
  switch (p.w.type) {
    case TensorType::F32: launch<FormatF32>(p, ix, pairs, stream); return;
    case TensorType::F16: launch<FormatF16>(p, ix, pairs, stream); return;
    case TensorType::BF16: launch<FormatBF16>(p, ix, pairs, stream); return;
    case TensorType::Q4_0: launch<FormatQ4_0>(p, ix, pairs, stream); return;
    case TensorType::Q4_1: launch<FormatQ4_1>(p, ix, pairs, stream); return;
    case TensorType::Q5_0: launch<FormatQ5_0>(p, ix, pairs, stream); return;
    case TensorType::Q5_1: launch<FormatQ5_1>(p, ix, pairs, stream); return;
    case TensorType::Q8_0: launch<FormatQ8_0>(p, ix, pairs, stream); return;
    case TensorType::MXFP4: launch<FormatMXFP4>(p, ix, pairs, stream); return;
    case TensorType::Q2_K: launch<FormatQ2_K>(p, ix, pairs, stream); return;
    case TensorType::Q3_K: launch<FormatQ3_K>(p, ix, pairs, stream); return;
    case TensorType::Q4_K: launch<FormatQ4_K>(p, ix, pairs, stream); return;
    case TensorType::Q5_K: launch<FormatQ5_K>(p, ix, pairs, stream); return;
    case TensorType::Q6_K: launch<FormatQ6_K>(p, ix, pairs, stream); return;
    default: weight_layout(p.w.type);  // throws naming the unsupported type
  }
}

}  // namespace nt
