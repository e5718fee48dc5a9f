#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt::cuda {

bool launch_matvec_float(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (p.w.type) {
    case TensorType::F32: launch_matvec<FormatF32>(p, columns, stream); return true;
    case TensorType::F16: launch_matvec<FormatF16>(p, columns, stream); return true;
    case TensorType::BF16: launch_matvec<FormatBF16>(p, columns, stream); return true;
    default: return false;
  }
}

}  // namespace nt::cuda
