#include "backend/cuda/kernels/matvec_kernel.cuh"

namespace nt::cuda {

bool launch_matvec_kquant(const MatvecParams& p, int columns, cudaStream_t stream) {
  switch (p.w.type) {
    case TensorType::Q2_K: launch_matvec<FormatQ2_K>(p, columns, stream); return true;
    case TensorType::Q3_K: launch_matvec<FormatQ3_K>(p, columns, stream); return true;
    case TensorType::Q4_K:
      if (columns == 1 && p.w_up.rows) {  // the gated decode mat-vec: see FormatQ4_KPair
        launch_matvec_decode<FormatQ4_KPair, true>(p, stream);
      } else {
        launch_matvec<FormatQ4_K>(p, columns, stream);
      }
      return true;
    case TensorType::Q5_K: launch_matvec<FormatQ5_K>(p, columns, stream); return true;
    case TensorType::Q6_K: launch_matvec<FormatQ6_K>(p, columns, stream); return true;
    default: return false;
  }
}

}  // namespace nt::cuda
