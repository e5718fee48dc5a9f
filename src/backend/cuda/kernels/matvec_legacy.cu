#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt::cuda {

bool launch_matvec_legacy(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (p.w.type) {
    case TensorType::Q4_0: launch_matvec<FormatQ4_0>(p, columns, stream); return true;
    case TensorType::Q4_1: launch_matvec<FormatQ4_1>(p, columns, stream); return true;
    case TensorType::Q5_0: launch_matvec<FormatQ5_0>(p, columns, stream); return true;
    case TensorType::Q5_1: launch_matvec<FormatQ5_1>(p, columns, stream); return true;
    case TensorType::Q8_0: launch_matvec<FormatQ8_0>(p, columns, stream); return true;
    case TensorType::MXFP4: launch_matvec<FormatMXFP4>(p, columns, stream); return true;
    default: return false;
  }
}

}  // namespace nt::cuda
