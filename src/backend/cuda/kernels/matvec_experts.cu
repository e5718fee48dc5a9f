// Expert mat-vecs (matvec.h): the mat-vec block of one expert's matrix per
// pair, the expert found on the GPU, so that a decode step's experts take one
// launch for gate and up and one for down (ExpertRows); and the same over a
// wider pass's pairs sorted by expert, a chunk of columns a block (ExpertChunk).
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

// Grid: (row blocks, chunks). As matvec_experts_kernel, with the stepwise
// body over a chunk's columns: each column's operations are the one-column
// body's. Bytes moved: each chunk's expert matrix once (twice gated).
template <class F, bool kGated>
__global__ void __launch_bounds__(cuda::kMatvecWarps * 32)
    matvec_expert_chunks_kernel(const MatvecParams p, const ExpertChunk* chunks, const int32_t* slot_of, uint64_t slot_bytes) {
  const ExpertChunk c = chunks[blockIdx.y];
  const uint64_t shift = uint64_t(slot_of[c.expert]) * slot_bytes;
  MatvecParams q = p;
  for (int k = 0; k < 4; ++k) {
    if (q.w.plane[k]) q.w.plane[k] += shift;
    if (kGated && q.w_up.plane[k]) q.w_up.plane[k] += shift;
  }
  const int64_t cols = p.w.cols;
  if (q.x.f32) q.x.f32 += c.first * cols;
  if (q.x.q8) q.x.q8 += c.first * cols;
  if (q.x.q8_scales) q.x.q8_scales += c.first * cols / 32;
  q.y += c.first * p.y_stride;
  cuda::matvec_block<F, kMatvecMaxColumns, kGated, 1, cuda::kDefaultUnroll<F, kGated>, false, cuda::kMatvecWarps, false,
                     true>(q, blockIdx.x, c.count);
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

template <class F>
void launch_chunks(const MatvecParams& p, const ExpertChunk* chunks, int64_t n_chunks, const int32_t* slot_of,
                   uint64_t slot_bytes, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.w.rows, cuda::kMatvecWarps)), unsigned(n_chunks));
  if (p.w_up.rows) {
    matvec_expert_chunks_kernel<F, true><<<grid, cuda::kMatvecWarps * 32, 0, stream>>>(p, chunks, slot_of, slot_bytes);
  } else {
    matvec_expert_chunks_kernel<F, false><<<grid, cuda::kMatvecWarps * 32, 0, stream>>>(p, chunks, slot_of, slot_bytes);
  }
  NT_CUDA_CHECK_LAUNCH();
}

template <class F>
struct PairsLaunch {
  template <class... Args>
  static void run(Args&&... args) { launch<F>(args...); }
};
template <class F>
struct ChunksLaunch {
  template <class... Args>
  static void run(Args&&... args) { launch_chunks<F>(args...); }
};

// Launch<F>::run(args...) for the weight format F of `type`.
template <template <class> class Launch, class... Args>
void for_format(TensorType type, Args&&... args) {
  using namespace cuda;
  switch (type) {
    case TensorType::F32: return Launch<FormatF32>::run(args...);
    case TensorType::F16: return Launch<FormatF16>::run(args...);
    case TensorType::BF16: return Launch<FormatBF16>::run(args...);
    case TensorType::Q4_0: return Launch<FormatQ4_0>::run(args...);
    case TensorType::Q4_1: return Launch<FormatQ4_1>::run(args...);
    case TensorType::Q5_0: return Launch<FormatQ5_0>::run(args...);
    case TensorType::Q5_1: return Launch<FormatQ5_1>::run(args...);
    case TensorType::Q8_0: return Launch<FormatQ8_0>::run(args...);
    case TensorType::MXFP4: return Launch<FormatMXFP4>::run(args...);
    case TensorType::Q2_K: return Launch<FormatQ2_K>::run(args...);
    case TensorType::Q3_K: return Launch<FormatQ3_K>::run(args...);
    case TensorType::Q4_K: return Launch<FormatQ4_K>::run(args...);
    case TensorType::Q5_K: return Launch<FormatQ5_K>::run(args...);
    case TensorType::Q6_K: return Launch<FormatQ6_K>::run(args...);
    default: weight_layout(type);  // throws naming the unsupported type
  }
}

}  // namespace

void matvec_experts(const MatvecParams& p, const ExpertRows& ix, int64_t pairs, cudaStream_t stream) {
  cuda::check_matvec_operands(p);
  if (pairs == 0) return;
  for_format<PairsLaunch>(p.w.type, p, ix, pairs, stream);
}

void matvec_expert_chunks(const MatvecParams& p, const ExpertChunk* chunks, int64_t n_chunks, const int32_t* slot_of,
                          uint64_t slot_bytes, cudaStream_t stream) {
  cuda::check_matvec_operands(p);
  if (n_chunks == 0) return;
  for_format<ChunksLaunch>(p.w.type, p, chunks, n_chunks, slot_of, slot_bytes, stream);
}

}  // namespace nt
