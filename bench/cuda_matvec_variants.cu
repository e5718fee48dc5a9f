// Mat-vec tuning sweep for cuda_bench: the production kernel with another
// unroll depth (units of loads in flight per lane) for the main formats.
#include "backend/cuda/matvec_kernel.cuh"

namespace nt::cuda {
namespace {

template <class F, int kU>
struct WithUnroll : F {
  static constexpr int kUnroll = kU;
};

template <class F, int kU>
void launch(const MatvecParams& p, cudaStream_t stream) {
  const unsigned blocks = unsigned((p.w.rows + kMatvecWarps - 1) / kMatvecWarps);
  matvec_kernel<WithUnroll<F, kU>, 1, false><<<blocks, kMatvecWarps * 32, 0, stream>>>(p);
  NT_CUDA_CHECK_LAUNCH();
}

template <class F>
void launch_unroll(int unroll, const MatvecParams& p, cudaStream_t stream) {
  switch (unroll) {
    case 1: launch<F, 1>(p, stream); break;
    case 2: launch<F, 2>(p, stream); break;
    case 4: launch<F, 4>(p, stream); break;
    case 8: launch<F, 8>(p, stream); break;
    default: fail("no variant with unroll {}", unroll);
  }
}

}  // namespace

// One column, no gate: the decode case.
void matvec_variant(int unroll, const MatvecParams& p, cudaStream_t stream) {
  switch (p.w.type) {
    case TensorType::Q4_K: launch_unroll<FormatQ4_K>(unroll, p, stream); break;
    case TensorType::Q6_K: launch_unroll<FormatQ6_K>(unroll, p, stream); break;
    case TensorType::Q8_0: launch_unroll<FormatQ8_0>(unroll, p, stream); break;
    case TensorType::Q4_0: launch_unroll<FormatQ4_0>(unroll, p, stream); break;
    case TensorType::F16: launch_unroll<FormatF16>(unroll, p, stream); break;
    default: fail("no variants for {}", tensor_type_name(p.w.type));
  }
}

}  // namespace nt::cuda
